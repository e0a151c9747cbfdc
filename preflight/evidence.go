package preflight

import (
	"fmt"
	"slices"
	"strings"
)

// noEvidenceDeclared is the evidence of the row when no step's capability
// declares evidence.
var noEvidenceDeclared = detailEvidence("no step's capability declares evidence")

// checkExpectedEvidence is contract 5: every step promises the evidence its
// capability is declared to leave, so the audit trail can be checked
// against the plan afterwards.
func checkExpectedEvidence(e *evaluation) (Result, error) {
	r := newRow(ContractExpectedEvidence)
	applies := false
	for i, s := range e.req.Plan.Steps {
		c, ok := e.gov.Capability(s.Kind)
		if !ok || len(c.Evidence) == 0 {
			continue
		}
		applies = true
		var missing []string
		for _, key := range c.Evidence {
			if !slices.Contains(s.ExpectedEvidence, key) {
				missing = append(missing, key)
			}
		}
		if len(missing) > 0 {
			r.repairable(s.ID, stepField(i, "expected_evidence"),
				fmt.Sprintf("expected_evidence lacks %s, declared by %s", strings.Join(missing, ", "), s.Kind),
				slices.Clone(c.Evidence))
		}
	}
	if !applies {
		return notApplicableWith(ContractExpectedEvidence, noEvidenceDeclared), nil
	}
	return r.result(ReasonExpectedEvidenceMissing), nil
}
