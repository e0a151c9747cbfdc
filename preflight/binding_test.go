package preflight

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/internal/canon"
)

func TestSessionKey(t *testing.T) {
	cases := map[string]struct {
		actor, session, plan, tenant string
		want                         string
		ok                           bool
	}{
		"both":            {"user:alice", "session:001", "plan-882-v1", "", `["user:alice","session:001","plan-882-v1"]`, true},
		"another actor":   {"user:mallory", "session:001", "plan-882-v1", "", `["user:mallory","session:001","plan-882-v1"]`, true},
		"a tenant":        {"user:alice", "session:001", "plan-882-v1", "acme", `["user:alice","session:001","plan-882-v1","acme"]`, true},
		"another tenant":  {"user:alice", "session:001", "plan-882-v1", "globex", `["user:alice","session:001","plan-882-v1","globex"]`, true},
		"no session":      {"user:alice", "", "plan-882-v1", "acme", "", false},
		"no plan hash":    {"user:alice", "session:001", "", "", "", false},
		"separator in id": {"user:alice", `a","b`, "c", "", `["user:alice","a\",\"b","c"]`, true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := &Request{Intent: Intent{PlanHash: tc.plan}, Context: Context{Actor: Actor{ID: tc.actor, SessionID: tc.session}}}
			got, ok := r.SessionKey(tc.tenant)
			if got != tc.want || ok != tc.ok {
				t.Errorf("SessionKey(%q) = %q, %v; want %q, %v", tc.tenant, got, ok, tc.want, tc.ok)
			}
		})
	}
	a := &Request{Intent: Intent{PlanHash: "b:c"}, Context: Context{Actor: Actor{SessionID: "a"}}}
	b := &Request{Intent: Intent{PlanHash: "c"}, Context: Context{Actor: Actor{SessionID: "a:b"}}}
	ka, _ := a.SessionKey("")
	kb, _ := b.SessionKey("")
	if ka == kb {
		t.Errorf("distinct sessions share key %q", ka)
	}
}

func TestBindingOf(t *testing.T) {
	req := refundRequest(t)
	req.Plan.Steps[0].Args = nil
	d := evaluateCase{}.run(t)
	d.PreflightID, d.AuditID = "pf_0123456789abcdef", "au_0123456789abcdef"
	expires := time.Date(2026, 6, 23, 14, 30, 20, 0, time.UTC)

	b, err := BindingOf(req, d, expires)
	if err != nil {
		t.Fatal(err)
	}
	empty, _ := canon.Digest(map[string]any{})
	// 125.0 and key order change nothing: the digest is over canonical JSON.
	refund, _ := canon.Digest(json.RawMessage(`{"amountUsd":125.0,"caseRef":"case:882"}`))
	want := []BoundStep{
		{ID: "s1", Kind: "customer.read.v3", ArgsDigest: empty},
		{ID: "s2", Kind: "refund.create.v2", ArgsDigest: refund},
	}
	if b.PreflightID != d.PreflightID || b.AuditID != d.AuditID || b.Outcome != OutcomePass ||
		b.ActorID != "user:example" || !b.ExpiresAt.Equal(expires) {
		t.Errorf("binding = %+v", b)
	}
	if len(b.Steps) != 2 || b.Steps[0] != want[0] || b.Steps[1] != want[1] {
		t.Errorf("steps = %+v, want %+v", b.Steps, want)
	}
	if !strings.HasPrefix(b.Steps[1].ArgsDigest, "sha256:") {
		t.Errorf("digest %q", b.Steps[1].ArgsDigest)
	}
	if !b.Admits("refund.create.v2") || b.Admits("tool.echo") {
		t.Error("Admits disagrees with the plan")
	}

	if _, err := BindingOf(nil, d, expires); err == nil {
		t.Error("BindingOf(nil request) succeeded")
	}
	if _, err := BindingOf(req, nil, expires); err == nil {
		t.Error("BindingOf(nil decision) succeeded")
	}
}
