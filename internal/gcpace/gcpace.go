// Package gcpace paces Go's garbage collector for a process whose live heap
// is small beside the memory it may use.
//
// Under Go's default (GOGC=100) the heap grows to twice the live data before
// the next collection, so a service that keeps 20 MB live and allocates a few
// tens of kilobytes a request collects every few hundred requests, and the
// collector's marking and assists take a fifth to a quarter of each
// request's CPU (docs/PERFORMANCE.md). A fixed higher GOGC fixes that and
// multiplies a large live heap with it: at GOGC=400 a 40 MB binding cache is
// a 200 MB heap. The pacer instead gives the heap a fixed headroom above the
// live data, never less than GOGC=100 gives and never more than GOGC=400:
// after every collection it sets the percentage to headroom / live, bounded
// to [100, 400]. A small heap collects rarely; a heap whose live data exceeds
// the headroom is paced as Go's default paces it, so memory never grows past
// what the default would use by more than the headroom.
package gcpace

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

const (
	// MinPercent and MaxPercent bound the percentage the pacer sets.
	MinPercent = 100
	MaxPercent = 400
	// DefaultHeadroom is the heap growth allowed above the live data.
	DefaultHeadroom = 48 << 20
)

// Percent is the GOGC percentage that allows headroom bytes of growth over
// live bytes of live heap, bounded to [MinPercent, MaxPercent].
func Percent(live, headroom uint64) int {
	if live == 0 {
		return MaxPercent
	}
	p := headroom * 100 / live
	switch {
	case p < MinPercent:
		return MinPercent
	case p > MaxPercent:
		return MaxPercent
	}
	return int(p)
}

// Pacer sets the GC percentage after each collection. Stop ends it.
type Pacer struct {
	headroom uint64
	mu       sync.Mutex
	stopped  bool
	set      int
	// paced, when not nil, receives each percentage set (tests).
	paced chan<- int
	// sample reads the live heap after a collection.
	sample []metrics.Sample
}

// Start paces the collector with the given headroom unless the environment
// sets GOGC, which then stands as the operator wrote it; it returns nil in
// that case. An empty GOGC counts as unset, as the runtime reads it.
// GOMEMLIMIT, when set, still bounds the heap as Go documents.
func Start(headroom uint64) *Pacer {
	if os.Getenv("GOGC") != "" {
		return nil
	}
	return start(headroom, nil)
}

func start(headroom uint64, paced chan<- int) *Pacer {
	p := &Pacer{headroom: headroom, set: MinPercent, paced: paced,
		sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	p.arm()
	return p
}

// Stop ends the pacing and gives the collector back GOGC=100.
func (p *Pacer) Stop() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.stopped {
		p.stopped = true
		debug.SetGCPercent(MinPercent)
	}
}

// cycle is an object that lives until the next collection: its finalizer
// runs after each one and arms a new one. It holds a pointer, so it is never
// one of the tiny allocations whose finalizers may not run.
type cycle struct{ p *Pacer }

func (p *Pacer) arm() {
	runtime.SetFinalizer(&cycle{p: p}, func(c *cycle) { c.p.collected() })
}

// collected runs on the finalizer goroutine after a collection.
func (p *Pacer) collected() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	metrics.Read(p.sample)
	if p.sample[0].Value.Kind() == metrics.KindUint64 {
		if pct := Percent(p.sample[0].Value.Uint64(), p.headroom); pct != p.set {
			p.set = pct
			debug.SetGCPercent(pct)
			if p.paced != nil {
				select {
				case p.paced <- pct:
				default:
				}
			}
		}
	}
	p.arm()
}
