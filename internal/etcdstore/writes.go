package etcdstore

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// condWrite is one call's conditional write (If cmps, Then the ops, under
// the bucket's lease), waiting for a transaction of the writes' batcher.
type condWrite struct {
	cmps []clientv3.Cmp
	// ops are the operations under lease option l, and els those when a
	// comparison fails (none when nil); keys, every key they put or
	// delete; width, the most operations of one branch (etcd's limit of a
	// nested transaction); bytes, what they add to a transaction.
	ops   func(l clientv3.OpOption) []clientv3.Op
	els   []clientv3.Op
	keys  []string
	width int
	bytes int
	// The outcome, set before done is closed: ok when the comparisons
	// held (and the writes committed), resps the answers of the branch
	// taken, rev the revision of the transaction.
	ok    bool
	resps []*etcdserverpb.ResponseOp
	rev   int64
	err   error
	done  chan struct{}
}

// newCondWrite makes the write of ops if cmps hold, else els.
func newCondWrite(cmps []clientv3.Cmp, ops func(clientv3.OpOption) []clientv3.Op, els ...clientv3.Op) *condWrite {
	w := &condWrite{cmps: cmps, ops: ops, els: els, done: make(chan struct{})}
	probe := ops(clientv3.WithLease(0))
	w.width = max(len(cmps), len(probe), len(els))
	w.bytes = 64
	for _, op := range append(probe, els...) {
		if op.IsPut() || op.IsDelete() {
			w.keys = append(w.keys, string(op.KeyBytes()))
		}
		w.bytes += len(op.KeyBytes()) + len(op.ValueBytes()) + 16
	}
	return w
}

func (w *condWrite) end(err error) {
	w.err = err
	if err != nil {
		w.ok, w.resps = false, nil
	}
	close(w.done)
}

// startWriter starts the batcher of the conditional writes: concurrent
// calls' writes on distinct keys share a transaction of one
// sub-transaction each, decided each on its own in etcd.
func (s *Store) startWriter() *batcher[*condWrite] {
	return startBatcher(s.bg, splitWrites, s.sendWrites, (*condWrite).end)
}

// splitWrites takes, in the queue's order, writes that touch no key an
// earlier one of the batch touches (etcd refuses a transaction that
// writes one key twice, even in exclusive branches), while the batch fits
// etcd's limits: n sub-transactions leave maxTxnOps-n operations to each
// branch of one, and maxTxnBytes in all. A write alone may cost more and
// has a transaction of its own.
func splitWrites(pending []*condWrite) (batch, rest []*condWrite) {
	taken := map[string]bool{}
	width, size, full := 0, 0, false
	for _, w := range pending {
		clash := false
		for _, k := range w.keys {
			clash = clash || taken[k]
		}
		if len(batch) > 0 && (full || clash || len(batch)+1+max(width, w.width) > maxTxnOps || size+w.bytes > maxTxnBytes) {
			full = full || !clash
			rest = append(rest, w)
			continue
		}
		for _, k := range w.keys {
			taken[k] = true
		}
		width, size = max(width, w.width), size+w.bytes
		batch = append(batch, w)
	}
	return batch, rest
}

// sendWrites sends the writes of batch in one transaction, a lone write
// as a transaction of its own, and answers each; an etcd error fails them
// all.
func (s *Store) sendWrites(ctx context.Context, batch []*condWrite) {
	err := s.withLease(ctx, func(lease clientv3.LeaseID) error {
		l := clientv3.WithLease(lease)
		octx, cancel := s.opCtx(ctx)
		defer cancel()
		if len(batch) == 1 {
			w := batch[0]
			resp, err := s.cli.Txn(octx).If(w.cmps...).Then(w.ops(l)...).Else(w.els...).Commit()
			if err != nil {
				return s.seen(octx, err)
			}
			s.seen(octx, nil)
			w.ok, w.resps, w.rev = resp.Succeeded, resp.Responses, resp.Header.Revision
			return nil
		}
		subs := make([]clientv3.Op, len(batch))
		for i, w := range batch {
			subs[i] = clientv3.OpTxn(w.cmps, w.ops(l), w.els)
		}
		resp, err := s.cli.Txn(octx).Then(subs...).Commit()
		if err != nil {
			return s.seen(octx, err)
		}
		s.seen(octx, nil)
		if len(resp.Responses) != len(batch) {
			return fmt.Errorf("%w: %d answers to %d writes", ErrUnavailable, len(resp.Responses), len(batch))
		}
		for i, r := range resp.Responses {
			t := r.GetResponseTxn()
			if t == nil {
				return fmt.Errorf("%w: a write's answer is no transaction", ErrUnavailable)
			}
			batch[i].ok, batch[i].resps, batch[i].rev = t.Succeeded, t.Responses, resp.Header.Revision
		}
		return nil
	})
	for _, w := range batch {
		w.end(err)
	}
}

// write sends w through the writes' batcher and waits for its outcome.
func (s *Store) write(ctx context.Context, w *condWrite) (bool, error) {
	s.writes.addAndSend(ctx, w)
	if _, err := await(ctx, s.writes, w.done); err != nil {
		return false, err
	}
	return w.ok, w.err
}
