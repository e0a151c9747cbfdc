package preflight

import (
	"encoding/json"
	"fmt"
	"time"
)

// SessionKey names the request's repair session, whose budget of repair
// attempts is durable (docs/API.md#repair-sessions): the actor's
// session id and the plan hash, under the actor's id so that one actor
// cannot spend or read another's budget by naming its session, and under
// tenant (the envelope's, "" without one) so that one tenant cannot spend
// another's; encoded as a JSON array so that no two share a key (a key
// without a tenant keeps the three-element form it always had). ok is
// false when the session id or plan hash is empty.
func (r *Request) SessionKey(tenant string) (key string, ok bool) {
	if r.Context.Actor.SessionID == "" || r.Intent.PlanHash == "" {
		return "", false
	}
	parts := []string{r.Context.Actor.ID, r.Context.Actor.SessionID, r.Intent.PlanHash}
	if tenant != "" {
		parts = append(parts, tenant)
	}
	b, err := json.Marshal(parts)
	if err != nil {
		return "", false
	}
	return string(b), true
}

// BindingOf derives what the gate needs from a recorded decision: its ids
// and outcome, the actor, and each step's kind with the digest of its
// canonical args (absent args digest as {}). The decision's JSON is
// recorded beside it (wal.PreflightRecord). Tenant is left for the caller,
// which holds the validated envelope.
func BindingOf(req *Request, d *Decision, expiresAt time.Time) (Binding, error) {
	if req == nil || d == nil {
		return Binding{}, ErrNilRequest
	}
	b := Binding{
		PreflightID: d.PreflightID,
		AuditID:     d.AuditID,
		Outcome:     d.Outcome,
		ActorID:     req.Context.Actor.ID,
		ExpiresAt:   expiresAt,
		Steps:       make([]BoundStep, 0, len(req.Plan.Steps)),
	}
	approvals := map[string]*ApprovalRequired{}
	for i := range d.Eligibility.ApprovalsRequired {
		a := &d.Eligibility.ApprovalsRequired[i]
		approvals[a.StepID] = a
	}
	for i := range req.Plan.Steps {
		s := &req.Plan.Steps[i]
		digest, err := stepArgsDigest(s)
		if err != nil {
			return Binding{}, fmt.Errorf("digest args of step %d (%s): %w", i, s.ID, err)
		}
		bs := BoundStep{ID: s.ID, Kind: s.Kind, ArgsDigest: digest}
		if a := approvals[s.ID]; a != nil {
			until, err := time.Parse(time.RFC3339Nano, a.ExpiresAt)
			if err != nil {
				return Binding{}, fmt.Errorf("approval expiry of step %d (%s): %w", i, s.ID, err)
			}
			bs.Approval = &StepApproval{Authorities: a.Authorities, ExpiresAt: until}
		}
		b.Steps = append(b.Steps, bs)
	}
	return b, nil
}
