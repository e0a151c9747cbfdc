package preflight

import (
	"fmt"
	"slices"
)

// noRollbackNeeded is the evidence of the row when no step requires a
// rollback and none is required.
var noRollbackNeeded = detailEvidence("no step requires a rollback and none is required")

// checkRollbackContract is contract 4: a step that must be undoable names
// an undo the operator declared, and the rollback the caller requires is
// one the plan provides.
//
// A required rollback that no step provides is repaired on the rollback of
// the first step, in plan order, whose capability declares it, preferring
// one whose own rollback fails and must be repaired anyway. That field
// gets one hint, the required rollback, even when the step has a violation
// of its own: the required rollback is among the capability's rollbacks,
// so it repairs both, and no field is offered two suggestions. When no
// step's capability declares it, the violation has no hint.
func checkRollbackContract(e *evaluation) (Result, error) {
	r := newRow(ContractRollback)
	required := e.req.Context.RequiredRollback
	missing := required != "" && !slices.ContainsFunc(e.req.Plan.Steps, func(s Step) bool { return s.Rollback == required })
	// carrier is the step whose rollback can carry the missing required
	// rollback. A step that must be repaired anyway comes first (carrierFails):
	// its one hint then repairs both violations.
	carrier, carrierFails := -1, false
	if missing {
		declares := func(s Step) (Capability, bool) {
			c, ok := e.gov.Capability(s.Kind)
			return c, ok && slices.Contains(c.Rollbacks, required)
		}
		carrier = slices.IndexFunc(e.req.Plan.Steps, func(s Step) bool {
			c, ok := declares(s)
			return ok && c.RequiresRollback && !slices.Contains(c.Rollbacks, s.Rollback)
		})
		carrierFails = carrier >= 0
		if !carrierFails {
			carrier = slices.IndexFunc(e.req.Plan.Steps, func(s Step) bool { _, ok := declares(s); return ok })
		}
	}
	applies := required != ""
	for i, s := range e.req.Plan.Steps {
		c, ok := e.gov.Capability(s.Kind)
		if !ok || !c.RequiresRollback {
			continue
		}
		applies = true
		if slices.Contains(c.Rollbacks, s.Rollback) {
			continue
		}
		msg := fmt.Sprintf("%s requires a rollback from its declared rollbacks; the step names %q", s.Kind, s.Rollback)
		switch {
		case len(c.Rollbacks) == 0:
			r.fail(s.ID, stepField(i, "rollback"), msg+", and none are declared")
		case i == carrier:
			r.repairable(s.ID, stepField(i, "rollback"), msg, required)
		default:
			r.repairable(s.ID, stepField(i, "rollback"), msg, c.Rollbacks[0])
		}
	}
	if !applies {
		return notApplicableWith(ContractRollback, noRollbackNeeded), nil
	}
	if missing {
		const field = "/context/required_rollback"
		msg := fmt.Sprintf("required rollback %q is not the rollback of any step", required)
		switch {
		case carrier < 0:
			r.fail("", field, msg)
		case carrierFails:
			// The carrier's own hint already sets its rollback to required.
			r.covered("", field, msg)
		default:
			r.covered("", field, msg)
			r.hints = append(r.hints, Hint{Field: stepField(carrier, "rollback"), Suggestion: required, Bounded: true})
		}
	}
	return r.result(ReasonRollbackContractNotReady), nil
}
