package bundle_test

import (
	"context"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/contractrefine/autonomy/internal/bundle"
	"github.com/contractrefine/autonomy/internal/bundle/bundletest"
)

// policyBundle loads a bundle whose package autonomy holds rules, with a
// helper package that may hold more.
func policyBundle(t *testing.T, rules, helpers string) *bundle.Bundle {
	t.Helper()
	return bundletest.Load(t, map[string]string{
		"policy.rego":  "package autonomy\n\nimport rego.v1\n\n" + rules + "\n",
		"helpers.rego": "package helpers\n\nimport rego.v1\n\n" + helpers + "\n",
	}, nil)
}

// TestAnswersKeptOnlyForPurePolicies: a policy keeps its answers only when
// nothing but its input and data decides them; any clock, randomness,
// network, output or builtin it cannot name makes it keep none.
func TestAnswersKeptOnlyForPurePolicies(t *testing.T) {
	cases := map[string]struct {
		rules, helpers string
		keeps          bool
	}{
		"default shape":     {`allow if data.autonomy.capabilities[input.action.kind]`, `x := 1`, true},
		"pure builtins":     {`allow if { startswith(input.action.kind, "tool."); count(input.action.args) < 3 }`, `x := sprintf("%d", [1])`, true},
		"own function":      {`allow if data.helpers.short(input.action.kind)`, `short(k) if count(k) < 20`, true},
		"clock":             {`allow if time.now_ns() > 0`, `x := 1`, false},
		"clock in a helper": {`allow if data.helpers.late`, `late if time.now_ns() > 0`, false},
		"clock mocked":      {`allow if { data.helpers.x with time.now_ns as 1 }`, `x := 1`, false},
		// The mock calls the builtin in the place of the function.
		"clock as a mock": {`allow if { [ok, _, _] := data.helpers.v(input.actor.token, {"secret": "s"}) with data.helpers.v as io.jwt.decode_verify; ok }`,
			`v(t, k) := [true, {}, {}] if t != k`, false},
		"network as a mock": {`allow if { data.helpers.get({"method": "GET", "url": "http://127.0.0.1:1"}).status_code == 200 with data.helpers.get as http.send }`,
			`get(r) := {"status_code": 200} if r.method == "GET"`, false},
		"random as a mock":  {`allow if { lower("k") == "k" with lower as uuid.rfc4122 }`, `x := 1`, false},
		"random":            {`allow if rand.intn("k", 10) < 5`, `x := 1`, false},
		"network":           {`allow if http.send({"method": "GET", "url": "http://127.0.0.1:1"}).status_code == 200`, `x := 1`, false},
		"runtime":           {`allow if opa.runtime().env.X == "1"`, `x := 1`, false},
		"uuid":              {`allow if uuid.rfc4122("k") != ""`, `x := 1`, false},
		"jwt against clock": {`allow if { [ok, _, _] := io.jwt.decode_verify(input.actor.token, {"secret": "s"}); ok }`, `x := 1`, false},
		// The compiler drops print calls unless print is enabled, which the
		// bundle never does: they change nothing.
		"print": {`allow if { print(input.action.kind); true }`, `x := 1`, true},
		// Inputs that never repeat are not kept.
		"reads the request":   {`allow if input.request.method == "POST"`, `x := 1`, false},
		"reads the preflight": {`allow if data.helpers.passed`, `passed if input.preflight.outcome == "pass"`, false},
		"reads all of input":  {`allow if { x := input; x.mode == "enforce" }`, `x := 1`, false},
		"reads actor, mode":   {`allow if { input.actor.id != ""; input.mode == "enforce" }`, `x := 1`, true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b := policyBundle(t, tc.rules, tc.helpers)
			if keeps := b.AnswersKept() >= 0; keeps != tc.keeps {
				t.Errorf("keeps answers %v, want %v", keeps, tc.keeps)
			}
		})
	}
}

// input is the gate's input for a call of kind with args.
func input(kind string, args map[string]any) ast.Value {
	v, err := ast.InterfaceToValue(map[string]any{"action": map[string]any{"kind": kind, "args": args}})
	if err != nil {
		panic(err)
	}
	return v
}

// TestAnswersByInput: a kept answer is given again only for the same
// input; different inputs, however alike, are evaluated and answered each
// for itself; errors and inputs too big to keep are never kept.
func TestAnswersByInput(t *testing.T) {
	b := policyBundle(t, `
allow if { input.action.kind == "tool.a"; 10 / input.action.args.n > 1 }
deny_reason := "not_a" if input.action.kind != "tool.a"`, `x := 1`)
	ctx := context.Background()
	type want struct {
		allowed bool
		reason  string
		err     bool
	}
	calls := []struct {
		in   ast.Value
		want want
	}{
		{input("tool.a", map[string]any{"n": 2}), want{allowed: true}},
		{input("tool.b", map[string]any{"n": 2}), want{reason: "policy: not_a"}},
		{input("tool.a", map[string]any{"n": 20}), want{reason: "policy: denied"}},
		{input("tool.a", map[string]any{"n": "2"}), want{err: true}}, // a string where a number goes
		{input("tool.a", map[string]any{"n": 0}), want{err: true}},   // division by zero
		{input(`tool.a", "x`, map[string]any{"n": 2}), want{reason: "policy: not_a"}},
	}
	for round := range 3 {
		for i, c := range calls {
			allowed, reason, err := b.AllowValue(ctx, c.in)
			if allowed != c.want.allowed || reason != c.want.reason || (err != nil) != c.want.err {
				t.Errorf("round %d, call %d: %v %q %v; want %+v", round, i, allowed, reason, err, c.want)
			}
		}
	}
	if got := b.AnswersKept(); got != 4 {
		t.Errorf("%d answers kept, want 4 (the errors are not)", got)
	}
	big := input("tool.a", map[string]any{"n": 2, "pad": strings.Repeat("x", 4096)})
	for range 2 {
		if allowed, _, err := b.AllowValue(ctx, big); !allowed || err != nil {
			t.Fatalf("big input: %v %v, want allowed", allowed, err)
		}
	}
	if got := b.AnswersKept(); got != 4 {
		t.Errorf("%d answers kept after a big input, want 4", got)
	}
}

// TestAnswersNotKeptWhenTheReasonFails: a deny whose deny_reason fails is
// answered "policy: denied" but not kept, so a later evaluation that names
// the reason is not shadowed; ForgetAnswers drops what was kept.
func TestAnswersNotKeptWhenTheReasonFails(t *testing.T) {
	b := policyBundle(t, `
allow if input.action.kind == "tool.a"
deny_reason := sprintf("%d", [10 / input.action.args.n])`, `x := 1`)
	ctx := context.Background()
	for range 2 {
		if allowed, reason, err := b.AllowValue(ctx, input("tool.b", map[string]any{"n": 0})); allowed || reason != "policy: denied" || err != nil {
			t.Fatalf("deny whose reason fails: %v %q %v", allowed, reason, err)
		}
	}
	if got := b.AnswersKept(); got != 0 {
		t.Fatalf("%d answers kept, want none: the reason failed", got)
	}
	if _, reason, _ := b.AllowValue(ctx, input("tool.b", map[string]any{"n": 5})); reason != "policy: 2" {
		t.Fatalf("reason %q, want policy: 2", reason)
	}
	if got := b.AnswersKept(); got != 1 {
		t.Fatalf("%d answers kept, want 1", got)
	}
	b.ForgetAnswers()
	if got := b.AnswersKept(); got != 0 {
		t.Fatalf("%d answers kept after ForgetAnswers, want none", got)
	}
}
