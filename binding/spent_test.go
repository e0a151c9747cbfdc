package binding_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// peekCounter is the real WAL counting the gate's reads of consumed
// markers: a peek, or a consume, whose transaction reads them.
type peekCounter struct {
	*wal.DB
	peeks atomic.Int64
}

func (s *peekCounter) Peek(ctx context.Context, r wal.ConsumeRequest) (wal.ConsumeResult, error) {
	s.peeks.Add(1)
	return s.DB.Peek(ctx, r)
}

func (s *peekCounter) Consume(ctx context.Context, r wal.ConsumeRequest) (wal.ConsumeResult, error) {
	s.peeks.Add(1)
	return s.DB.Consume(ctx, r)
}

// TestSpentStepsAnsweredFromCache: once this gate consumed a step, a replay
// of it by another request id is denied from the cache entry without a read
// of the marker, while every answer the store alone can give (a free step,
// the consuming request id again, an entry rebuilt after eviction) still
// asks the store, and every answer is the one the store gives.
func TestSpentStepsAnsweredFromCache(t *testing.T) {
	b := loadTestBundle(t)
	var store *peekCounter
	e := newEnv(t, b, binding.ModeEnforce, func(o *binding.Options) {
		store = &peekCounter{DB: o.Store.(*wal.DB)}
		o.Store = store
	})
	two := e.record(preflight.OutcomePass, actorID, step("s1", "tool.echo", nil), step("s2", "tool.echo", nil))
	call := func(requestID string) binding.Decision {
		return e.check(toolCall("tool.echo", nil, withID(two.PreflightID, requestID)))
	}
	steps := []struct {
		requestID string
		allowed   bool
		reason    string
		peeked    bool // the store's markers were read
	}{
		{"r1", true, preflight.ReasonPassed, true},   // s1 free
		{"r2", true, preflight.ReasonPassed, true},   // s2 not known consumed: ask
		{"r1", true, preflight.ReasonPassed, true},   // the consuming request again: the store says
		{"r3", false, preflight.ReasonReplay, false}, // both known consumed by others
		{"", false, preflight.ReasonReplay, false},
	}
	for i, s := range steps {
		before := store.peeks.Load()
		d := call(s.requestID)
		if d.Allowed != s.allowed || d.Reason != s.reason {
			t.Fatalf("call %d (%q): allowed %v reason %q, want %v %q", i, s.requestID, d.Allowed, d.Reason, s.allowed, s.reason)
		}
		if got := store.peeks.Load() > before; got != s.peeked {
			t.Fatalf("call %d (%q): store read %v, want %v", i, s.requestID, got, s.peeked)
		}
	}

	// The entry's TTL runs out and the binding is read again: what the old
	// entry knew spent carries over, so a replay still needs no marker read.
	e.clock.Advance(binding.DefaultCacheTTL + time.Second)
	before := store.peeks.Load()
	if d := call("r4"); d.Allowed || d.Reason != preflight.ReasonReplay {
		t.Fatalf("replay after the cache TTL: %+v", d)
	}
	if e.obs.misses.Load() < 2 {
		t.Fatalf("%d cache misses: the entry was not rebuilt after its TTL", e.obs.misses.Load())
	}
	if store.peeks.Load() != before {
		t.Fatal("replay after the cache TTL read the store's markers")
	}

	// A binding consumed before this gate knew it (another gate on the same
	// log): the entry knows nothing, so the store answers, and says replay.
	one := e.record(preflight.OutcomePass, actorID, step("s1", "tool.echo", nil))
	other := binding.New(binding.Options{Store: e.db, Log: e.db, Policy: func() binding.Policy { return b }, Mode: binding.ModeEnforce,
		Now: e.clock.Now, NewID: func() string { return "au_othergate0000001" }})
	if d := other.Check(context.Background(), toolCall("tool.echo", nil, withID(one.PreflightID, "x1"))); !d.Allowed {
		t.Fatalf("consume through the other gate: %+v", d)
	}
	before = store.peeks.Load()
	if d := e.check(toolCall("tool.echo", nil, withID(one.PreflightID, "x2"))); d.Allowed || d.Reason != preflight.ReasonReplay {
		t.Fatalf("replay of a step consumed elsewhere: %+v", d)
	}
	if store.peeks.Load() == before {
		t.Fatal("replay of a step this gate did not consume was answered without the store")
	}
	// The store's replay named the marker it read: the next replay needs
	// no read, and the consuming request id is still answered by the store.
	before = store.peeks.Load()
	if d := e.check(toolCall("tool.echo", nil, withID(one.PreflightID, "x3"))); d.Allowed || d.Reason != preflight.ReasonReplay {
		t.Fatalf("second replay of a step consumed elsewhere: %+v", d)
	}
	if store.peeks.Load() != before {
		t.Fatal("second replay of a step consumed elsewhere read the store again")
	}
	if d := e.check(toolCall("tool.echo", nil, withID(one.PreflightID, "x1"))); !d.Allowed || store.peeks.Load() == before {
		t.Fatalf("the consuming request again: %+v after %d reads, want an allow from the store", d, store.peeks.Load()-before)
	}

	// Args that match no step: a mismatch, known from the binding alone.
	bound := e.record(preflight.OutcomePass, actorID, step("s1", "refund.create.v2", refundArgs))
	if d := e.check(toolCall("refund.create.v2", refundArgs, withID(bound.PreflightID, "a1"))); !d.Allowed {
		t.Fatalf("bound call: %+v", d)
	}
	before = store.peeks.Load()
	other2 := map[string]any{"caseRef": "case:882", "amountUsd": 9999}
	if d := e.check(toolCall("refund.create.v2", other2, withID(bound.PreflightID, "a2"))); d.Allowed || d.Reason != preflight.ReasonBindingMismatch {
		t.Fatalf("other args: %+v", d)
	}
	if d := e.check(toolCall("refund.create.v2", refundArgs, withID(bound.PreflightID, "a3"))); d.Allowed || d.Reason != preflight.ReasonReplay {
		t.Fatalf("same args again: %+v", d)
	}
	if store.peeks.Load() != before {
		t.Fatalf("store read %d times for answers the entry knew", store.peeks.Load()-before)
	}
}

// TestEnforcedConsumeReadsOnce: enforced with PeekInConsume, a call that
// reaches the consume is answered by the consume's own read of the
// markers, with no peek before it; a call that ends before the consume
// (the policy denies it) still peeks, and a replay outranks the policy's
// deny.
func TestEnforcedConsumeReadsOnce(t *testing.T) {
	b := loadTestBundle(t)
	var store *peekOnly
	e := newEnv(t, b, binding.ModeEnforce, func(o *binding.Options) {
		store = &peekOnly{DB: o.Store.(*wal.DB)}
		o.Store = store
		o.PeekInConsume = true
	})
	echo := e.record(preflight.OutcomePass, actorID, step("s1", "tool.echo", nil))
	if d := e.check(toolCall("tool.echo", nil, withID(echo.PreflightID, "r1"))); !d.Allowed || store.peeks.Load() != 0 {
		t.Fatalf("first consume: %+v after %d peeks, want an allow after none", d, store.peeks.Load())
	}

	blocked := e.record(preflight.OutcomePass, actorID, step("s1", "tool.blocked", nil))
	if d := e.check(toolCall("tool.blocked", nil, withID(blocked.PreflightID, "b1"))); d.Allowed || d.Reason == preflight.ReasonReplay || store.peeks.Load() != 1 {
		t.Fatalf("policy deny of a free step: %+v after %d peeks, want the policy's deny after one", d, store.peeks.Load())
	}
	res, err := e.db.Consume(context.Background(), wal.ConsumeRequest{Binding: &blocked, Kind: "tool.blocked", RequestID: "elsewhere", Time: e.clock.Now()})
	if err != nil || res.Status != wal.Consumed {
		t.Fatalf("consume in the store: %+v, %v", res, err)
	}
	if d := e.check(toolCall("tool.blocked", nil, withID(blocked.PreflightID, "b2"))); d.Allowed || d.Reason != preflight.ReasonReplay {
		t.Fatalf("policy-denied replay: %+v, want %s", d, preflight.ReasonReplay)
	}
}

// peekOnly is the real WAL counting peeks alone.
type peekOnly struct {
	*wal.DB
	peeks atomic.Int64
}

func (s *peekOnly) Peek(ctx context.Context, r wal.ConsumeRequest) (wal.ConsumeResult, error) {
	s.peeks.Add(1)
	return s.DB.Peek(ctx, r)
}
