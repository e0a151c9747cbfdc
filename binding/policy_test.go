package binding_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/preflight"
)

// TestPolicyDecidesInEveryMode: the operator's policy is not governed by
// the mode: the mode governs only the ladder and the clauses. A deny is 403 with its reason in every mode,
// disabled included; an evaluation error is 503 verifier_unavailable in
// every mode, and is recorded.
func TestPolicyDecidesInEveryMode(t *testing.T) {
	b := loadTestBundle(t)
	cases := map[string]struct {
		kind   string
		status int
		reason string
	}{
		"deny with deny_reason": {"tool.blocked", 403, "policy: blocked_by_operator"},
		"allow undefined":       {"tool.undefined", 403, "policy: denied"},
		// The bundle evaluates with strict builtin errors: a failing
		// builtin is an evaluation error, never a quiet "undefined".
		"builtin error":         {"tool.divzero", 503, preflight.ReasonVerifierUnavailable},
		"non-boolean allow":     {"tool.nonbool", 503, preflight.ReasonVerifierUnavailable},
		"conflicting values":    {"tool.conflict", 503, preflight.ReasonVerifierUnavailable},
		"kind not a capability": {"tool.unlisted", 403, "policy: denied"},
	}
	for name, tc := range cases {
		for _, mode := range modes {
			t.Run(name+"/"+string(mode), func(t *testing.T) {
				e := newEnv(t, b, mode)
				d := e.check(toolCall(tc.kind, nil, map[string]string{binding.HeaderRequestID: "req-1"}))
				if d.Allowed || d.Status != tc.status || d.Reason != tc.reason || d.AdvisoryReason != "" {
					t.Fatalf("decision %+v, want %d %q", d, tc.status, tc.reason)
				}
				body := denyBody(t, d.DenyBody())["error"]
				if body["reason"] != tc.reason || body["audit_id"] != d.AuditID {
					t.Fatalf("deny body %s", d.DenyBody())
				}
				frames := e.decisionFrames(d.AuditID)
				if len(frames) != 1 || frames[0].Outcome != "deny" || !frames[0].Enforced ||
					frames[0].Reason != tc.reason || frames[0].Status != tc.status || frames[0].ToolKind != tc.kind {
					t.Fatalf("decision frames %+v", frames)
				}
			})
		}
	}
}

// TestPolicyDenyKeepsThePreflight: a call the policy refuses consumes
// nothing; once the policy allows, the same preflight still allows once.
func TestPolicyDenyKeepsThePreflight(t *testing.T) {
	b := loadTestBundle(t)
	e := newEnv(t, b, binding.ModeEnforce)
	pf := e.record(preflight.OutcomePass, actorID, step("s1", "tool.echo", map[string]any{"msg": "hi"}))
	call := toolCall("tool.echo", map[string]any{"msg": "hi"}, withID(pf.PreflightID, "req-1"))

	e.setPolicy(denyAll{b})
	if d := e.check(call); d.Allowed || d.Reason != "policy: denied" || d.PreflightID != pf.PreflightID {
		t.Fatalf("under a denying policy: %+v", d)
	}
	e.setPolicy(b)
	if d := e.check(withRequestID(call, "req-2")); !d.Allowed || d.Reason != preflight.ReasonPassed || d.StepID != "s1" {
		t.Fatalf("after the policy allows again: %+v", d)
	}
	if d := e.check(withRequestID(call, "req-3")); d.Allowed || d.Reason != preflight.ReasonReplay {
		t.Fatalf("third request: %+v", d)
	}
}

// denyAll is the real bundle with a policy that says no.
type denyAll struct{ binding.Policy }

func (denyAll) Allow(context.Context, map[string]any) (bool, string, error) {
	return false, "policy: denied", nil
}

// TestPolicyInput: the policy sees the mode, the caller and, only when the
// ladder passed, the preflight decision; in advisory a failed ladder gives
// it preflight null and the call continues, the failure recorded in the
// frame and, on an allow, in x-autonomy-advisory-reason.
func TestPolicyInput(t *testing.T) {
	b := loadTestBundle(t)
	cases := map[string]struct {
		mode     binding.Mode
		header   string // "valid", "unknown" or "" (absent)
		reason   string
		advisory string
	}{
		"advisory, no header":  {binding.ModeAdvisory, "", "policy: probe_pf_null_mode_advisory_actor_user_example", preflight.ReasonPreflightRequired},
		"advisory, unknown id": {binding.ModeAdvisory, "unknown", "policy: probe_pf_null_mode_advisory_actor_user_example", preflight.ReasonPreflightRequired},
		"advisory, valid id":   {binding.ModeAdvisory, "valid", "policy: probe_pf_pass_mode_advisory_actor_user_example", ""},
		"enforce, valid id":    {binding.ModeEnforce, "valid", "policy: probe_pf_pass_mode_enforce_actor_user_example", ""},
		"disabled, valid id":   {binding.ModeDisabled, "valid", "policy: probe_pf_null_mode_disabled_actor_user_example", ""},
		"disabled, no header":  {binding.ModeDisabled, "", "policy: probe_pf_null_mode_disabled_actor_user_example", ""},
		"enforce, no header":   {binding.ModeEnforce, "", preflight.ReasonPreflightRequired, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, b, tc.mode)
			pf := e.record(preflight.OutcomePass, actorID, step("s1", "tool.probe", nil))
			h := map[string]string{binding.HeaderRequestID: "req-1"}
			switch tc.header {
			case "valid":
				h[binding.HeaderPreflightID] = pf.PreflightID
			case "unknown":
				h[binding.HeaderPreflightID] = "pf_AAAAAAAAAAAAAAAAAAAAAA"
			}
			r := toolCall("tool.probe", nil, h)
			r.Principal = actorID
			d := e.check(r)
			if d.Allowed || d.Status != http.StatusForbidden || d.Reason != tc.reason || d.AdvisoryReason != tc.advisory {
				t.Fatalf("decision %+v, want %q advisory %q", d, tc.reason, tc.advisory)
			}
			f := e.decisionFrames(d.AuditID)
			if len(f) != 1 || f[0].Reason != tc.reason || f[0].AdvisoryReason != tc.advisory || f[0].Outcome != "deny" {
				t.Fatalf("frame %+v", f)
			}
		})
	}

	// An advisory allow after a failed ladder carries the failure upstream.
	e := newEnv(t, b, binding.ModeAdvisory)
	d := e.check(toolCall("tool.shell", map[string]any{"cmd": "ls"}, map[string]string{binding.HeaderRequestID: "req-1"}))
	if !d.Allowed || d.UpstreamHeaders()[binding.HeaderAdvisoryReason] != preflight.ReasonPreflightRequired {
		t.Fatalf("advisory allow: %+v %v", d, d.UpstreamHeaders())
	}
}

// TestRepeatedRequestID: Envoy may call Check twice for one request; the
// request that consumed a step is allowed again, any other is a replay.
func TestRepeatedRequestID(t *testing.T) {
	b := loadTestBundle(t)
	for _, mode := range []binding.Mode{binding.ModeAdvisory, binding.ModeEnforce} {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnv(t, b, mode)
			pf := e.record(preflight.OutcomePass, actorID, step("s1", "tool.echo", map[string]any{"msg": "hi"}))
			call := toolCall("tool.echo", map[string]any{"msg": "hi"}, withID(pf.PreflightID, "req-A"))
			for i := range 3 {
				if d := e.check(call); !d.Allowed || d.Reason != preflight.ReasonPassed || d.StepID != "s1" || d.AdvisoryReason != "" {
					t.Fatalf("check %d of req-A: %+v", i+1, d)
				}
				e.clock.Advance(1) // the repeat is a later call
			}
			d := e.check(withRequestID(call, "req-B"))
			switch mode {
			case binding.ModeEnforce:
				if d.Allowed || d.Reason != preflight.ReasonReplay {
					t.Fatalf("req-B: %+v", d)
				}
			case binding.ModeAdvisory:
				if !d.Allowed || d.AdvisoryReason != preflight.ReasonReplay || d.StepID != "" {
					t.Fatalf("req-B: %+v", d)
				}
			}
			if d := e.check(call); !d.Allowed || d.StepID != "s1" {
				t.Fatalf("req-A after req-B: %+v", d)
			}
			frames := e.decisionFrames(pf.AuditID)
			allows := 0
			for _, f := range frames {
				if f.Outcome == "allow" {
					allows++
					if f.RequestID != "req-A" {
						t.Fatalf("an allow frame for %q", f.RequestID)
					}
				}
			}
			if len(frames) != 5 || allows != 4 {
				t.Fatalf("%d frames, %d allows: %+v", len(frames), allows, frames)
			}
		})
	}
}

// TestRepeatNeedsTheSameArgs: a repeat of the consuming request id with
// other args is another call, so a replay: a client that picks its request
// id cannot spend one step on many calls. The body's key order and number
// spelling do not matter (the canonical digest), and the answer is the
// same from the cache and from the store after a restart.
func TestRepeatNeedsTheSameArgs(t *testing.T) {
	e := newEnv(t, loadTestBundle(t), binding.ModeEnforce)
	pf := e.record(preflight.OutcomePass, actorID, step("s1", "tool.echo", map[string]any{"msg": "hi", "n": 1}))
	call := toolCall("tool.echo", map[string]any{"msg": "hi", "n": 1}, withID(pf.PreflightID, "req-A"))
	if d := e.check(call); !d.Allowed || d.StepID != "s1" {
		t.Fatalf("first: %+v", d)
	}
	same := toolCall("tool.echo", nil, withID(pf.PreflightID, "req-A"))
	same.Body = []byte(`{"args":{"n":1.0,"msg":"hi"},"kind":"tool.echo"}`)
	other := toolCall("tool.echo", map[string]any{"msg": "rm -rf /", "n": 1}, withID(pf.PreflightID, "req-A"))
	for _, g := range []*binding.Gate{e.gate, binding.New(e.opts)} { // warm cache, then a cold one
		if d := g.Check(context.Background(), same); !d.Allowed || d.StepID != "s1" {
			t.Fatalf("repeat with the same args: %+v", d)
		}
		if d := g.Check(context.Background(), other); d.Allowed || d.Reason != preflight.ReasonReplay {
			t.Fatalf("repeat with other args: %+v", d)
		}
	}
}

// TestNoRequestIDIsNotARepeat: two requests without x-request-id are two
// requests, not one repeated.
func TestNoRequestIDIsNotARepeat(t *testing.T) {
	e := newEnv(t, loadTestBundle(t), binding.ModeEnforce)
	pf := e.record(preflight.OutcomePass, actorID, step("s1", "tool.echo", nil))
	call := toolCall("tool.echo", nil, map[string]string{binding.HeaderPreflightID: pf.PreflightID})
	if d := e.check(call); !d.Allowed {
		t.Fatalf("first: %+v", d)
	}
	if d := e.check(call); d.Allowed || d.Reason != preflight.ReasonReplay {
		t.Fatalf("second without a request id: %+v", d)
	}
}

// TestMultiStepPlanConsumesEachStepOnce: a plan with two steps of one kind
// allows two requests, in plan order, then replays.
func TestMultiStepPlanConsumesEachStepOnce(t *testing.T) {
	e := newEnv(t, loadTestBundle(t), binding.ModeEnforce)
	pf := e.record(preflight.OutcomePass, actorID,
		step("s1", "tool.echo", nil), step("s2", "tool.shell", map[string]any{"cmd": "ls"}), step("s3", "tool.echo", nil))
	echo := toolCall("tool.echo", nil, withID(pf.PreflightID, "r1"))
	for i, want := range []string{"s1", "s3"} {
		if d := e.check(withRequestID(echo, want)); !d.Allowed || d.StepID != want {
			t.Fatalf("echo %d: %+v", i, d)
		}
	}
	if d := e.check(withRequestID(echo, "r3")); d.Allowed || d.Reason != preflight.ReasonReplay {
		t.Fatalf("third echo: %+v", d)
	}
	shell := toolCall("tool.shell", map[string]any{"cmd": "ls"}, withID(pf.PreflightID, "r4"))
	if d := e.check(shell); !d.Allowed || d.StepID != "s2" {
		t.Fatalf("shell: %+v", d)
	}
}
