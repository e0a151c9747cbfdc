package preflight

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/contractrefine/autonomy/preflight/envelope"
)

func TestPlanShape(t *testing.T) {
	gov := loadGovernance(t)
	withLimits := func(maxCalls, maxToolCalls int) *envelope.Envelope {
		env := highRiskEnvelope()
		env.ToolPolicy.MaxCalls, env.Budget.MaxToolCalls = maxCalls, maxToolCalls
		return env
	}
	cases := map[string]struct {
		req  func(*Request)
		env  *envelope.Envelope
		n    int // echo steps; 0 means the refund plan
		want string
	}{
		"pass with envelope": {
			env:  highRiskEnvelope(),
			want: `{"contract":"plan_shape","outcome":"pass","severity":"blocking","reason":"","repair_hints":[],"evidence":{"steps":2}}`,
		},
		"no steps": {
			req: func(r *Request) { r.Plan.Steps = []Step{} },
			want: `{"contract":"plan_shape","outcome":"fail","severity":"blocking","reason":"contract: plan_shape_invalid","repair_hints":[],
				"evidence":{"steps":0,"violations":[{"field":"/plan/steps","message":"the plan has no steps; it needs 1 to 32"}]}}`,
		},
		"more than 32 steps without envelope": {
			n: 33,
			want: `{"contract":"plan_shape","outcome":"fail","severity":"blocking","reason":"contract: plan_shape_invalid","repair_hints":[],
				"evidence":{"steps":33,"violations":[{"field":"/plan/steps","message":"the plan has 33 steps; at most 32 are allowed"}]}}`,
		},
		"more than 32 steps repaired by the envelope limit": {
			n: 33, env: withLimits(5, 40),
			want: `{"contract":"plan_shape","outcome":"fail","severity":"blocking","reason":"contract: plan_shape_invalid",
				"repair_hints":[{"field":"/plan/steps","suggestion":5,"bounded":true}],
				"evidence":{"steps":33,"violations":[
					{"field":"/plan/steps","message":"the plan has 33 steps; the envelope's toolPolicy.maxCalls is 5"},
					{"field":"/plan/steps","message":"the plan has 33 steps; at most 32 are allowed"}]}}`,
		},
		"duplicate id": {
			req: func(r *Request) { r.Plan.Steps[1].ID = "s1"; r.Plan.Steps[1].DependsOn = nil },
			want: `{"contract":"plan_shape","outcome":"fail","severity":"blocking","reason":"contract: plan_shape_invalid","repair_hints":[],
				"evidence":{"steps":2,"violations":[{"step":"s1","field":"/plan/steps/1/id","message":"step id \"s1\" is used by an earlier step"}]}}`,
		},
		"empty id": {
			req: func(r *Request) { r.Plan.Steps[0].ID = ""; r.Plan.Steps[1].DependsOn = nil },
			want: `{"contract":"plan_shape","outcome":"fail","severity":"blocking","reason":"contract: plan_shape_invalid","repair_hints":[],
				"evidence":{"steps":2,"violations":[{"field":"/plan/steps/0/id","message":"step id is empty"}]}}`,
		},
		"kind not matching the pattern": {
			req: func(r *Request) { r.Plan.Steps[0].Kind = "Customer.Read" },
			want: `{"contract":"plan_shape","outcome":"fail","severity":"blocking","reason":"contract: plan_shape_invalid","repair_hints":[],
				"evidence":{"steps":2,"violations":[{"step":"s1","field":"/plan/steps/0/kind","message":"kind \"Customer.Read\" does not match ^[a-z][a-z0-9_.-]*$"}]}}`,
		},
		"depends_on a later step": {
			req: func(r *Request) { r.Plan.Steps[0].DependsOn = []string{"s2"} },
			want: `{"contract":"plan_shape","outcome":"fail","severity":"blocking","reason":"contract: plan_shape_invalid","repair_hints":[],
				"evidence":{"steps":2,"violations":[{"step":"s1","field":"/plan/steps/0/depends_on/0","message":"depends_on \"s2\" does not name an earlier step"}]}}`,
		},
		"depends_on itself": {
			req: func(r *Request) { r.Plan.Steps[1].DependsOn = []string{"s1", "s2"} },
			want: `{"contract":"plan_shape","outcome":"fail","severity":"blocking","reason":"contract: plan_shape_invalid","repair_hints":[],
				"evidence":{"steps":2,"violations":[{"step":"s2","field":"/plan/steps/1/depends_on/1","message":"depends_on \"s2\" does not name an earlier step"}]}}`,
		},
		"over toolPolicy.maxCalls": {
			env: withLimits(1, 4),
			want: `{"contract":"plan_shape","outcome":"fail","severity":"blocking","reason":"contract: plan_shape_invalid",
				"repair_hints":[{"field":"/plan/steps","suggestion":1,"bounded":true}],
				"evidence":{"steps":2,"violations":[{"field":"/plan/steps","message":"the plan has 2 steps; the envelope's toolPolicy.maxCalls is 1"}]}}`,
		},
		"over both limits": {
			env: withLimits(1, 1),
			want: `{"contract":"plan_shape","outcome":"fail","severity":"blocking","reason":"contract: plan_shape_invalid",
				"repair_hints":[{"field":"/plan/steps","suggestion":1,"bounded":true}],
				"evidence":{"steps":2,"violations":[
					{"field":"/plan/steps","message":"the plan has 2 steps; the envelope's toolPolicy.maxCalls is 1"},
					{"field":"/plan/steps","message":"the plan has 2 steps; the envelope's budget.maxToolCalls is 1"}]}}`,
		},
		// One hint, the tighter limit, which the looser one also accepts:
		// two suggestions for one field would leave the caller to pick.
		"over two different limits": {
			n: 3, env: withLimits(2, 1),
			want: `{"contract":"plan_shape","outcome":"fail","severity":"blocking","reason":"contract: plan_shape_invalid",
				"repair_hints":[{"field":"/plan/steps","suggestion":1,"bounded":true}],
				"evidence":{"steps":3,"violations":[
					{"field":"/plan/steps","message":"the plan has 3 steps; the envelope's budget.maxToolCalls is 1"},
					{"field":"/plan/steps","message":"the plan has 3 steps; the envelope's toolPolicy.maxCalls is 2"}]}}`,
		},
		"limit of zero has no repair": {
			env: withLimits(0, 4),
			want: `{"contract":"plan_shape","outcome":"fail","severity":"blocking","reason":"contract: plan_shape_invalid","repair_hints":[],
				"evidence":{"steps":2,"violations":[{"field":"/plan/steps","message":"the plan has 2 steps; the envelope's toolPolicy.maxCalls is 0"}]}}`,
		},
		"repairable and unrepairable together offer no hint": {
			env: withLimits(1, 4),
			req: func(r *Request) { r.Plan.Steps[0].Kind = "9lives" },
			want: `{"contract":"plan_shape","outcome":"fail","severity":"blocking","reason":"contract: plan_shape_invalid","repair_hints":[],
				"evidence":{"steps":2,"violations":[
					{"field":"/plan/steps","message":"the plan has 2 steps; the envelope's toolPolicy.maxCalls is 1"},
					{"step":"s1","field":"/plan/steps/0/kind","message":"kind \"9lives\" does not match ^[a-z][a-z0-9_.-]*$"}]}}`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := refundRequest(t)
			if tc.n > 0 {
				req = echoRequest(tc.n)
			}
			if tc.req != nil {
				tc.req(req)
			}
			got, err := checkPlanShape(newEvaluation(req, tc.env, gov))
			if err != nil {
				t.Fatal(err)
			}
			assertJSON(t, got, tc.want)
		})
	}
}

func TestValidKind(t *testing.T) {
	cases := map[string]bool{
		"tool.echo": true, "refund.create.v2": true, "a": true, "a-b_c.d9": true,
		"": false, "Tool": false, "9a": false, "a b": false, "a/b": false, "_a": false, "aé": false,
	}
	for kind, want := range cases {
		t.Run(kind, func(t *testing.T) {
			if got := validKind(kind); got != want {
				t.Errorf("validKind(%q) = %v, want %v", kind, got, want)
			}
		})
	}
}

func TestKindRules(t *testing.T) {
	cases := map[string][2]bool{ // kind → valid under the tool rule, the MCP rule
		"tool.echo": {true, true}, "get_weather": {true, true}, "GetWeather": {false, true},
		"9lives": {false, true}, "_x": {false, true}, "a-b.C_9": {false, true},
		"": {false, false}, "a b": {false, false}, "a/b": {false, false}, "aé": {false, false},
		strings.Repeat("a", MaxMCPToolName): {true, true}, strings.Repeat("a", MaxMCPToolName+1): {true, false},
	}
	for kind, want := range cases {
		if got := [2]bool{KindRuleTool.Valid(kind), KindRuleMCP.Valid(kind)}; got != want {
			t.Errorf("%q: tool, mcp rules say %v, want %v", kind, got, want)
		}
	}
}

// TestPlanShapeFollowsTheKindRule: under gate.protocol mcp a plan step may
// name any MCP tool, and the failure names the rule in force.
func TestPlanShapeFollowsTheKindRule(t *testing.T) {
	req := &Request{Plan: Plan{Steps: []Step{{ID: "s1", Kind: "GetWeather"}}}}
	for rule, want := range map[KindRule]string{KindRuleTool: "^[a-z][a-z0-9_.-]*$", KindRuleMCP: ""} {
		r, err := checkPlanShape(&evaluation{req: req, kinds: rule})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal(r)
		if (want == "") != (r.Outcome == RowPass) || !strings.Contains(string(got), want) {
			t.Errorf("rule %d: %s, want a failure naming %q (or a pass for none)", rule, got, want)
		}
	}
}

// TestViolationsBounded: a row lists at most 100 violations, and none
// past 64 KiB of their text after the first, and counts the rest; a long
// step id with thousands of depends_on entries naming nothing made an
// answer 1,600 times the request's size before.
func TestViolationsBounded(t *testing.T) {
	gov := loadGovernance(t)
	for name, tc := range map[string]struct {
		id         string
		deps       int
		wantListed int
	}{
		"many short":        {"s1", 2000, maxRowViolations},
		"long id":           {strings.Repeat("S", 25000), 2000, 2},
		"one past the size": {strings.Repeat("S", maxRowViolationBytes), 3, 1},
		"under the bounds":  {"s1", 40, 40},
	} {
		t.Run(name, func(t *testing.T) {
			req := echoRequest(1)
			req.Plan.Steps[0].ID = tc.id
			req.Plan.Steps[0].DependsOn = make([]string, tc.deps)
			got, err := checkPlanShape(newEvaluation(req, nil, gov))
			if err != nil {
				t.Fatal(err)
			}
			if got.Outcome != RowFail || got.Reason != ReasonPlanShapeInvalid {
				t.Fatalf("row %s %s, want a plan_shape_invalid fail", got.Outcome, got.Reason)
			}
			listed := got.Evidence["violations"].([]Violation)
			omitted, _ := got.Evidence["violations_omitted"].(int)
			if len(listed) != tc.wantListed || omitted != tc.deps-tc.wantListed {
				t.Fatalf("%d violations listed and %d omitted, want %d and %d", len(listed), omitted, tc.wantListed, tc.deps-tc.wantListed)
			}
			if _, ok := got.Evidence["violations_omitted"]; ok != (omitted > 0) {
				t.Fatalf("violations_omitted present %v with %d omitted", ok, omitted)
			}
			b, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if limit := len(tc.id) + maxRowViolationBytes + maxRowViolations*128; len(b) > limit {
				t.Fatalf("row is %d bytes, want at most %d", len(b), limit)
			}
		})
	}
}
