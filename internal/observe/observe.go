// Package observe holds the events the gate and the preflight core report
// to their observers (the metrics and the tracing), in terms that name none
// of the packages that decide them, so an observer depends on this package
// alone.
package observe

import "time"

// Check is how one gate check ended.
type Check struct {
	AuditID     string
	PreflightID string // empty when the call named none the gate knows
	ToolKind    string
	Mode        string
	// Outcome ("allow" or "deny"), Reason and Enforced are what the
	// check's decision frame records.
	Outcome  string
	Reason   string
	Enforced bool
	Status   int // the HTTP status of the answer
}

// Preflight is one decided preflight.
type Preflight struct {
	AuditID        string
	PreflightID    string
	Outcome        string
	Reason         string
	Attempt        int
	BundleRevision string
	Took           time.Duration // from the submission's arrival to its decision
}
