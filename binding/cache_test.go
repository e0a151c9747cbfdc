package binding_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/preflight"
)

// TestCacheChangesNoAnswer runs one script of checks on gates whose binding
// cache keeps, forgets (a 1 s TTL on the injected clock) and evicts (one
// entry) bindings, and on one told of the binding when it was recorded
// (Gate.Recorded, as the preflight API does). The answers must be the same;
// only the lookups differ.
func TestCacheChangesNoAnswer(t *testing.T) {
	b := loadTestBundle(t)
	type step struct {
		advance   time.Duration
		requestID string
		allowed   bool
		reason    string
		stepID    string
	}
	script := []step{
		{0, "req-1", true, preflight.ReasonPassed, "s1"},
		{0, "req-2", true, preflight.ReasonPassed, "s2"},
		{0, "req-3", false, preflight.ReasonReplay, ""},
		{2 * time.Second, "req-4", false, preflight.ReasonReplay, ""},
		{0, "req-1", true, preflight.ReasonPassed, "s1"},
		{30 * time.Second, "req-2", true, preflight.ReasonPassed, "s2"},
		{0, "req-5", false, preflight.ReasonReplay, ""},
		{bindingLife, "req-1", false, preflight.ReasonExpired, ""}, // past expires_at
	}
	caches := map[string]struct {
		opts      func(*binding.Options)
		evictions bool // another preflight's lookups push this one out
		recorded  bool // the gate is handed the binding at record time
		minMisses int64
	}{
		"default":   {opts: func(*binding.Options) {}, minMisses: 1},
		"ttl 1s":    {opts: func(o *binding.Options) { o.CacheTTL = time.Second }, minMisses: 3},
		"one entry": {opts: func(o *binding.Options) { o.CacheSize = 1 }, evictions: true, minMisses: int64(len(script))},
		"recorded":  {opts: func(*binding.Options) {}, recorded: true},
	}
	for name, c := range caches {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, b, binding.ModeEnforce, c.opts)
			pf := e.record(preflight.OutcomePass, actorID, step1("s1"), step1("s2"))
			other := e.record(preflight.OutcomePass, actorID, step1("o1"))
			if c.recorded {
				e.gate.Recorded(&pf)
			}
			for i, s := range script {
				e.clock.Advance(s.advance)
				if c.evictions {
					e.check(toolCall("tool.echo", nil, withID(other.PreflightID, fmt.Sprintf("other-%d", i))))
				}
				d := e.check(toolCall("tool.echo", nil, withID(pf.PreflightID, s.requestID)))
				if d.Allowed != s.allowed || d.Reason != s.reason || d.StepID != s.stepID {
					t.Fatalf("step %d (%s): %+v, want allowed %v %q %q", i, s.requestID, d, s.allowed, s.reason, s.stepID)
				}
			}
			misses := e.obs.misses.Load()
			if c.evictions {
				misses -= int64(len(script)) // the other preflight's own misses
				if e.obs.evictions.Load() == 0 {
					t.Fatal("no eviction reported with a one-entry cache")
				}
			}
			if misses < c.minMisses {
				t.Fatalf("%d misses, want at least %d (hits %d)", misses, c.minMisses, e.obs.hits.Load())
			}
			if name == "default" && (misses != 2 || e.obs.hits.Load() != int64(len(script)-2)) {
				// The first lookup and the one after expires_at passed read
				// the WAL; every lookup between them is a hit.
				t.Fatalf("default cache: %d misses, %d hits, want 2 and %d", misses, e.obs.hits.Load(), len(script)-2)
			}
			if c.recorded && (misses != 1 || e.obs.hits.Load() != int64(len(script)-1)) {
				// Only the lookup after expires_at passed reads the WAL.
				t.Fatalf("recorded binding: %d misses, %d hits, want 1 and %d", misses, e.obs.hits.Load(), len(script)-1)
			}
			t.Logf("hits %d, misses %d, evictions %d", e.obs.hits.Load(), e.obs.misses.Load(), e.obs.evictions.Load())
		})
	}
}

func step1(id string) preflight.Step { return step(id, "tool.echo", nil) }

// TestCacheEntryNeverOutlivesTheBinding: a binding expiring sooner than the
// cache TTL is not served from the cache once it has expired.
func TestCacheEntryNeverOutlivesTheBinding(t *testing.T) {
	e := newEnv(t, loadTestBundle(t), binding.ModeEnforce)
	pf := e.record(preflight.OutcomePass, actorID, step1("s1"), step1("s2"))
	if d := e.check(toolCall("tool.echo", nil, withID(pf.PreflightID, "r1"))); !d.Allowed {
		t.Fatalf("first: %+v", d)
	}
	e.clock.Advance(bindingLife - time.Nanosecond)
	if d := e.check(toolCall("tool.echo", nil, withID(pf.PreflightID, "r2"))); !d.Allowed || d.StepID != "s2" {
		t.Fatalf("just before expiry: %+v", d)
	}
	hits := e.obs.hits.Load()
	e.clock.Advance(time.Nanosecond)
	if d := e.check(toolCall("tool.echo", nil, withID(pf.PreflightID, "r1"))); d.Allowed || d.Reason != preflight.ReasonExpired {
		t.Fatalf("at expires_at, even the consuming request id: %+v", d)
	}
	if e.obs.hits.Load() != hits {
		t.Fatal("an expired binding was served from the cache")
	}
}
