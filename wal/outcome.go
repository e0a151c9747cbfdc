package wal

import (
	"context"
	"slices"
	"strings"
	"time"
)

// KindOutcome is the frame of a tool outcome (docs/API.md); it joins the
// audit only on request (include=outcome), as autonomy.approval does.
const KindOutcome = "autonomy.outcome"

// IncludeValues are the values of the audit join's include parameter.
var IncludeValues = []string{"outcome", "approval", "all"}

// includeKinds are the frame kinds each include value adds to the default
// join.
var includeKinds = map[string][]string{
	"outcome":  {KindOutcome},
	"approval": {KindApproval},
	"all":      {KindOutcome, KindApproval},
}

// AuditKinds returns the frame kinds of the audit join for the include
// parameter's values (each may be a comma list): the default kinds, then
// what each value adds. ok is false when a value is not one it knows.
func AuditKinds(include []string) (kinds []string, ok bool) {
	kinds = slices.Clone(DefaultAuditKinds)
	for _, v := range include {
		for name := range strings.SplitSeq(v, ",") {
			add, known := includeKinds[strings.TrimSpace(name)]
			if !known {
				return nil, false
			}
			for _, k := range add {
				if !slices.Contains(kinds, k) {
					kinds = append(kinds, k)
				}
			}
		}
	}
	return kinds, true
}

// Outcome values of an autonomy.outcome frame.
const (
	OutcomeOK       = "ok"
	OutcomeViolated = "violated"
)

// What an outcome did to the response (OutcomeAttrs.Effect).
const (
	EffectWarning  = "warning"  // only strict: false clauses failed: released with the warning header
	EffectEnforced = "enforced" // violated, and the caller got the 502
	EffectAdvisory = "advisory" // violated, recorded only
)

// Effect says what the outcome did to the response: EffectWarning,
// EffectEnforced, EffectAdvisory, or "" when it passed untouched.
func (a *OutcomeAttrs) Effect() string {
	switch {
	case a.Warning:
		return EffectWarning
	case a.Outcome == OutcomeViolated && a.Enforced:
		return EffectEnforced
	case a.Outcome == OutcomeViolated:
		return EffectAdvisory
	}
	return ""
}

// Who reported an outcome: the proxy that saw the response, or the tool
// runtime itself (POST /v1/outcome, weaker evidence).
const (
	ReporterEnvoy   = "envoy"
	ReporterGateway = "gateway"
	ReporterRuntime = "runtime"
)

// OutcomeAttrs is the attrs of an autonomy.outcome frame (docs/API.md): what a
// gated call's response was and how its after-call clauses judged it.
type OutcomeAttrs struct {
	// Outcome is OutcomeOK or OutcomeViolated. A response that could not
	// be judged is violated, with reason outcome: unverified.
	Outcome string `json:"outcome"`
	// Reason is "outcome: ok", or the first failure that decided the
	// answer ("clause: postcondition_violated", …).
	Reason string `json:"reason"`
	// Enforced is true when the caller got the 502 instead of the tool's
	// response.
	Enforced bool `json:"enforced"`
	// Warning is true when only strict: false postconditions failed and the
	// response passed with the warning header.
	Warning bool   `json:"warning"`
	Mode    string `json:"mode"`
	// Status is the tool's HTTP status; 0 when no response was seen.
	Status int `json:"status"`
	// ResponseDigest is "sha256:<hex>" of the response body as received
	// (for a runtime's own report, of the canonical JSON of its result).
	ResponseDigest string `json:"response_digest"`
	ResponseBytes  int64  `json:"response_bytes"`
	// ResultJSON reports whether the body was JSON (result is null when not).
	ResultJSON bool            `json:"result_json"`
	Clauses    []OutcomeClause `json:"clauses"`
	StepID     string          `json:"step_id"`
	ToolKind   string          `json:"tool_kind"`
	RequestID  string          `json:"request_id"`
	// PreflightID is empty for a call bound to no preflight.
	PreflightID string `json:"preflight_id"`
	// ReportedBy is ReporterEnvoy, ReporterGateway or ReporterRuntime;
	// Reporter names the token of a runtime's report.
	ReportedBy string `json:"reported_by"`
	Reporter   string `json:"reporter,omitempty"`
	// Detail says why a response could not be judged.
	Detail         string `json:"detail,omitempty"`
	BundleRevision string `json:"bundle_revision,omitempty"`
}

// OutcomeClause is one after-call clause's result in an outcome frame.
type OutcomeClause struct {
	// Kind is postcondition, invariant or output_contract.
	Kind       string         `json:"kind"`
	Index      int            `json:"index"`
	Expression string         `json:"expression"`
	Bindings   map[string]any `json:"bindings"`
	Held       bool           `json:"held"`
	Strict     bool           `json:"strict"`
	Message    string         `json:"message,omitempty"`
	Reason     string         `json:"reason,omitempty"`
}

// OutcomeRecord is an outcome to append under an audit id.
type OutcomeRecord struct {
	AuditID string
	Time    time.Time
	Attrs   OutcomeAttrs
}

// AppendOutcome durably appends the autonomy.outcome frame of rec; the
// response it judges is released only after it returns.
func (db *DB) AppendOutcome(ctx context.Context, rec OutcomeRecord) (Frame, error) {
	if rec.Attrs.Clauses == nil {
		rec.Attrs.Clauses = []OutcomeClause{}
	}
	return db.AppendDecision(ctx, FrameInput{Kind: KindOutcome, AuditID: rec.AuditID, Time: rec.Time, Attrs: &rec.Attrs})
}

// CallDecision finds the autonomy.decision frame under auditID that let
// the gated request requestID through (an allow, or a failure advisory
// mode did not enforce), the latest when there are several. It reports
// ErrNotFound when there is none.
func (db *DB) CallDecision(ctx context.Context, auditID, requestID string) (Frame, error) {
	var found Frame
	err := db.View(func(tx *Tx) error {
		return tx.eachAudit(auditID, func(f Frame) (bool, error) {
			if f.Kind != KindDecision {
				return true, nil
			}
			a, err := f.Decision()
			if err != nil {
				return false, err
			}
			if a.LetThrough(requestID) {
				found = f
			}
			return true, nil
		})
	})
	if err != nil {
		return Frame{}, err
	}
	if found.Seq == 0 {
		return Frame{}, ErrNotFound
	}
	return found, nil
}

// HasOutcome reports whether an autonomy.outcome frame under auditID
// already judges requestID's response.
func (db *DB) HasOutcome(ctx context.Context, auditID, requestID string) (bool, error) {
	var has bool
	err := db.View(func(tx *Tx) error {
		return tx.eachAudit(auditID, func(f Frame) (bool, error) {
			if f.Kind != KindOutcome {
				return true, nil
			}
			a, err := f.Outcome()
			if err != nil {
				return false, err
			}
			has = a.RequestID == requestID
			return !has, nil
		})
	})
	return has, err
}
