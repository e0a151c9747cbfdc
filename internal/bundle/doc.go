// Package bundle loads the operator's policy bundle: the Rego policy the gate
// evaluates for every gated request and the governance data (capabilities,
// attestation, clauses) the verifier and the gate read (docs/CLAUSES.md).
//
// A bundle is a directory of *.rego files and data.json/data.yaml files,
// loaded with OPA's own loader. When no directory is given, the default
// bundle embedded in the binary (this package's default/ folder) is used.
// Queries are prepared once at load; a loaded Bundle is immutable and safe
// for concurrent use, so a reload swaps in a new one.
package bundle
