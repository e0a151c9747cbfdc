package preflight

import (
	"encoding/json"
	"time"
)

// Outcome is the top-level verdict of a preflight. The enum is closed: no
// other value is ever produced.
type Outcome string

// The three outcomes of docs/API.md#preflightdecision.
const (
	OutcomePass           Outcome = "pass"
	OutcomeRepairRequired Outcome = "repair_required"
	OutcomeDeny           Outcome = "deny"
)

// RowOutcome is the outcome of one contract or clause row.
type RowOutcome string

// Row outcomes.
const (
	RowPass          RowOutcome = "pass"
	RowFail          RowOutcome = "fail"
	RowNotApplicable RowOutcome = "not_applicable"
)

// Severity says whether a failing row affects the top-level outcome.
type Severity string

// Severities.
const (
	SeverityInfo     Severity = "info"
	SeverityBlocking Severity = "blocking"
	SeverityAdvisory Severity = "advisory"
)

// Request is the PreflightRequest of docs/API.md#preflightrequest.
type Request struct {
	Intent  Intent  `json:"intent"`
	Plan    Plan    `json:"plan"`
	Context Context `json:"context"`
}

// Intent states what the plan is for.
type Intent struct {
	Summary  string `json:"summary"`
	PlanHash string `json:"plan_hash,omitempty"`
}

// Plan is the ordered list of tool calls the agent intends to make.
type Plan struct {
	Steps []Step `json:"steps"`
}

// Step is one planned tool call.
type Step struct {
	ID               string            `json:"id"`
	Kind             string            `json:"kind"`
	Zone             string            `json:"zone,omitempty"`
	Args             map[string]any    `json:"args,omitempty"`
	Provenance       map[string]string `json:"provenance,omitempty"`
	DependsOn        []string          `json:"depends_on,omitempty"`
	Rollback         string            `json:"rollback,omitempty"`
	ExpectedEvidence []string          `json:"expected_evidence,omitempty"`
}

// Context carries who asks and what they bring along.
type Context struct {
	Actor            Actor           `json:"actor"`
	Attestation      *Attestation    `json:"attestation,omitempty"`
	DecisionChain    []string        `json:"decision_chain,omitempty"`
	RequiredRollback string          `json:"required_rollback,omitempty"`
	Request          json.RawMessage `json:"request,omitempty"`
}

// Actor identifies the caller and its repair session.
type Actor struct {
	ID        string `json:"id"`
	SessionID string `json:"session_id,omitempty"`
}

// Attestation is the node attestation snapshot presented by the caller.
type Attestation struct {
	NodeID   string `json:"node_id"`
	IssuedAt string `json:"issued_at"`
}

// Decision is the PreflightDecision of docs/API.md#preflightdecision.
type Decision struct {
	PreflightID     string      `json:"preflight_id"`
	AuditID         string      `json:"audit_id"`
	Outcome         Outcome     `json:"outcome"`
	Reason          string      `json:"reason"`
	ContractResults []Result    `json:"contract_results"`
	ClauseResults   []Result    `json:"clause_results"`
	Eligibility     Eligibility `json:"eligibility"`
	Attempt         int         `json:"attempt"`
	DecidedAt       string      `json:"decided_at"`
}

// Result is one row of contract_results or clause_results.
type Result struct {
	Contract    string     `json:"contract"`
	Outcome     RowOutcome `json:"outcome"`
	Severity    Severity   `json:"severity"`
	Reason      string     `json:"reason"`
	RepairHints []Hint     `json:"repair_hints"`
	// Evidence is read-only once the row is made: the rows of a contract
	// with nothing to check share one map across every decision.
	Evidence map[string]any `json:"evidence"`
}

// Hint is a repair hint: Field is a JSON Pointer into the PreflightRequest.
type Hint struct {
	Field      string `json:"field"`
	Suggestion any    `json:"suggestion"`
	Bounded    bool   `json:"bounded"`
}

// Eligibility names what the gate will accept under the preflight id.
type Eligibility struct {
	Allowed          bool     `json:"allowed"`
	RequiredRollback string   `json:"required_rollback,omitempty"`
	BoundToolKinds   []string `json:"bound_tool_kinds"`
	ExpiresAt        string   `json:"expires_at"`
	// ApprovalsRequired lists, on a pass, the steps that wait for a
	// person's approval (docs/API.md); absent when none does.
	ApprovalsRequired []ApprovalRequired `json:"approvals_required,omitempty"`
}

// Binding is what the gate needs to know about a recorded preflight: it is
// derived from the decision and the request when the decision is recorded,
// and stored beside it.
type Binding struct {
	PreflightID string      `json:"preflight_id"`
	AuditID     string      `json:"audit_id"`
	Outcome     Outcome     `json:"outcome"`
	ActorID     string      `json:"actor_id"`
	Tenant      string      `json:"tenant,omitempty"`
	ExpiresAt   time.Time   `json:"expires_at"`
	Steps       []BoundStep `json:"steps"`
}

// BoundStep is one plan step as the gate sees it: its kind and the digest
// of its canonical arguments, and whether it waits for an approval.
type BoundStep struct {
	ID         string `json:"id"`
	Kind       string `json:"kind"`
	ArgsDigest string `json:"args_digest"`
	// Approval is set when the step runs only once approved.
	Approval *StepApproval `json:"approval,omitempty"`
}

// Step returns the bound step with id, or nil.
func (b *Binding) Step(id string) *BoundStep {
	for i := range b.Steps {
		if b.Steps[i].ID == id {
			return &b.Steps[i]
		}
	}
	return nil
}

// NeedsApproval reports whether any step of b waits for an approval.
func (b *Binding) NeedsApproval() bool {
	for i := range b.Steps {
		if b.Steps[i].Approval != nil {
			return true
		}
	}
	return false
}

// Admits reports whether the decision binds tool kind kind.
func (b *Binding) Admits(kind string) bool {
	if b.Outcome != OutcomePass {
		return false
	}
	for _, s := range b.Steps {
		if s.Kind == kind {
			return true
		}
	}
	return false
}
