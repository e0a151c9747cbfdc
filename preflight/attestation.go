package preflight

import (
	"fmt"
	"slices"
	"time"
)

// MaxAttestationSkew is how far in the future an attestation's issued_at may
// lie, to absorb clock skew between the node and the verifier.
const MaxAttestationSkew = 30 * time.Second

// noAttestationNeeded is the evidence of the row when no step has side
// effects and attestation is not required.
var noAttestationNeeded = detailEvidence("no step has side effects and attestation is not required")

// checkAttestationFreshness is contract 6: a plan that changes anything, or
// any plan when the operator requires it, comes from an enrolled node that
// attested recently.
func checkAttestationFreshness(e *evaluation) (Result, error) {
	applies := e.gov != nil && e.gov.Attestation.Required
	for _, s := range e.req.Plan.Steps {
		if c, ok := e.gov.Capability(s.Kind); ok && c.SideEffects {
			applies = true
			break
		}
	}
	if !applies {
		return notApplicableWith(ContractAttestationFreshness, noAttestationNeeded), nil
	}
	r := newRow(ContractAttestationFreshness)
	a := e.req.Context.Attestation
	if a == nil {
		r.fail("", "/context/attestation", "an attestation is required")
		return r.result(ReasonAttestationStale), nil
	}
	var policy AttestationPolicy
	if e.gov != nil {
		policy = e.gov.Attestation
	}
	switch {
	case a.NodeID == "":
		r.fail("", "/context/attestation/node_id", "the attestation names no node")
	case len(policy.EnrolledNodes) > 0 && !slices.Contains(policy.EnrolledNodes, a.NodeID):
		r.fail("", "/context/attestation/node_id", fmt.Sprintf("node %q is not enrolled", a.NodeID))
	}
	issued, err := time.Parse(time.RFC3339, a.IssuedAt)
	if err != nil {
		r.fail("", "/context/attestation/issued_at", fmt.Sprintf("issued_at %q is not an RFC 3339 time", a.IssuedAt))
		return r.result(ReasonAttestationStale), nil
	}
	maxAge := time.Duration(policy.MaxAge)
	if maxAge == 0 {
		maxAge = DefaultAttestationMaxAge
	}
	// Times are compared, not a Duration negated: Sub saturates at about
	// 292 years, and negating the most negative Duration leaves it
	// negative, so a year-9999 issued_at would pass as fresh.
	// Ages are told to the second: a decision names what was decided, and
	// two decisions of one request a moment apart read the same.
	switch {
	case e.now.After(issued.Add(maxAge)):
		r.fail("", "/context/attestation/issued_at", fmt.Sprintf("the attestation is %s old; the limit is %s", e.now.Sub(issued).Truncate(time.Second), maxAge))
	case issued.After(e.now.Add(MaxAttestationSkew)):
		r.fail("", "/context/attestation/issued_at", fmt.Sprintf("the attestation is issued %s in the future; the limit is %s", issued.Sub(e.now).Truncate(time.Second), MaxAttestationSkew))
	}
	return r.result(ReasonAttestationStale), nil
}
