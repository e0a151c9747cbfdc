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
// once: while one commits, the next gathers the calls that arrive
// meanwhile.
const inFlight = 2

// batcher queues the requests of concurrent calls and sends them in shared
// etcd transactions (group commit), up to inFlight at once. A sender that
// is free takes what waits at once, with no timer: a lone call waits one
// round trip, as with a transaction of its own, and a crowd shares a
// transaction per round trip.
type batcher[T any] struct {
	bg context.Context
	// split divides the queue into what one transaction takes and what
	// waits for a later one, each in the queue's order.
	split func(pending []T) (batch, rest []T)
	// send sends one batch and answers every request of it.
	send func(batch []T)
	// fail answers a request that will not be sent.
	fail func(r T, err error)

	mu      sync.Mutex
	pending []T
	wake    chan struct{}
}

// startBatcher starts the senders of a batcher; they run until bg is done,
// and answer what is still queued then with fail.
func startBatcher[T any](bg context.Context, split func([]T) ([]T, []T), send func([]T), fail func(T, error)) *batcher[T] {
	b := &batcher[T]{bg: bg, split: split, send: send, fail: fail, wake: make(chan struct{}, 1)}
	for range inFlight {
		go b.run()
	}
	return b
}

// add queues r for a sender.
func (b *batcher[T]) add(r T) {
	b.mu.Lock()
	b.pending = append(b.pending, r)
	b.mu.Unlock()
	b.signal()
}

// signal tells a free sender that requests wait.
func (b *batcher[T]) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// next removes from the queue the requests of one transaction.
func (b *batcher[T]) next() []T {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pending) == 0 {
		return nil
	}
	batch, rest := b.split(b.pending)
	b.pending = rest
	if len(rest) > 0 {
		b.signal()
	}
	return batch
}

func (b *batcher[T]) run() {
	for {
		select {
		case <-b.wake:
		case <-b.bg.Done():
			for batch := b.next(); len(batch) > 0; batch = b.next() {
				for _, r := range batch {
					b.fail(r, fmt.Errorf("%w: store closed", ErrUnavailable))
				}
			}
			return
		}
		for batch := b.next(); len(batch) > 0; batch = b.next() {
			b.send(batch)
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
