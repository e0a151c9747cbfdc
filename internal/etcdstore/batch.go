package etcdstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
)

// maxTxnOps and maxTxnBytes bound one shared transaction: etcd refuses a
// transaction of more than --max-txn-ops operations at one level (128 by
// default) or a request of more than --max-request-bytes (1.5 MiB by
// default), and one refused transaction would fail every call it carries.
const (
	maxTxnOps   = 128
	maxTxnBytes = 1 << 20
)

// inFlight is how many shared transactions of one kind may be in flight at
// once, unless a batcher says otherwise (startSenders): while one commits,
// the next gathers the calls that arrive meanwhile.
const inFlight = 2

// batcher queues the requests of concurrent calls and sends them in shared
// etcd transactions (group commit), up to its senders at once. A sender that
// is free takes what waits at once, with no timer: a lone call waits one
// round trip, as with a transaction of its own, and a crowd shares a
// transaction per round trip. A call that waits for its answer anyway
// (addAndSend) sends from its own goroutine when a sender is free, so a
// lone call wakes no other goroutine; a background sender takes what
// waits while every sender is busy.
type batcher[T any] struct {
	bg context.Context
	// senders bounds the batches in flight at once.
	senders int
	// split divides the queue into what one transaction takes and what
	// waits for a later one, each in the queue's order.
	split func(pending []T) (batch, rest []T)
	// send sends one batch under ctx and answers every request of it.
	send func(ctx context.Context, batch []T)
	// fail answers a request that will not be sent.
	fail func(r T, err error)

	mu      sync.Mutex
	pending []T
	// sending counts the batches in flight, background or not.
	sending int
	wake    chan struct{}
}

// startBatcher starts the background senders of a batcher of inFlight
// senders; they run until bg is done, and answer what is still queued
// then with fail.
func startBatcher[T any](bg context.Context, split func([]T) ([]T, []T), send func(context.Context, []T), fail func(T, error)) *batcher[T] {
	return startSenders(bg, inFlight, split, send, fail)
}

// startSenders is startBatcher with n senders: at most n batches in
// flight at once.
func startSenders[T any](bg context.Context, n int, split func([]T) ([]T, []T), send func(context.Context, []T), fail func(T, error)) *batcher[T] {
	b := &batcher[T]{bg: bg, senders: n, split: split, send: send, fail: fail, wake: make(chan struct{}, 1)}
	for range n {
		go b.run()
	}
	return b
}

// add queues r for a background sender.
func (b *batcher[T]) add(r T) {
	b.mu.Lock()
	b.pending = append(b.pending, r)
	b.mu.Unlock()
	b.signal()
}

// addAndSend queues r and, when fewer batches than senders are in flight,
// sends what waits (r among it) from the calling goroutine before it
// returns; otherwise a sender takes r when it is done. A batch of r alone
// is sent under a context that ctx's end cancels too: the caller that
// gives up stops only its own request (which may still commit; it answers
// 503 either way), never another call's.
func (b *batcher[T]) addAndSend(ctx context.Context, r T) {
	b.mu.Lock()
	b.pending = append(b.pending, r)
	if b.sending >= b.senders {
		b.mu.Unlock()
		return
	}
	b.sending++
	batch := b.take()
	b.mu.Unlock()
	sctx := b.bg
	if len(batch) == 1 && ctx.Done() != nil {
		var cancel context.CancelFunc
		sctx, cancel = context.WithCancel(b.bg)
		stop := context.AfterFunc(ctx, cancel)
		defer func() { stop(); cancel() }()
	}
	b.send(sctx, batch)
	b.mu.Lock()
	b.sending--
	more := len(b.pending) > 0
	b.mu.Unlock()
	if more {
		b.signal()
	}
}

// withdraw removes from the queue the first request is matches, and
// reports whether one was there: a request withdrawn was never sent, so
// nothing of it can reach etcd later. One already taken into a batch is
// not withdrawn.
func (b *batcher[T]) withdraw(is func(T) bool) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, r := range b.pending {
		if is(r) {
			b.pending = slices.Delete(b.pending, i, i+1)
			return true
		}
	}
	return false
}

// drain removes from the queue every request is matches and returns them,
// none of them sent.
func (b *batcher[T]) drain(is func(T) bool) []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []T
	kept := b.pending[:0]
	for _, r := range b.pending {
		if is(r) {
			out = append(out, r)
		} else {
			kept = append(kept, r)
		}
	}
	clear(b.pending[len(kept):])
	b.pending = kept
	return out
}

// idle reports whether no request waits and no batch is in flight.
func (b *batcher[T]) idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sending == 0 && len(b.pending) == 0
}

// signal tells a free sender that requests wait.
func (b *batcher[T]) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// take removes from the queue the requests of one transaction; b.mu is
// held and the queue is not empty.
func (b *batcher[T]) take() []T {
	batch, rest := b.split(b.pending)
	b.pending = rest
	return batch
}

// next removes from the queue the requests of one transaction and counts
// it in flight; nil when none waits or every sender's batch is in flight
// (the sender that ends one looks again).
func (b *batcher[T]) next() []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pending) == 0 || b.sending >= b.senders {
		return nil
	}
	b.sending++
	batch := b.take()
	if len(b.pending) > 0 && b.sending < b.senders {
		b.signal()
	}
	return batch
}

// sent counts a background sender's batch done.
func (b *batcher[T]) sent() {
	b.mu.Lock()
	b.sending--
	b.mu.Unlock()
}

func (b *batcher[T]) run() {
	for {
		select {
		case <-b.wake:
		case <-b.bg.Done():
			b.mu.Lock()
			pending := b.pending
			b.pending = nil
			b.mu.Unlock()
			for _, r := range pending {
				b.fail(r, fmt.Errorf("%w: store closed", ErrUnavailable))
			}
			return
		}
		for batch := b.next(); len(batch) > 0; batch = b.next() {
			b.send(b.bg, batch)
			b.sent()
		}
	}
}

// await waits for the answer of a request queued with done, until ctx is
// done or the store closes. A caller that stops waiting leaves its request
// to be sent with the others (it may still commit); it answers 503 either
// way, and no caller's deadline cancels another's request.
func await[V any, T any](ctx context.Context, b *batcher[T], done <-chan V) (V, error) {
	select {
	case v := <-done:
		return v, nil
	case <-ctx.Done():
		var zero V
		return zero, fmt.Errorf("%w: %v", ErrUnavailable, ctx.Err())
	case <-b.bg.Done():
		// Closed: a sender that has returned answers nothing queued after
		// it drained.
		var zero V
		return zero, fmt.Errorf("%w: store closed", ErrUnavailable)
	}
}

// splitPrefix is a split that takes the oldest request, then the next
// while their costs (ops, bytes) fit in maxTxnOps and maxTxnBytes; a
// request alone may cost more, and then has a transaction of its own.
func splitPrefix[T any](pending []T, cost func(T) (ops, bytes int)) (batch, rest []T) {
	n, size, k := 0, 0, 0
	for k < len(pending) {
		ops, bytes := cost(pending[k])
		if k > 0 && (n+ops > maxTxnOps || size+bytes > maxTxnBytes) {
			break
		}
		n, size = n+ops, size+bytes
		k++
	}
	return slices.Clone(pending[:k]), slices.Delete(pending, 0, k)
}
