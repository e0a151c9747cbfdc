package preflight

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/contractrefine/autonomy/internal/jsonptr"
	"github.com/contractrefine/autonomy/preflight/envelope"
)

func TestArgumentProvenance(t *testing.T) {
	gov := loadGovernance(t)
	risk := func(level string) *envelope.Envelope {
		env := highRiskEnvelope()
		env.RiskLevel = level
		return env
	}
	const failHead = `{"contract":"argument_provenance","outcome":"fail","severity":"blocking","reason":"contract: argument_provenance_invalid",`
	cases := map[string]struct {
		req  func(*Request)
		env  *envelope.Envelope
		echo bool
		want string
	}{
		"pass": {
			env:  highRiskEnvelope(),
			want: `{"contract":"argument_provenance","outcome":"pass","severity":"blocking","reason":"","repair_hints":[],"evidence":{}}`,
		},
		"125.0 equals input 125": {
			env:  highRiskEnvelope(),
			req:  func(r *Request) { r.Plan.Steps[1].Args["amountUsd"] = json.Number("125.0") },
			want: `{"contract":"argument_provenance","outcome":"pass","severity":"blocking","reason":"","repair_hints":[],"evidence":{}}`,
		},
		"no side effects": {
			echo: true,
			want: `{"contract":"argument_provenance","outcome":"not_applicable","severity":"info","reason":"","repair_hints":[],"evidence":{"detail":"no step's capability has side effects"}}`,
		},
		"input value differs": {
			env: highRiskEnvelope(),
			req: func(r *Request) { r.Plan.Steps[1].Args["amountUsd"] = json.Number("150") },
			want: failHead + `"repair_hints":[{"field":"/plan/steps/1/args/amountUsd","suggestion":125,"bounded":true}],
				"evidence":{"violations":[{"step":"s2","field":"/plan/steps/1/args/amountUsd","message":"argument \"amountUsd\" differs from input \"/amountUsd\" it claims to copy"}]}}`,
		},
		"arg name escaped in the hint field": {
			env: highRiskEnvelope(),
			req: func(r *Request) {
				s := &r.Plan.Steps[1]
				s.Args["a/b~c"] = "x"
				s.Provenance["a/b~c"] = "input:/caseRef"
			},
			want: failHead + `"repair_hints":[{"field":"/plan/steps/1/args/a~1b~0c","suggestion":"case:882","bounded":true}],
				"evidence":{"violations":[{"step":"s2","field":"/plan/steps/1/args/a~1b~0c","message":"argument \"a/b~c\" differs from input \"/caseRef\" it claims to copy"}]}}`,
		},
		"input pointer does not resolve": {
			env: highRiskEnvelope(),
			req: func(r *Request) { r.Plan.Steps[1].Provenance["amountUsd"] = "input:/amount" },
			want: failHead + `"repair_hints":[],
				"evidence":{"violations":[{"step":"s2","field":"/plan/steps/1/provenance/amountUsd","message":"argument \"amountUsd\" comes from input \"/amount\", which does not exist"}]}}`,
		},
		"input without an envelope": {
			want: failHead + `"repair_hints":[],
				"evidence":{"violations":[
					{"step":"s2","field":"/plan/steps/1/provenance/amountUsd","message":"argument \"amountUsd\" comes from the envelope input, but the request has no envelope"},
					{"step":"s2","field":"/plan/steps/1/provenance/caseRef","message":"argument \"caseRef\" comes from the envelope input, but the request has no envelope"}]}}`,
		},
		"missing provenance": {
			env: highRiskEnvelope(),
			req: func(r *Request) { delete(r.Plan.Steps[1].Provenance, "caseRef") },
			want: failHead + `"repair_hints":[],
				"evidence":{"violations":[{"step":"s2","field":"/plan/steps/1/provenance/caseRef","message":"argument \"caseRef\" has no provenance"}]}}`,
		},
		"unknown form": {
			env: highRiskEnvelope(),
			req: func(r *Request) { r.Plan.Steps[1].Provenance["caseRef"] = "user" },
			want: failHead + `"repair_hints":[],
				"evidence":{"violations":[{"step":"s2","field":"/plan/steps/1/provenance/caseRef","message":"argument \"caseRef\" has provenance \"user\"; want input:<pointer>, step:<id>, literal or model"}]}}`,
		},
		"step in depends_on": {
			env:  highRiskEnvelope(),
			req:  func(r *Request) { r.Plan.Steps[1].Provenance["caseRef"] = "step:s1" },
			want: `{"contract":"argument_provenance","outcome":"pass","severity":"blocking","reason":"","repair_hints":[],"evidence":{}}`,
		},
		"step not in depends_on": {
			env: highRiskEnvelope(),
			req: func(r *Request) { r.Plan.Steps[1].Provenance["caseRef"] = "step:s0" },
			want: failHead + `"repair_hints":[],
				"evidence":{"violations":[{"step":"s2","field":"/plan/steps/1/provenance/caseRef","message":"argument \"caseRef\" comes from step \"s0\", which is not in depends_on"}]}}`,
		},
		"literal": {
			req: func(r *Request) {
				r.Plan.Steps[1].Provenance = map[string]string{"caseRef": "literal", "amountUsd": "literal"}
			},
			want: `{"contract":"argument_provenance","outcome":"pass","severity":"blocking","reason":"","repair_hints":[],"evidence":{}}`,
		},
		"model at medium risk": {
			env:  risk("medium"),
			req:  func(r *Request) { r.Plan.Steps[1].Provenance["amountUsd"] = "model" },
			want: `{"contract":"argument_provenance","outcome":"pass","severity":"blocking","reason":"","repair_hints":[],"evidence":{}}`,
		},
		"model at high risk": {
			env: highRiskEnvelope(),
			req: func(r *Request) { r.Plan.Steps[1].Provenance["amountUsd"] = "model" },
			want: failHead + `"repair_hints":[],
				"evidence":{"violations":[{"step":"s2","field":"/plan/steps/1/provenance/amountUsd","message":"argument \"amountUsd\" is model-generated, which a high-risk request does not allow for a side effect"}]}}`,
		},
		"model at critical risk": {
			env: risk("critical"),
			req: func(r *Request) { r.Plan.Steps[1].Provenance["amountUsd"] = "model" },
			want: failHead + `"repair_hints":[],
				"evidence":{"violations":[{"step":"s2","field":"/plan/steps/1/provenance/amountUsd","message":"argument \"amountUsd\" is model-generated, which a critical-risk request does not allow for a side effect"}]}}`,
		},
		"unknown kind is skipped": {
			env: highRiskEnvelope(),
			req: func(r *Request) {
				r.Plan.Steps = append(r.Plan.Steps, Step{ID: "s3", Kind: "unknown.kind", Args: map[string]any{"x": 1}})
			},
			want: `{"contract":"argument_provenance","outcome":"pass","severity":"blocking","reason":"","repair_hints":[],"evidence":{}}`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req := refundRequest(t)
			if tc.echo {
				req = echoRequest(2)
			}
			if tc.req != nil {
				tc.req(req)
			}
			got, err := checkArgumentProvenance(newEvaluation(req, tc.env, gov))
			if err != nil {
				t.Fatal(err)
			}
			assertJSON(t, got, tc.want)
		})
	}
}

func TestResolvePointer(t *testing.T) {
	doc := map[string]any{
		"a":   map[string]any{"b": []any{"x", "y"}},
		"c/d": 1, "e~f": 2, "": 3,
	}
	cases := map[string]struct {
		ptr   string
		want  any
		found bool
	}{
		"whole document": {"", doc, true},
		"nested":         {"/a/b/1", "y", true},
		"escaped slash":  {"/c~1d", 1, true},
		"escaped tilde":  {"/e~0f", 2, true},
		"empty name":     {"/", 3, true},
		"out of range":   {"/a/b/2", nil, false},
		"leading zero":   {"/a/b/01", nil, false},
		"dash":           {"/a/b/-", nil, false},
		"bad escape":     {"/e~2f", nil, false},
		"no slash":       {"a", nil, false},
		"through scalar": {"/c~1d/x", nil, false},
		"missing":        {"/zz", nil, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, found := jsonptr.Resolve(doc, tc.ptr)
			if found != tc.found {
				t.Fatalf("jsonptr.Resolve(%q) found = %v, want %v", tc.ptr, found, tc.found)
			}
			if found && name != "whole document" && got != tc.want {
				t.Errorf("jsonptr.Resolve(%q) = %v, want %v", tc.ptr, got, tc.want)
			}
		})
	}
}

// TestInputHintsAreBounded: many arguments naming one large input value
// each get it as a hint only up to maxInputHintBytes; past that their
// mismatch has no hint, so the row offers none and the decision stays
// small instead of repeating the value once per argument.
func TestInputHintsAreBounded(t *testing.T) {
	gov := loadGovernance(t)
	big := map[string]any{}
	for i := range 2000 {
		big[fmt.Sprintf("key%04d", i)] = i
	}
	input, _ := json.Marshal(map[string]any{"caseRef": "case:882", "amountUsd": 125, "big": big, "small": 7})
	env := highRiskEnvelope()
	env.Input = input
	build := func(args int, pointer string) *Request {
		req := refundRequest(t)
		s := &req.Plan.Steps[1]
		for i := range args {
			name := fmt.Sprintf("y%03d", i)
			s.Args[name] = 1
			s.Provenance[name] = "input:" + pointer
		}
		return req
	}

	// A value of about 28 KB: two hints fit, the third does not.
	got, err := checkArgumentProvenance(newEvaluation(build(300, "/big"), env, gov))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(got)
	violations, _ := got.Evidence["violations"].([]Violation)
	omitted, _ := got.Evidence["violations_omitted"].(int)
	if got.Outcome != RowFail || len(got.RepairHints) != 0 || len(violations)+omitted != 300 || len(out) > 200<<10 {
		t.Fatalf("row %s with %d hints, %d violations, %d bytes; want a failing row without hints, bounded",
			got.Outcome, len(got.RepairHints), len(violations), len(out))
	}
	if m := violations[2].Message; !strings.Contains(m, "hints already hold all the input it offers") {
		t.Errorf("third violation: %q", m)
	}

	// Small values keep their hints, however many arguments name them.
	got, err = checkArgumentProvenance(newEvaluation(build(300, "/small"), env, gov))
	if err != nil {
		t.Fatal(err)
	}
	if got.Outcome != RowFail || len(got.RepairHints) != 300 {
		t.Fatalf("row %s with %d hints, want 300", got.Outcome, len(got.RepairHints))
	}
}
