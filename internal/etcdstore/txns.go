package etcdstore

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// part is one request of the shared write transactions: a consume's
// attempt on a marker (consume.go) or a call's frame copies (frames.go).
// Exactly one of a and c is set.
type part struct {
	a *attempt
	c *copyRequest
}

// txnSenders is how many shared write transactions a replica has in
// flight at once: one. A transaction takes every marker attempt and copy
// that waits when it is sent, so at 64 callers each round trip carries the
// markers of the consumes that arrived during the last one and the copies
// of those it answered before; with two in flight a consume took about
// twice the transactions (docs/PERFORMANCE.md). A lone call still sends
// at once; a lone consume sends its marker and its copies in one
// transaction of its own (consumeLone).
const txnSenders = 1

// startTxns starts the batcher of the shared write transactions: the
// consumes' marker sub-transactions and the frame copies of concurrent
// calls go to etcd together, so a busy replica sends one transaction, one
// raft entry, where it would send one of each kind.
func (s *Store) startTxns() *batcher[part] {
	return startSenders(s.bg, txnSenders, splitParts, s.sendParts, func(p part, err error) {
		if p.a != nil {
			p.a.done <- attemptAnswer{err: err}
		} else {
			p.c.end(err)
		}
	})
}

// maxAttempts bounds the top-level operations of a transaction that
// carries attempts: etcd allows a nested transaction --max-txn-ops less
// its parent's operations at each level, and an attempt's has two (two
// compares, or two reads).
const maxAttempts = maxTxnOps - 2

// splitParts takes, in the queue's order, attempts on distinct marker
// keys and copies while their operations fit (one per attempt, one per
// copy put (copyRuns) and one for the copy index, at most maxAttempts when the
// transaction carries an attempt, else maxTxnOps) within maxTxnBytes, and
// every other attempt queued on one of those keys. The first request
// alone may cost more, and then has a transaction of its own.
//
// etcd refuses a transaction that puts one key twice, even in exclusive
// branches of sibling sub-transactions, so one attempt per key (its
// leader) has a sub-transaction and the others share its answer: when the
// leader's marker is put, the step is taken for them; when it fails, its
// reads are theirs. They were queued before the transaction was sent, so
// its answer is one they may be given. Marker, copy and copy index keys
// never meet: their prefixes differ, a copy's key names the first seq of
// the frames it holds (no two copies of one transaction start at one
// frame) and the index its transaction's last.
func splitParts(pending []part) (batch, rest []part) {
	leaders := map[string]*attempt{}
	ops, size, full := 0, 0, false
	attempts, copies := false, false
	fits := func(ops, bytes int, attempts bool) bool {
		limit := maxTxnOps
		if attempts {
			limit = maxAttempts
		}
		return ops <= limit && bytes <= maxTxnBytes
	}
	for _, p := range pending {
		if a := p.a; a != nil {
			if l, ok := leaders[a.key]; ok {
				a.leader = l
				batch = append(batch, p)
				continue
			}
			if len(batch) > 0 && (full || !fits(ops+1, size+a.bytes, true)) {
				full = true
				rest = append(rest, p)
				continue
			}
			a.leader = nil
			leaders[a.key] = a
			ops, size, attempts = ops+1, size+a.bytes, true
			batch = append(batch, p)
			continue
		}
		n := copyPuts(p.c.frames)
		if !copies {
			n++ // the copy index
		}
		if len(batch) > 0 && (full || !fits(ops+n, size+p.c.bytes, attempts)) {
			full = true
			rest = append(rest, p)
			continue
		}
		ops, size, copies = ops+n, size+p.c.bytes, true
		batch = append(batch, p)
	}
	return batch, rest
}

// sendParts sends batch: as one flat transaction with the frames of its
// consumes when it can (sendFlat), else in one transaction of a
// sub-transaction per leader attempt (doc.go, "Consume-once"), each
// decided on its own in etcd, then the copies' puts and their index. It
// answers every attempt and ends every copy request. An etcd error fails
// them all. A batch with copies is sent under the store's context: a copy
// is no caller's to cancel.
func (s *Store) sendParts(ctx context.Context, batch []part) {
	var leaders []*attempt
	var copies []*copyRequest
	for _, p := range batch {
		switch {
		case p.c != nil:
			copies = append(copies, p.c)
		case p.a.leader == nil:
			leaders = append(leaders, p.a)
		}
	}
	flat, copiesSent, err := s.sendFlat(ctx, leaders, copies)
	if err != nil {
		for _, a := range leaders {
			a.answer = attemptAnswer{err: err}
		}
	}
	if copiesSent {
		copies = nil
	}
	var puts []*attempt
	if !flat {
		puts, err = s.sendNested(ctx, leaders, copies)
	}
	if len(puts) > 1 {
		g := &logGroup{members: puts, done: make(chan struct{})}
		for _, a := range puts {
			a.answer.group = g
		}
	}
	for _, p := range batch {
		switch a := p.a; {
		case a == nil:
		case a.leader != nil:
			a.done <- a.leader.answer
		default:
			a.done <- a.answer
		}
	}
	if err != nil && ctx.Err() == nil {
		// What is queued behind a transaction etcd did not answer has
		// waited as long: sending it now would hold its callers another
		// request timeout. It is withdrawn, never sent, and answered 503:
		// a consume then cannot be applied after its caller's 503, and
		// frames whose copy is withdrawn are in the log already, copied
		// again in the background (recopy).
		werr := fmt.Errorf("%w: %w (%w)", ErrUnavailable, errWithdrawn, err)
		for _, p := range s.txns.drain(func(part) bool { return true }) {
			if p.a != nil {
				p.a.done <- attemptAnswer{err: werr}
			} else {
				p.c.end(werr)
			}
		}
	}
}

// sendNested sends leaders and copies in one transaction: a
// sub-transaction per leader attempt, each decided on its own in etcd,
// then the copies' puts and their index. It sets every leader's answer,
// ends every copy request and returns the attempts whose marker was put
// and whose frames are still to be logged.
func (s *Store) sendNested(ctx context.Context, leaders []*attempt, copies []*copyRequest) ([]*attempt, error) {
	var cw *copyWrite
	nops := len(leaders)
	if len(copies) > 0 {
		ctx = s.bg
		cw = s.encodeCopies(copies)
		nops += len(cw.keys)
	}
	var resp *etcdserverpb.TxnResponse
	err := s.withLease(ctx, func(lease clientv3.LeaseID) error {
		b := newTxnBuf(len(leaders), nops-len(leaders))
		ops := make([]*etcdserverpb.RequestOp, 0, nops)
		for _, a := range leaders {
			ops = append(ops, a.opIn(b, lease))
		}
		if cw != nil {
			ops = cw.putsIn(b, ops, lease)
		}
		octx, cancel := s.opCtx(ctx)
		defer cancel()
		var err error
		resp, err = s.sendTxn(octx, &etcdserverpb.TxnRequest{Success: ops})
		return s.seen(octx, err)
	})
	if err == nil && len(resp.Responses) != nops {
		err = fmt.Errorf("%w: %d answers to %d operations", ErrUnavailable, len(resp.Responses), nops)
	}
	for _, r := range copies {
		r.end(err)
	}
	var puts []*attempt
	for i, a := range leaders {
		a.answer = attemptAnswer{err: err}
		if err != nil {
			continue
		}
		switch t := resp.Responses[i].GetResponseTxn(); {
		case t == nil:
			a.answer.err = fmt.Errorf("%w: a consume's answer is no transaction", ErrUnavailable)
		case t.Succeeded:
			a.answer.put = a
			if a.frames != nil {
				puts = append(puts, a)
			}
		default:
			a.answer.seen = t.Responses
		}
	}
	return puts, err
}
