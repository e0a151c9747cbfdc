package preflight

import (
	"testing"

	"github.com/contractrefine/autonomy/preflight/envelope"
)

func TestCapabilityInZone(t *testing.T) {
	const failHead = `{"contract":"capability_in_zone","outcome":"fail","severity":"blocking","reason":"contract: capability_not_in_zone",`
	const pass = `{"contract":"capability_in_zone","outcome":"pass","severity":"blocking","reason":"","repair_hints":[],"evidence":{}}`
	cases := map[string]struct {
		req  func(*Request)
		env  func(*envelope.Envelope)
		gov  func(*Governance)
		want string
	}{
		"pass": {want: pass},
		"any zone": {
			req:  func(r *Request) { r.Plan.Steps[0].Kind = "tool.echo"; r.Plan.Steps[0].Zone = "lab" },
			env:  func(e *envelope.Envelope) { e.AllowedTools = append(e.AllowedTools, "tool.echo") },
			want: pass,
		},
		"no allowedTools": {env: func(e *envelope.Envelope) { e.AllowedTools = nil }, want: pass},
		"no steps": {
			req:  func(r *Request) { r.Plan.Steps = []Step{} },
			want: `{"contract":"capability_in_zone","outcome":"not_applicable","severity":"info","reason":"","repair_hints":[],"evidence":{"detail":"the plan has no steps"}}`,
		},
		"wrong zone": {
			req: func(r *Request) { r.Plan.Steps[1].Zone = "billing" },
			want: failHead + `"repair_hints":[{"field":"/plan/steps/1/zone","suggestion":"payments","bounded":true}],
				"evidence":{"violations":[{"step":"s2","field":"/plan/steps/1/zone","message":"zone \"billing\" is not a zone of refund.create.v2"}]}}`,
		},
		"missing zone suggests the first zone in sorted order": {
			req: func(r *Request) { r.Plan.Steps[1].Zone = "" },
			gov: func(g *Governance) {
				c := g.Capabilities["refund.create.v2"]
				c.Zones = []string{"payments", "billing"}
				g.Capabilities["refund.create.v2"] = c
			},
			want: failHead + `"repair_hints":[{"field":"/plan/steps/1/zone","suggestion":"billing","bounded":true}],
				"evidence":{"violations":[{"step":"s2","field":"/plan/steps/1/zone","message":"zone \"\" is not a zone of refund.create.v2"}]}}`,
		},
		"capability with no zones": {
			gov: func(g *Governance) {
				c := g.Capabilities["refund.create.v2"]
				c.Zones = nil
				g.Capabilities["refund.create.v2"] = c
			},
			want: failHead + `"repair_hints":[],
				"evidence":{"violations":[{"step":"s2","field":"/plan/steps/1/zone","message":"zone \"payments\" is not a zone of refund.create.v2, which has no zones"}]}}`,
		},
		"unknown kind": {
			req: func(r *Request) { r.Plan.Steps[0].Kind = "customer.read.v4" },
			want: failHead + `"repair_hints":[],
				"evidence":{"violations":[{"step":"s1","field":"/plan/steps/0/kind","message":"kind \"customer.read.v4\" is not a capability in the policy bundle"}]}}`,
		},
		"not in allowedTools": {
			env: func(e *envelope.Envelope) { e.AllowedTools = []string{"customer.read.v3"} },
			want: failHead + `"repair_hints":[],
				"evidence":{"violations":[{"step":"s2","field":"/plan/steps/1/kind","message":"kind \"refund.create.v2\" is not in the envelope's allowedTools"}]}}`,
		},
		"side effects not allowed": {
			env: func(e *envelope.Envelope) { e.ToolPolicy.AllowSideEffects = false },
			want: failHead + `"repair_hints":[],
				"evidence":{"violations":[{"step":"s2","field":"/plan/steps/1/kind","message":"kind \"refund.create.v2\" has side effects and the envelope's toolPolicy.allowSideEffects is false"}]}}`,
		},
		"wrong zone and unknown kind offer no hint": {
			req: func(r *Request) { r.Plan.Steps[1].Zone = "billing"; r.Plan.Steps[0].Kind = "nope" },
			want: failHead + `"repair_hints":[],
				"evidence":{"violations":[
					{"step":"s1","field":"/plan/steps/0/kind","message":"kind \"nope\" is not a capability in the policy bundle"},
					{"step":"s2","field":"/plan/steps/1/zone","message":"zone \"billing\" is not a zone of refund.create.v2"}]}}`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req, env, g := refundRequest(t), highRiskEnvelope(), loadGovernance(t)
			if tc.req != nil {
				tc.req(req)
			}
			if tc.env != nil {
				tc.env(env)
			}
			if tc.gov != nil {
				tc.gov(g)
			}
			got, err := checkCapabilityInZone(newEvaluation(req, env, g))
			if err != nil {
				t.Fatal(err)
			}
			assertJSON(t, got, tc.want)
		})
	}

	t.Run("nil governance fails every kind", func(t *testing.T) {
		got, err := checkCapabilityInZone(newEvaluation(echoRequest(1), nil, nil))
		if err != nil {
			t.Fatal(err)
		}
		assertJSON(t, got, failHead+`"repair_hints":[],
			"evidence":{"violations":[{"step":"e1","field":"/plan/steps/0/kind","message":"kind \"tool.echo\" is not a capability in the policy bundle"}]}}`)
	})
}
