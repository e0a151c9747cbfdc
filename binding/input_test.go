package binding

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/internal/bundle/bundletest"
	"github.com/contractrefine/autonomy/internal/ids"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// pfPolicy allows a preflighted tool.echo call only when the policy sees
// the preflight decision, and says what it saw otherwise.
const pfPolicy = `package autonomy

import rego.v1

allow if input.preflight.eligibility.allowed == true

deny_reason := sprintf("saw %v", [input.preflight])
`

// mapPolicy hides the bundle's AllowValue, so the gate takes its Go map path.
type mapPolicy struct{ Policy }

// TestPreflightDecisionReachesThePolicy: the binding cache keeps no decision,
// yet a policy that reads input.preflight sees it on a cache miss (read from
// the WAL's frame: the lookup reads only the compact binding record), on a
// cache hit (from the decision cache) and after
// the decision cache lost it (read again from the WAL), through both input
// paths.
func TestPreflightDecisionReachesThePolicy(t *testing.T) {
	b := bundletest.Load(t, map[string]string{"policy.rego": pfPolicy,
		"data.yaml": "autonomy:\n  capabilities:\n    tool.echo: { zones: [\"*\"] }\n"}, nil)
	if !b.ReadsInput("preflight") || b.ReadsInput("actor") {
		t.Fatalf("reads preflight %v, actor %v", b.ReadsInput("preflight"), b.ReadsInput("actor"))
	}
	for name, pol := range map[string]Policy{"value input": b, "map input": mapPolicy{b}} {
		t.Run(name, func(t *testing.T) {
			db, err := wal.Open(t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			now := time.Date(2026, 6, 23, 14, 29, 0, 0, time.UTC)
			g := New(Options{Store: db, Log: db, Policy: func() Policy { return pol }, Mode: ModeEnforce,
				Now: func() time.Time { return now }, NewID: ids.Audit})
			pid := recordThreeEchoSteps(t, db, now)
			call := func(rid string) Decision {
				return g.Check(context.Background(), &Request{Method: http.MethodPost, Path: "/v1/tool",
					Headers: map[string]string{HeaderPreflightID: pid, HeaderRequestID: rid},
					Body:    []byte(`{"kind":"tool.echo","args":{}}`)})
			}
			// In this order: each call consumes one of the three steps.
			calls := map[string]func(){
				"cache miss":                 func() {},
				"cache hit":                  func() {},
				"cache hit, decision purged": func() { g.decisions.Purge() },
			}
			for i, step := range []string{"cache miss", "cache hit", "cache hit, decision purged"} {
				calls[step]()
				if got := call(step); !got.Allowed {
					t.Fatalf("call %d (%s): %+v", i, step, got)
				}
			}
			if e, ok := g.cache.Peek(pid); !ok || e.id() != pid {
				t.Fatalf("cache entry %+v, %v: want the binding", e, ok)
			}
		})
	}
}

// recordThreeEchoSteps records a passed preflight of three tool.echo steps
// for user:x, bound until a minute after now, and returns its id.
func recordThreeEchoSteps(t *testing.T, db *wal.DB, now time.Time) string {
	t.Helper()
	steps := []preflight.Step{{ID: "s1", Kind: "tool.echo"}, {ID: "s2", Kind: "tool.echo"}, {ID: "s3", Kind: "tool.echo"}}
	req := &preflight.Request{Plan: preflight.Plan{Steps: steps}, Context: preflight.Context{Actor: preflight.Actor{ID: "user:x"}}}
	d := &preflight.Decision{PreflightID: ids.Preflight(), AuditID: ids.Audit(), Outcome: preflight.OutcomePass,
		Eligibility: preflight.Eligibility{Allowed: true, BoundToolKinds: []string{"tool.echo"}}}
	bind, err := preflight.BindingOf(req, d, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := d.CanonicalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.RecordPreflight(context.Background(), wal.PreflightRecord{Binding: bind, Decision: raw, Time: now}); err != nil {
		t.Fatal(err)
	}
	return d.PreflightID
}

// TestAdvisoryClauseFailureKeepsThePreflight: in advisory mode a call whose
// ladder passed and whose clause failed is recorded and goes on to the
// policy, which still sees the preflight it is bound to.
func TestAdvisoryClauseFailureKeepsThePreflight(t *testing.T) {
	b := bundletest.Load(t, map[string]string{"policy.rego": pfPolicy,
		"data.yaml": "autonomy:\n  capabilities:\n    tool.echo:\n      zones: [\"*\"]\n      contract:\n        preconditions: [\"has(args.ok)\"]\n"}, nil)
	db, err := wal.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Date(2026, 6, 23, 14, 29, 0, 0, time.UTC)
	g := New(Options{Store: db, Log: db, Policy: func() Policy { return b }, Mode: ModeAdvisory,
		Now: func() time.Time { return now }, NewID: ids.Audit})
	pid := recordThreeEchoSteps(t, db, now)
	d := g.Check(context.Background(), &Request{Method: http.MethodPost, Path: "/v1/tool",
		Headers: map[string]string{HeaderPreflightID: pid, HeaderRequestID: "r1"},
		Body:    []byte(`{"kind":"tool.echo","args":{}}`)})
	if !d.Allowed || d.AdvisoryReason != "clause: precondition_violated" {
		t.Fatalf("advisory call breaking a precondition: %+v, want allowed by the policy that saw its preflight, the clause recorded", d)
	}
}
