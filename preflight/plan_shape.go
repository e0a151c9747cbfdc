package preflight

import (
	"cmp"
	"fmt"
	"slices"
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
		trimmed = stepLimits(r, len(steps), []envelopeLimit{
			{e.env.ToolPolicy.MaxCalls, "toolPolicy.maxCalls"}, {e.env.Budget.MaxToolCalls, "budget.maxToolCalls"}})
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

// envelopeLimit is one of the envelope's limits on the plan's length.
type envelopeLimit struct {
	n    int
	name string
}

// stepLimits records a plan longer than the envelope's limits. Dropping
// steps down to the tightest limit the plan breaks is a mechanical repair,
// one hint that also repairs the looser limits, unless that limit leaves
// no room for a plan at all. It reports whether it offered a repair that
// also brings the plan within MaxPlanSteps.
func stepLimits(r *row, n int, limits []envelopeLimit) bool {
	limits = slices.Clone(limits)
	slices.SortStableFunc(limits, func(a, b envelopeLimit) int { return cmp.Compare(a.n, b.n) })
	offered, trimmed := false, false
	for _, l := range limits {
		if n <= l.n {
			continue
		}
		msg := fmt.Sprintf("the plan has %d steps; the envelope's %s is %d", n, l.name, l.n)
		switch {
		case l.n < 1:
			r.fail("", "/plan/steps", msg)
		case offered:
			r.covered("", "/plan/steps", msg)
		default:
			r.repairable("", "/plan/steps", msg, l.n)
			offered, trimmed = true, l.n <= MaxPlanSteps
		}
	}
	return trimmed
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
