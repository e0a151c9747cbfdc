package preflight

import "testing"

func TestRollbackContract(t *testing.T) {
	const failHead = `{"contract":"rollback_contract","outcome":"fail","severity":"blocking","reason":"contract: rollback_contract_not_ready",`
	const pass = `{"contract":"rollback_contract","outcome":"pass","severity":"blocking","reason":"","repair_hints":[],"evidence":{}}`
	cases := map[string]struct {
		req  func(*Request)
		gov  func(*Governance)
		want string
	}{
		"pass": {want: pass},
		"required rollback given by a step that needs none": {
			req: func(r *Request) {
				r.Plan.Steps = r.Plan.Steps[:1]
				r.Plan.Steps[0].Rollback = "rb.read.noop"
				r.Context.RequiredRollback = "rb.read.noop"
			},
			want: pass,
		},
		"nothing requires a rollback": {
			req: func(r *Request) { r.Plan.Steps = r.Plan.Steps[:1]; r.Context.RequiredRollback = "" },
			want: `{"contract":"rollback_contract","outcome":"not_applicable","severity":"info","reason":"","repair_hints":[],
				"evidence":{"detail":"no step requires a rollback and none is required"}}`,
		},
		"missing rollback": {
			req: func(r *Request) { r.Plan.Steps[1].Rollback = ""; r.Context.RequiredRollback = "" },
			want: failHead + `"repair_hints":[{"field":"/plan/steps/1/rollback","suggestion":"rb.refund.void","bounded":true}],
				"evidence":{"violations":[{"step":"s2","field":"/plan/steps/1/rollback","message":"refund.create.v2 requires a rollback from its declared rollbacks; the step names \"\""}]}}`,
		},
		"undeclared rollback": {
			req: func(r *Request) { r.Plan.Steps[1].Rollback = "rb.refund.undo"; r.Context.RequiredRollback = "" },
			want: failHead + `"repair_hints":[{"field":"/plan/steps/1/rollback","suggestion":"rb.refund.void","bounded":true}],
				"evidence":{"violations":[{"step":"s2","field":"/plan/steps/1/rollback","message":"refund.create.v2 requires a rollback from its declared rollbacks; the step names \"rb.refund.undo\""}]}}`,
		},
		"no declared rollbacks": {
			gov: func(g *Governance) {
				c := g.Capabilities["refund.create.v2"]
				c.Rollbacks = nil
				g.Capabilities["refund.create.v2"] = c
			},
			req: func(r *Request) { r.Context.RequiredRollback = "" },
			want: failHead + `"repair_hints":[],
				"evidence":{"violations":[{"step":"s2","field":"/plan/steps/1/rollback","message":"refund.create.v2 requires a rollback from its declared rollbacks; the step names \"rb.refund.void\", and none are declared"}]}}`,
		},
		"required rollback not in the plan": {
			req: func(r *Request) { r.Context.RequiredRollback = "rb.cancel.mission" },
			want: failHead + `"repair_hints":[],
				"evidence":{"violations":[{"field":"/context/required_rollback","message":"required rollback \"rb.cancel.mission\" is not the rollback of any step"}]}}`,
		},
		"required rollback declared but named by no step": {
			req: func(r *Request) { r.Plan.Steps[1].Rollback = "rb.other" },
			want: failHead + `"repair_hints":[{"field":"/plan/steps/1/rollback","suggestion":"rb.refund.void","bounded":true}],
				"evidence":{"violations":[
					{"step":"s2","field":"/plan/steps/1/rollback","message":"refund.create.v2 requires a rollback from its declared rollbacks; the step names \"rb.other\""},
					{"field":"/context/required_rollback","message":"required rollback \"rb.refund.void\" is not the rollback of any step"}]}}`,
		},
		"required rollback is another declared rollback of the step": {
			gov: addRollback("refund.create.v2", "rb.refund.reverse"),
			req: func(r *Request) { r.Context.RequiredRollback = "rb.refund.reverse" },
			want: failHead + `"repair_hints":[{"field":"/plan/steps/1/rollback","suggestion":"rb.refund.reverse","bounded":true}],
				"evidence":{"violations":[{"field":"/context/required_rollback","message":"required rollback \"rb.refund.reverse\" is not the rollback of any step"}]}}`,
		},
		"undeclared rollback where another declared one is required": {
			gov: addRollback("refund.create.v2", "rb.refund.reverse"),
			req: func(r *Request) {
				r.Plan.Steps[1].Rollback = "rb.other"
				r.Context.RequiredRollback = "rb.refund.reverse"
			},
			want: failHead + `"repair_hints":[{"field":"/plan/steps/1/rollback","suggestion":"rb.refund.reverse","bounded":true}],
				"evidence":{"violations":[
					{"step":"s2","field":"/plan/steps/1/rollback","message":"refund.create.v2 requires a rollback from its declared rollbacks; the step names \"rb.other\""},
					{"field":"/context/required_rollback","message":"required rollback \"rb.refund.reverse\" is not the rollback of any step"}]}}`,
		},
		"required rollback declared by a step that needs none": {
			gov: addRollback("customer.read.v3", "rb.read.noop"),
			req: func(r *Request) {
				r.Plan.Steps = r.Plan.Steps[:1]
				r.Context.RequiredRollback = "rb.read.noop"
			},
			want: failHead + `"repair_hints":[{"field":"/plan/steps/0/rollback","suggestion":"rb.read.noop","bounded":true}],
				"evidence":{"violations":[{"field":"/context/required_rollback","message":"required rollback \"rb.read.noop\" is not the rollback of any step"}]}}`,
		},
		"required rollback hinted on the failing step that declares it": {
			gov: addRollback("customer.read.v3", "rb.refund.void"),
			req: func(r *Request) { r.Plan.Steps[1].Rollback = "rb.other" },
			want: failHead + `"repair_hints":[
					{"field":"/plan/steps/1/rollback","suggestion":"rb.refund.void","bounded":true}],
				"evidence":{"violations":[
					{"step":"s2","field":"/plan/steps/1/rollback","message":"refund.create.v2 requires a rollback from its declared rollbacks; the step names \"rb.other\""},
					{"field":"/context/required_rollback","message":"required rollback \"rb.refund.void\" is not the rollback of any step"}]}}`,
		},
		"required rollback hinted on the first step that declares it": {
			gov: addRollback("customer.read.v3", "rb.read.undo"),
			req: func(r *Request) { r.Context.RequiredRollback = "rb.read.undo" },
			want: failHead + `"repair_hints":[
					{"field":"/plan/steps/0/rollback","suggestion":"rb.read.undo","bounded":true}],
				"evidence":{"violations":[
					{"field":"/context/required_rollback","message":"required rollback \"rb.read.undo\" is not the rollback of any step"}]}}`,
		},
		"required rollback hint dropped beside an unrepairable step": {
			gov: func(g *Governance) {
				addRollback("customer.read.v3", "rb.read.noop")(g)
				c := g.Capabilities["refund.create.v2"]
				c.Rollbacks = nil
				g.Capabilities["refund.create.v2"] = c
			},
			req: func(r *Request) { r.Context.RequiredRollback = "rb.read.noop" },
			want: failHead + `"repair_hints":[],
				"evidence":{"violations":[
					{"step":"s2","field":"/plan/steps/1/rollback","message":"refund.create.v2 requires a rollback from its declared rollbacks; the step names \"rb.refund.void\", and none are declared"},
					{"field":"/context/required_rollback","message":"required rollback \"rb.read.noop\" is not the rollback of any step"}]}}`,
		},
		"required rollback alone applies": {
			req: func(r *Request) { r.Plan.Steps = r.Plan.Steps[:1] },
			want: failHead + `"repair_hints":[],
				"evidence":{"violations":[{"field":"/context/required_rollback","message":"required rollback \"rb.refund.void\" is not the rollback of any step"}]}}`,
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
			got, err := checkRollbackContract(newEvaluation(req, nil, g))
			if err != nil {
				t.Fatal(err)
			}
			assertJSON(t, got, tc.want)
		})
	}
}

// addRollback declares one more rollback for kind in the bundle.
func addRollback(kind, rollback string) func(*Governance) {
	return func(g *Governance) {
		c := g.Capabilities[kind]
		c.Rollbacks = append(c.Rollbacks, rollback)
		g.Capabilities[kind] = c
	}
}
