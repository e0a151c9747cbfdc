package wal_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/internal/bundle"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// gateFixture is a WAL in a temporary directory and the embedded bundle,
// for driving the real gate (enforce mode) around a compaction.
type gateFixture struct {
	t  *testing.T
	db *wal.DB
	b  *bundle.Bundle
}

func newGateFixture(t *testing.T) *gateFixture {
	t.Helper()
	db, err := wal.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	b, err := bundle.Load(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return &gateFixture{t: t, db: db, b: b}
}

// gate is a gate with a cold cache whose clock reads *now.
func (f *gateFixture) gate(now *time.Time, auditID string) *binding.Gate {
	return binding.New(binding.Options{Store: f.db, Log: f.db, Policy: func() binding.Policy { return f.b },
		Mode: binding.ModeEnforce, Now: func() time.Time { return *now }, NewID: func() string { return auditID }})
}

// record records a one-step tool.shell preflight (tool.shell binds no
// arguments) decided at decided.
func (f *gateFixture) record(id string, decided, expires time.Time) preflight.Binding {
	f.t.Helper()
	pf := preflight.Binding{PreflightID: "pf_" + id, AuditID: "au_" + id, Outcome: preflight.OutcomePass,
		ActorID: "user:example", ExpiresAt: expires,
		Steps: []preflight.BoundStep{{ID: "s1", Kind: "tool.shell", ArgsDigest: "sha256:unused"}}}
	if _, err := f.db.RecordPreflight(context.Background(), wal.PreflightRecord{Binding: pf,
		Decision: json.RawMessage(`{"outcome":"pass"}`), Time: decided}); err != nil {
		f.t.Fatal(err)
	}
	return pf
}

// call is a tool call of kind under pf with the given request id.
func call(g *binding.Gate, pf preflight.Binding, kind, requestID string) binding.Decision {
	return g.Check(context.Background(), &binding.Request{Method: "POST", Path: "/v1/tool",
		Headers: map[string]string{"x-autonomy-preflight-id": pf.PreflightID, "x-request-id": requestID},
		Body:    []byte(`{"kind":"` + kind + `","args":{"cmd":"true"}}`)})
}

// TestCompactionKeepsReplayDenied drives the real gate (enforce mode, the
// embedded bundle) around a compaction: a consumed one-step preflight whose
// binding is still live must keep denying replays after its old neighbours
// are compacted away, even through a gate with a cold cache.
func TestCompactionKeepsReplayDenied(t *testing.T) {
	ctx := context.Background()
	f := newGateFixture(t)
	db := f.db
	decided := time.Date(2026, 6, 23, 14, 29, 0, 0, time.UTC)
	now := decided.Add(time.Minute)
	newGate := func() *binding.Gate { return f.gate(&now, "au_unbound_call_0001") }

	// Old traffic that retention may remove.
	for i := range 5 {
		if _, err := db.AppendDecision(ctx, wal.FrameInput{Kind: wal.KindDecision, AuditID: "au_old_call_000001",
			Time: decided.Add(-40*24*time.Hour + time.Duration(i)*time.Second), Attrs: map[string]any{"outcome": "allow"}}); err != nil {
			t.Fatal(err)
		}
	}
	pf := f.record("live_binding_0001", decided, decided.Add(5*time.Minute))
	if d := call(newGate(), pf, "tool.shell", "req-1"); !d.Allowed {
		t.Fatalf("first call denied: %s", d.Reason)
	}

	// Retention zero: every frame is older than the cut-off, but the
	// preflight's binding is live, so the cut stops at it.
	rep, err := db.Compact(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Frames != 5 || rep.StopReason != wal.StopLiveBinding || rep.ConsumedMarkers != 0 {
		t.Fatalf("compaction = %+v", rep)
	}
	if d := call(newGate(), pf, "tool.shell", "req-2"); d.Allowed || d.Reason != preflight.ReasonReplay {
		t.Fatalf("replay after compaction: allowed=%v reason %q; want %q", d.Allowed, d.Reason, preflight.ReasonReplay)
	}
	if d := call(newGate(), pf, "tool.shell", "req-1"); !d.Allowed {
		t.Fatalf("Envoy's repeat Check of the consuming request after compaction denied: %s", d.Reason)
	}
	if v, err := db.Verify(ctx); err != nil || !v.OK() {
		t.Fatalf("verify = %+v, %v", v, err)
	}

	// Once the binding has expired it may go; the id is then unknown and
	// still denied.
	now = decided.Add(10 * time.Minute)
	rep, err = db.Compact(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if rep.StopReason != wal.StopEnd || rep.Preflights != 1 || rep.ConsumedMarkers != 1 {
		t.Fatalf("compaction after expiry = %+v", rep)
	}
	if d := call(newGate(), pf, "tool.shell", "req-3"); d.Allowed || d.Reason != preflight.ReasonPreflightRequired {
		t.Fatalf("call on a compacted preflight: allowed=%v reason %q", d.Allowed, d.Reason)
	}
	if v, err := db.Verify(ctx); err != nil || !v.OK() {
		t.Fatalf("verify = %+v, %v", v, err)
	}
}

// TestCompactionRacingACheck: a Check that began before its binding expired
// but reaches the log after compaction removed the binding (retention
// shorter than the Check took) must not consume again: the markers went
// with the binding, and a gate still holding the binding in its cache would
// otherwise find every step free. Seen with wal.retention: 1s and a slow
// policy.
func TestCompactionRacingACheck(t *testing.T) {
	ctx := context.Background()
	f := newGateFixture(t)
	db := f.db
	decided := time.Date(2026, 6, 23, 14, 29, 0, 0, time.UTC)
	expires := decided.Add(5 * time.Minute)
	checkTime := expires.Add(-time.Second) // every Check below began before the expiry
	gate := func(name string) *binding.Gate { return f.gate(&checkTime, "au_"+name+"_000000001") }
	pf := f.record("racing_binding_01", decided, expires)
	// A second gate (another replica's view, or a Check already past its
	// lookup) holds the binding in its cache, knowing nothing consumed.
	other := gate("other")
	if d := call(other, pf, "tool.echo", "warm"); d.Reason != preflight.ReasonBindingMismatch {
		t.Fatalf("warming the cache: %+v", d)
	}
	if d := call(gate("first"), pf, "tool.shell", "req-1"); !d.Allowed {
		t.Fatalf("first call denied: %s", d.Reason)
	}
	// Compaction runs with a retention of one second past the expiry.
	rep, err := db.Compact(ctx, expires.Add(time.Second))
	if err != nil || rep.Preflights != 1 || rep.ConsumedMarkers != 1 {
		t.Fatalf("compaction = %+v, %v", rep, err)
	}
	if d := call(other, pf, "tool.shell", "req-2"); d.Allowed || d.Reason != preflight.ReasonExpired {
		t.Fatalf("second use after compaction: allowed=%v reason %q; want %q", d.Allowed, d.Reason, preflight.ReasonExpired)
	}
	if res, err := db.Consume(ctx, wal.ConsumeRequest{Binding: &pf, Kind: "tool.shell", RequestID: "req-3", Time: checkTime}); err != nil || res.Status != wal.Gone {
		t.Fatalf("consume of a compacted binding = %+v, %v; want gone", res, err)
	}
}
