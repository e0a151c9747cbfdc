package etcdstore

import (
	"context"
	"slices"
	"sync"
	"testing"
)

// TestBatcherWithdraw: requests still queued behind a batch in flight can
// be withdrawn or drained, and are then never sent; one already in a batch
// cannot.
func TestBatcherWithdraw(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release := make(chan struct{})
	var mu sync.Mutex
	var sent []int
	inFlight := make(chan struct{}, 1)
	b := startSenders(ctx, 1, func(p []int) ([]int, []int) { return p[:1], p[1:] },
		func(_ context.Context, batch []int) {
			mu.Lock()
			sent = append(sent, batch...)
			mu.Unlock()
			inFlight <- struct{}{}
			<-release
		}, func(int, error) {})
	done := make(chan struct{})
	go func() { b.addAndSend(ctx, 1); close(done) }()
	<-inFlight // 1 is in flight; 2 and 3 queue behind it
	b.add(2)
	b.add(3)
	b.add(4)
	b.add(6)
	if got := b.drain(func(r int) bool { return r >= 4 }); !slices.Equal(got, []int{4, 6}) {
		t.Fatalf("drained %v, want 4 and 6", got)
	}
	if b.withdraw(func(r int) bool { return r == 1 }) {
		t.Fatal("a request in flight was withdrawn")
	}
	if !b.withdraw(func(r int) bool { return r == 2 }) {
		t.Fatal("a queued request was not withdrawn")
	}
	close(release)
	<-done
	<-inFlight // 3 is sent by a background sender
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(sent, []int{1, 3}) {
		t.Fatalf("sent %v, want 1 and 3: a withdrawn or drained request must never be sent", sent)
	}
}
