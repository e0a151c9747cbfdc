package binding_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// BenchmarkCheckConsume is one allowed tool call in enforce mode: the
// binding looked up (from the WAL on a cold cache, from the cache when
// warm), the policy evaluated, one step consumed and the decision frame
// committed before the answer. Without fsync it shows what the commit costs.
func BenchmarkCheckConsume(b *testing.B) {
	bun := loadTestBundle(b)
	for _, sync := range []bool{true, false} {
		for _, warm := range []bool{false, true} {
			b.Run(fmt.Sprintf("fsync=%v/warm=%v", sync, warm), func(b *testing.B) {
				e := newEnvWAL(b, bun, binding.ModeEnforce, &wal.Options{NoSync: !sync})
				pfs := recordMany(b, e, b.N)
				if warm {
					// A call the ladder refuses still caches the binding.
					for _, pf := range pfs {
						if d := e.check(toolCall("tool.shell", nil, withID(pf.PreflightID, "warm"))); d.Reason != preflight.ReasonBindingMismatch {
							b.Fatalf("warm-up: %+v", d)
						}
					}
				}
				misses := e.obs.misses.Load()
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					d := e.check(toolCall("tool.echo", nil, withID(pfs[i].PreflightID, "req")))
					if !d.Allowed || d.StepID != "s1" {
						b.Fatalf("call %d: %+v", i, d)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(e.obs.misses.Load()-misses)/float64(b.N), "misses/op")
			})
		}
	}
}

// BenchmarkCheckReplay is a replayed id: a cache hit, the consumed marker
// read, the policy, and the deny's decision frame committed.
func BenchmarkCheckReplay(b *testing.B) {
	bun := loadTestBundle(b)
	for _, sync := range []bool{true, false} {
		b.Run(fmt.Sprintf("fsync=%v", sync), func(b *testing.B) {
			e := newEnvWAL(b, bun, binding.ModeEnforce, &wal.Options{NoSync: !sync})
			pf := recordMany(b, e, 1)[0]
			if d := e.check(toolCall("tool.echo", nil, withID(pf.PreflightID, "first"))); !d.Allowed {
				b.Fatalf("first use: %+v", d)
			}
			reqs := make([]*binding.Request, b.N)
			for i := range reqs {
				reqs[i] = toolCall("tool.echo", nil, withID(pf.PreflightID, fmt.Sprintf("req-%d", i)))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if d := e.check(reqs[i]); d.Allowed || d.Reason != preflight.ReasonReplay {
					b.Fatalf("call %d: %+v", i, d)
				}
			}
		})
	}
}

// BenchmarkCacheFootprint is the heap one cached binding holds: n one-step
// bindings looked up once each into an empty cache (by a Check naming
// another kind, which caches the binding and consumes nothing), the live
// heap read after a collection before and after. Each id is a fresh string,
// as a request's header is.
func BenchmarkCacheFootprint(b *testing.B) {
	const n = 20000
	e := newEnvWAL(b, loadTestBundle(b), binding.ModeEnforce, &wal.Options{NoSync: true})
	pfs := recordMany(b, e, n)
	var perBinding float64
	b.ResetTimer()
	for range b.N {
		g := binding.New(e.opts)
		before := liveHeap()
		for i := range pfs {
			r := toolCall("tool.shell", nil, withID(strings.Clone(pfs[i].PreflightID), "warm"))
			if d := g.Check(context.Background(), r); d.Reason != preflight.ReasonBindingMismatch {
				b.Fatalf("lookup %d: %+v", i, d)
			}
		}
		perBinding = float64(liveHeap()-before) / n
		runtime.KeepAlive(g)
	}
	b.ReportMetric(perBinding, "B/binding")
}

func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// recordMany records n one-step tool.echo preflights, from many writers so
// their commits are shared.
func recordMany(b *testing.B, e *env, n int) []preflight.Binding {
	b.Helper()
	out := make([]preflight.Binding, n)
	var wg sync.WaitGroup
	next := make(chan int)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i] = e.record(preflight.OutcomePass, actorID, step1("s1"))
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}
