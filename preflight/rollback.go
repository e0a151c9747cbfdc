package preflight

import (
	"fmt"
	"slices"
)

// checkRollbackContract is contract 4: a step that must be undoable names
// an undo the operator declared, and the rollback the caller requires is
// one the plan provides.
func checkRollbackContract(e *evaluation) (Result, error) {
	r := newRow(ContractRollback)
	required := e.req.Context.RequiredRollback
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
		if len(c.Rollbacks) == 0 {
			r.fail(s.ID, stepField(i, "rollback"), msg+", and none are declared")
		} else {
			r.repairable(s.ID, stepField(i, "rollback"), msg, c.Rollbacks[0])
		}
	}
	if !applies {
		return notApplicable(ContractRollback, "no step requires a rollback and none is required"), nil
	}
	if required != "" && !slices.ContainsFunc(e.req.Plan.Steps, func(s Step) bool { return s.Rollback == required }) {
		r.fail("", "/context/required_rollback", fmt.Sprintf("required rollback %q is not the rollback of any step", required))
	}
	return r.result(ReasonRollbackContractNotReady), nil
}
