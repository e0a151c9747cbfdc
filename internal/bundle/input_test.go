package bundle_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/contractrefine/autonomy/internal/bundle"
	"github.com/contractrefine/autonomy/internal/bundle/bundletest"
)

// TestReadsInput: the bundle knows which top-level input members its policy
// can read, and says "all" whenever it cannot tell.
func TestReadsInput(t *testing.T) {
	members := []string{"request", "action", "actor", "mode", "preflight"}
	cases := map[string]struct {
		rules string
		reads []string // members read; the others must be reported unread
	}{
		"default bundle shape": {`allow if data.autonomy.capabilities[input.action.kind]`, []string{"action"}},
		"bracket key":          {`allow if input["mode"] == "enforce"`, []string{"mode"}},
		"nested rule and function": {`
allow if ok(input.actor.id)
ok(x) if x != input.request.method`, []string{"actor", "request"}},
		"comprehension":      {`allow if count([h | some h in input.request.headers]) > 0`, []string{"request"}},
		"in another package": {`allow if data.helpers.fine`, []string{"preflight"}},
		"whole input":        {`allow if { x := input; x.mode == "enforce" }`, members},
		"dynamic key":        {`allow if { some k; input[k] == 1 }`, members},
		"walk":               {`allow if { walk(input, [_, v]); v == 1 }`, members},
		"with input":         {`allow if { data.autonomy.x with input as {} }`, members},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := bundletest.Dir(t, map[string]string{
				"policy.rego":  "package autonomy\n\nimport rego.v1\n\n" + tc.rules + "\n",
				"helpers.rego": "package helpers\n\nimport rego.v1\n\nfine if input.preflight.outcome == \"pass\"\n",
			})
			b, err := bundle.Load(context.Background(), dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]bool{}
			for _, m := range tc.reads {
				want[m] = true
			}
			if tc.rules != `allow if data.helpers.fine` {
				want["preflight"] = true // helpers.rego reads it in every case
			}
			for _, m := range members {
				if got := b.ReadsInput(m); got != want[m] {
					t.Errorf("ReadsInput(%q) = %v, want %v", m, got, want[m])
				}
			}
		})
	}
}

// TestAllowValueMatchesAllow: the policy answers the same whether its input
// comes as a Go map or as an OPA value.
func TestAllowValueMatchesAllow(t *testing.T) {
	b, err := bundle.Load(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, kind := range map[string]string{"capability": "tool.echo", "unknown kind": "tool.nope", "not gated": ""} {
		t.Run(name, func(t *testing.T) {
			in := map[string]any{"action": map[string]any{"kind": kind, "args": map[string]any{}}, "mode": "enforce"}
			v, err := ast.InterfaceToValue(in)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			a1, r1, err1 := b.Allow(ctx, in)
			a2, r2, err2 := b.AllowValue(ctx, v)
			if a1 != a2 || r1 != r2 || (err1 == nil) != (err2 == nil) {
				t.Fatalf("Allow %v %q %v; AllowValue %v %q %v", a1, r1, err1, a2, r2, err2)
			}
			if want := kind != "tool.nope"; a1 != want {
				t.Fatalf("allowed %v, want %v (%q)", a1, want, r1)
			}
		})
	}
}

// TestTimeoutNamesTheDeadline: a policy cut off by policy.timeout fails
// with an error that says the deadline passed, whichever part of OPA
// noticed it first.
func TestTimeoutNamesTheDeadline(t *testing.T) {
	policy := "package autonomy\n\nimport rego.v1\n\nallow if {\n\tcount([1 | some i in numbers.range(1, 5000); some j in numbers.range(1, 5000)]) > 0\n}\n"
	dir := bundletest.Dir(t, map[string]string{"policy.rego": policy, "data.yaml": "autonomy:\n  capabilities: {}\n"})
	b, err := bundle.Load(context.Background(), dir, &bundle.Options{PolicyTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		_, _, err := b.AllowValue(context.Background(), ast.NewObject())
		if err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
			t.Fatalf("evaluation %d: %v", i, err)
		}
	}
}
