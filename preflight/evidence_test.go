package preflight

import "testing"

func TestExpectedEvidence(t *testing.T) {
	const failHead = `{"contract":"expected_evidence","outcome":"fail","severity":"blocking","reason":"contract: expected_evidence_missing",`
	const pass = `{"contract":"expected_evidence","outcome":"pass","severity":"blocking","reason":"","repair_hints":[],"evidence":{}}`
	cases := map[string]struct {
		req  func(*Request)
		gov  func(*Governance)
		want string
	}{
		"pass":                {want: pass},
		"extra keys are fine": {req: func(r *Request) { r.Plan.Steps[1].ExpectedEvidence = []string{"audit.id", "receipt.id"} }, want: pass},
		"no evidence declared": {
			req: func(r *Request) { r.Plan.Steps = r.Plan.Steps[:1] },
			want: `{"contract":"expected_evidence","outcome":"not_applicable","severity":"info","reason":"","repair_hints":[],
				"evidence":{"detail":"no step's capability declares evidence"}}`,
		},
		"missing key": {
			req: func(r *Request) { r.Plan.Steps[1].ExpectedEvidence = nil },
			want: failHead + `"repair_hints":[{"field":"/plan/steps/1/expected_evidence","suggestion":["receipt.id"],"bounded":true}],
				"evidence":{"violations":[{"step":"s2","field":"/plan/steps/1/expected_evidence","message":"expected_evidence lacks receipt.id, declared by refund.create.v2"}]}}`,
		},
		"hint is the full list": {
			gov: func(g *Governance) {
				c := g.Capabilities["refund.create.v2"]
				c.Evidence = []string{"receipt.id", "ledger.entry"}
				g.Capabilities["refund.create.v2"] = c
			},
			want: failHead + `"repair_hints":[{"field":"/plan/steps/1/expected_evidence","suggestion":["receipt.id","ledger.entry"],"bounded":true}],
				"evidence":{"violations":[{"step":"s2","field":"/plan/steps/1/expected_evidence","message":"expected_evidence lacks ledger.entry, declared by refund.create.v2"}]}}`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req, g := refundRequest(t), loadGovernance(t)
			if tc.req != nil {
				tc.req(req)
			}
			if tc.gov != nil {
				tc.gov(g)
			}
			got, err := checkExpectedEvidence(newEvaluation(req, nil, g))
			if err != nil {
				t.Fatal(err)
			}
			assertJSON(t, got, tc.want)
		})
	}
}
