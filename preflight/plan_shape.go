package preflight

import (
	"fmt"
	"strconv"
)

// MaxPlanSteps is the largest plan plan_shape accepts.
const MaxPlanSteps = 32

// checkPlanShape is contract 1: the plan is a well-formed, ordered list of
// calls, and no longer than the envelope lets the agent call tools.
func checkPlanShape(e *evaluation) (Result, error) {
	r := newRow(ContractPlanShape)
	steps := e.req.Plan.Steps
	r.evidence["steps"] = len(steps)
	// Trimming the plan to an envelope limit of at most MaxPlanSteps also
	// repairs a plan that is too long in itself.
	trimmed := false
	if e.env != nil {
		trimmed = stepLimit(r, len(steps), e.env.ToolPolicy.MaxCalls, "toolPolicy.maxCalls")
		trimmed = stepLimit(r, len(steps), e.env.Budget.MaxToolCalls, "budget.maxToolCalls") || trimmed
	}
	switch {
	case len(steps) == 0:
		r.fail("", "/plan/steps", "the plan has no steps; it needs 1 to "+strconv.Itoa(MaxPlanSteps))
	case len(steps) > MaxPlanSteps:
		msg := fmt.Sprintf("the plan has %d steps; at most %d are allowed", len(steps), MaxPlanSteps)
		if trimmed {
			r.covered("", "/plan/steps", msg)
		} else {
			r.fail("", "/plan/steps", msg)
		}
	}

	earlier := make(map[string]bool, len(steps))
	for i, s := range steps {
		switch {
		case s.ID == "":
			r.fail("", stepField(i, "id"), "step id is empty")
		case earlier[s.ID]:
			r.fail(s.ID, stepField(i, "id"), fmt.Sprintf("step id %q is used by an earlier step", s.ID))
		}
		if !e.kinds.Valid(s.Kind) {
			r.fail(s.ID, stepField(i, "kind"), fmt.Sprintf("kind %q does not match %s", s.Kind, e.kinds.Pattern()))
		}
		for j, dep := range s.DependsOn {
			if !earlier[dep] {
				r.fail(s.ID, stepField(i, "depends_on/"+strconv.Itoa(j)),
					fmt.Sprintf("depends_on %q does not name an earlier step", dep))
			}
		}
		if s.ID != "" {
			earlier[s.ID] = true
		}
	}
	return r.result(ReasonPlanShapeInvalid), nil
}

// stepLimit records a plan longer than an envelope limit. Dropping steps
// down to the limit is a mechanical repair unless the limit leaves no
// room for a plan at all. It reports whether it offered a repair that also
// brings the plan within MaxPlanSteps.
func stepLimit(r *row, n, limit int, name string) bool {
	if n <= limit {
		return false
	}
	msg := fmt.Sprintf("the plan has %d steps; the envelope's %s is %d", n, name, limit)
	if limit < 1 {
		r.fail("", "/plan/steps", msg)
		return false
	}
	r.repairable("", "/plan/steps", msg, limit)
	return limit <= MaxPlanSteps
}

// validKind reports whether kind matches ^[a-z][a-z0-9_.-]*$.
func validKind(kind string) bool {
	if kind == "" || kind[0] < 'a' || kind[0] > 'z' {
		return false
	}
	for i := 1; i < len(kind); i++ {
		c := kind[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && c != '.' && c != '-' {
			return false
		}
	}
	return true
}
