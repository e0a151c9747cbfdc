// Package explain serves the operator's explain page, /ui/audit/{audit_id}:
// one audit id's preflight verdict, tool decisions and tool outcomes,
// rendered on the server with html/template from the WAL's audit join, so
// it can be read in any browser (or curl) with no JavaScript, no build step
// and no assets fetched from elsewhere.
//
// Advisory failures (a failed row that does not affect the verdict, such as
// decision_chain_complete offline) carry their own class and a visible
// "advisory" label, apart from blocking failures, so a reader never takes
// a signal that did not decide for one that did.
package explain
