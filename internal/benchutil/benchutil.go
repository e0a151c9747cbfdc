// Package benchutil holds what the benchmarks of several packages share: a
// driver that spreads b.N calls over a fixed number of goroutines, so a
// benchmark can measure a given concurrency (1, 8, 64 callers) rather than
// GOMAXPROCS.
package benchutil

import (
	"sync"
	"sync/atomic"
	"testing"
)

// Parallel calls fn(i) for every i in [0, b.N) from n goroutines and fails
// the benchmark with the first error any call returns.
func Parallel(b *testing.B, n int, fn func(i int) error) {
	b.Helper()
	ParallelN(b, b.N, n, fn)
}

// ParallelN is Parallel for calls other than b.N: a benchmark that takes
// turns between scenarios runs a share of b.N at a time.
func ParallelN(b *testing.B, calls, n int, fn func(i int) error) {
	b.Helper()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		firstErr atomic.Value
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < calls; i = int(next.Add(1)) - 1 {
				if err := fn(i); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		b.Fatal(err)
	}
}
