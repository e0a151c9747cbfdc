package preflight

import (
	"fmt"
	"slices"
)

// anyZone in a capability's zones admits the capability in every zone.
const anyZone = "*"

// noSteps is the evidence of the row when the plan has no steps.
var noSteps = detailEvidence("the plan has no steps")

// checkCapabilityInZone is contract 3: every step calls a capability the
// operator declared, in a zone it is declared for, and within what the
// envelope lets this request use.
func checkCapabilityInZone(e *evaluation) (Result, error) {
	steps := e.req.Plan.Steps
	if len(steps) == 0 {
		return notApplicableWith(ContractCapabilityInZone, noSteps), nil
	}
	r := newRow(ContractCapabilityInZone)
	for i, s := range steps {
		c, ok := e.gov.Capability(s.Kind)
		if !ok {
			r.fail(s.ID, stepField(i, "kind"), fmt.Sprintf("kind %q is not a capability in the policy bundle", s.Kind))
			continue
		}
		if !slices.Contains(c.Zones, anyZone) && !slices.Contains(c.Zones, s.Zone) {
			msg := fmt.Sprintf("zone %q is not a zone of %s", s.Zone, s.Kind)
			if len(c.Zones) == 0 {
				r.fail(s.ID, stepField(i, "zone"), msg+", which has no zones")
			} else {
				r.repairable(s.ID, stepField(i, "zone"), msg, slices.Min(c.Zones))
			}
		}
		if e.env == nil {
			continue
		}
		if e.env.AllowedTools != nil && !slices.Contains(e.env.AllowedTools, s.Kind) {
			r.fail(s.ID, stepField(i, "kind"), fmt.Sprintf("kind %q is not in the envelope's allowedTools", s.Kind))
		}
		if c.SideEffects && !e.env.ToolPolicy.AllowSideEffects {
			r.fail(s.ID, stepField(i, "kind"), fmt.Sprintf("kind %q has side effects and the envelope's toolPolicy.allowSideEffects is false", s.Kind))
		}
	}
	return r.result(ReasonCapabilityNotInZone), nil
}
