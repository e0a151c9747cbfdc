package preflight

import (
	"fmt"
	"time"
)

// Governance is the operator's governance configuration: the data under
// `autonomy` in the policy bundle (docs/CLAUSES.md). Both the verifier and the gate
// read it.
type Governance struct {
	Capabilities map[string]Capability `json:"capabilities"`
	Attestation  AttestationPolicy     `json:"attestation"`
}

// Capability describes one tool kind the operator allows agents to use.
type Capability struct {
	Zones             []string      `json:"zones"`
	SideEffects       bool          `json:"side_effects"`
	RequiresPreflight bool          `json:"requires_preflight"`
	RequiresRollback  bool          `json:"requires_rollback"`
	Rollbacks         []string      `json:"rollbacks"`
	Evidence          []string      `json:"evidence"`
	BindArguments     bool          `json:"bind_arguments"`
	Contract          *ContractSpec `json:"contract,omitempty"`
	// PermissionClass names the capability's class for an envelope's
	// approvalPolicy.requiredFor, e.g. "financial-high-impact".
	PermissionClass string `json:"permission_class,omitempty"`
	// Approval, when Required, makes every step of the kind wait for a
	// person's decision before the gate lets it run (approvals.go).
	Approval *ApprovalSpec `json:"approval,omitempty"`
}

// ContractSpec is a capability's user-declared clauses (docs/CLAUSES.md), written in
// CEL over `args` (and `result`, `old(...)` for postconditions).
type ContractSpec struct {
	Preconditions  []string `json:"preconditions,omitempty"`
	Invariants     []string `json:"invariants,omitempty"`
	Postconditions []string `json:"postconditions,omitempty"`
	Message        string   `json:"message,omitempty"`
	// Strict, when false, downgrades postcondition failures to a logged
	// warning. Nil means true.
	Strict *bool `json:"strict,omitempty"`
	// Validate, when false, makes the contract documentation only. Nil
	// means true.
	Validate *bool `json:"validate,omitempty"`
}

// AttestationPolicy configures the attestation_freshness contract.
type AttestationPolicy struct {
	Required      bool     `json:"required"`
	MaxAge        Duration `json:"max_age"`
	EnrolledNodes []string `json:"enrolled_nodes"`
}

// DefaultAttestationMaxAge is the attestation age limit when the bundle sets none.
const DefaultAttestationMaxAge = 10 * time.Minute

// Duration is a time.Duration written as a Go duration string ("10m").
type Duration time.Duration

// UnmarshalJSON parses a duration string such as "90s" or "10m".
func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) < 2 || b[0] != '"' || b[len(b)-1] != '"' {
		return fmt.Errorf("duration must be a string such as \"10m\", got %s", b)
	}
	v, err := time.ParseDuration(string(b[1 : len(b)-1]))
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("duration %s is negative", v)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Duration(d).String() + `"`), nil
}

// Capability returns the capability for kind and whether it exists.
func (g *Governance) Capability(kind string) (Capability, bool) {
	if g == nil {
		return Capability{}, false
	}
	c, ok := g.Capabilities[kind]
	return c, ok
}

// RequiresPreflight reports whether a gated call of kind needs a preflight id.
// A kind the bundle does not list requires none: only the operator's
// governance makes a kind need one.
func (g *Governance) RequiresPreflight(kind string) bool {
	c, ok := g.Capability(kind)
	return ok && c.RequiresPreflight
}

// ClauseViolation is one failed user-declared clause.
type ClauseViolation struct {
	Kind       string // capability kind
	Clause     string // "precondition" or "invariant"
	Index      int    // position in the declared list
	Expression string
	Message    string // names the expression and the values it saw, or the contract's message
	Reason     string // "clause: precondition_violated" or "clause: invariant_violated"
}

// ClauseChecker evaluates the preconditions and invariants a capability
// declares on one call's arguments. The bundle compiles it once at load.
type ClauseChecker interface {
	Check(kind string, args map[string]any) []ClauseViolation
	// Unseen returns a violation for each clause Check would evaluate for
	// kind, for a call whose args cannot be seen (a gate check without a
	// body): judged on {}, a clause might pass that the real args break.
	Unseen(kind string) []ClauseViolation
}
