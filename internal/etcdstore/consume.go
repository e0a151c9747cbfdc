package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/contractrefine/autonomy/wal"
)

// marker is P c/<id>/<step>.
type marker struct {
	RequestID  string `json:"request_id"`
	ArgsDigest string `json:"args_digest,omitempty"`
	At         string `json:"at"`
	Replica    string `json:"replica"`
}

// repeats reports whether r repeats the call that wrote m.
func (m *marker) repeats(r *wal.ConsumeRequest) bool {
	return r.RequestID != "" && m.RequestID == r.RequestID && m.ArgsDigest == r.CallDigest
}

// seenState is a binding's existence and markers as one read saw them.
type seenState struct {
	bound   bool
	markers map[int]marker
}

// plan decides what consuming r would do given st, as wal's plan does on
// the bbolt file.
func plan(r *wal.ConsumeRequest, st *seenState) wal.ConsumeResult {
	if !st.bound {
		return wal.ConsumeResult{Status: wal.Gone, StepIndex: -1}
	}
	free, matched := -1, false
	var spent []wal.SpentStep
	for i := range r.Binding.Steps {
		step := &r.Binding.Steps[i]
		if !r.Admits(i, step) {
			continue
		}
		matched = true
		m, ok := st.markers[i]
		if !ok {
			if free < 0 {
				free = i
			}
			continue
		}
		if m.repeats(r) {
			return wal.ConsumeResult{Status: wal.Repeated, StepID: step.ID, StepIndex: i}
		}
		spent = append(spent, wal.SpentStep{Index: i, RequestID: m.RequestID})
	}
	switch {
	case free >= 0:
		return wal.ConsumeResult{Status: wal.Consumed, StepID: r.Binding.Steps[free].ID, StepIndex: free}
	case !matched:
		return wal.ConsumeResult{Status: wal.Mismatch, StepIndex: -1}
	}
	return wal.ConsumeResult{Status: wal.Replay, StepIndex: -1, Spent: spent}
}

// readOps read a binding's existence and markers.
func (s *Store) readOps(id string) []clientv3.Op {
	return []clientv3.Op{
		clientv3.OpGet(s.p.binding(id), clientv3.WithCountOnly()),
		clientv3.OpGet(s.p.markers(id), clientv3.WithPrefix()),
	}
}

// decodeSeen reads what readOps returned.
func (s *Store) decodeSeen(id string, rs []*etcdserverpb.ResponseOp) (*seenState, error) {
	if len(rs) != 2 {
		return nil, fmt.Errorf("%w: %d answers to a consume's reads", ErrUnavailable, len(rs))
	}
	st := &seenState{bound: rs[0].GetResponseRange().GetCount() > 0, markers: map[int]marker{}}
	pfx := s.p.markers(id)
	for _, kv := range rs[1].GetResponseRange().GetKvs() {
		i, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), pfx))
		if err != nil {
			return nil, fmt.Errorf("%w: marker key %q", wal.ErrCorrupt, kv.Key)
		}
		var m marker
		if err := json.Unmarshal(kv.Value, &m); err != nil {
			return nil, fmt.Errorf("%w: marker %q: %v", wal.ErrCorrupt, kv.Key, err)
		}
		st.markers[i] = m
	}
	return st, nil
}

// Peek reports what Consume would do now, in one read shared with the
// replica's concurrent peeks.
func (s *Store) Peek(ctx context.Context, r wal.ConsumeRequest) (wal.ConsumeResult, error) {
	id := r.Binding.PreflightID
	p := &peekRequest{id: id, bytes: len(s.p.binding(id)) + len(s.p.markers(id)) + 64, done: make(chan attemptAnswer, 1)}
	s.peeks.addAndSend(ctx, p)
	ans, err := await(ctx, s.peeks, p.done)
	if err == nil {
		err = ans.err
	}
	if err != nil {
		return wal.ConsumeResult{}, err
	}
	st, err := s.decodeSeen(id, ans.seen)
	if err != nil {
		return wal.ConsumeResult{}, err
	}
	return plan(&r, st), nil
}

// peekRequest is one call's read of a binding's existence and markers,
// waiting for a read of the peeks' batcher.
type peekRequest struct {
	id    string
	bytes int // what the reads add to a transaction
	done  chan attemptAnswer
}

// startPeeker starts the batcher of the peeks: their reads side by side
// in one transaction, which stays read-only (etcd serves it as a
// linearizable read, with no raft entry; a nested transaction would not
// be), so up to maxTxnOps/2 peeks share one.
func (s *Store) startPeeker() *batcher[*peekRequest] {
	return startBatcher(s.bg,
		func(p []*peekRequest) ([]*peekRequest, []*peekRequest) {
			return splitPrefix(p, func(r *peekRequest) (int, int) { return 2, r.bytes })
		},
		s.sendPeeks,
		func(r *peekRequest, err error) { r.done <- attemptAnswer{err: err} })
}

// sendPeeks reads the bindings of batch in one transaction and answers
// every peek of it; an etcd error fails them all.
func (s *Store) sendPeeks(ctx context.Context, batch []*peekRequest) {
	ops := make([]clientv3.Op, 0, 2*len(batch))
	for _, r := range batch {
		ops = append(ops, s.readOps(r.id)...)
	}
	resp, err := s.thenTxn(ctx, ops...)
	if err == nil && len(resp.Responses) != len(ops) {
		err = fmt.Errorf("%w: %d answers to %d reads", ErrUnavailable, len(resp.Responses), len(ops))
	}
	for i, r := range batch {
		if err != nil {
			r.done <- attemptAnswer{err: err}
			continue
		}
		r.done <- attemptAnswer{seen: resp.Responses[2*i : 2*i+2]}
	}
}

// Consume spends one unconsumed step of r.Kind: one sub-transaction on
// the first matching step's marker, and on failure one more per step that
// the answer shows free, each in a transaction shared with the replica's
// concurrent consumes (doc.go, "Consume-once"). The frames follow the
// marker: the replica's log, then their copies in etcd; a lone consume
// sends the copies with its first marker instead (consumeLone).
func (s *Store) Consume(ctx context.Context, r wal.ConsumeRequest) (wal.ConsumeResult, error) {
	// A log that cannot write now (being verified after a start, held)
	// would let the marker be put and then answer 503: the step would be
	// spent with no allow and no record. It is refused before.
	if err := s.owned(ctx); err != nil {
		return wal.ConsumeResult{}, err
	}
	if err := s.log.Refuses(); err != nil {
		return wal.ConsumeResult{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	res, logged, err := s.decide(ctx, &r, true)
	if err != nil || logged {
		return res, err
	}
	ins := r.ConsumeFrames(res)
	if res.Status == wal.Repeated {
		if ins, err = s.repeatFrames(ctx, &r, res); err != nil {
			return wal.ConsumeResult{}, err
		}
	}
	_, err = s.logAndCopy(ctx, ins)
	return res, err
}

// repeatFrames are the frames a repeat logs: its decision, after the
// autonomy.preflight_consumed frame of the call it repeats when no
// replica's log or copy holds one. That call's marker committed but its
// answer was lost (the request timed out): a lone consume's copies were
// then withdrawn, a shared one logged nothing, and the allow the repeat
// gives must not stand without its consume on record.
func (s *Store) repeatFrames(ctx context.Context, r *wal.ConsumeRequest, res wal.ConsumeResult) ([]wal.FrameInput, error) {
	logged, err := s.consumeLogged(ctx, r, res.StepID)
	switch {
	case err != nil:
		return nil, err
	case logged:
		return r.ConsumeFrames(res), nil
	}
	return r.RepeatFrames(res), nil
}

// consumeLogged reports whether any replica's log or copy holds the
// autonomy.preflight_consumed frame of r's call on step stepID.
func (s *Store) consumeLogged(ctx context.Context, r *wal.ConsumeRequest, stepID string) (bool, error) {
	fs, err := s.AuditFramesOf(ctx, r.Binding.AuditID, []string{wal.KindConsumed})
	if err != nil {
		return false, err
	}
	for i := range fs {
		a, err := fs[i].Consumed()
		if err == nil && a.PreflightID == r.Binding.PreflightID && a.StepID == stepID && a.RequestID == r.RequestID {
			return true, nil
		}
	}
	return false, nil
}

// decide decides the consume in etcd. With log set its first attempt
// goes alone with the frames' copies when the consume is alone
// (consumeLone), a marker put in a shared transaction with others has its
// frames logged with theirs (logGroup), and logged then reports that the
// frames of the result are in the log and in etcd.
func (s *Store) decide(ctx context.Context, r *wal.ConsumeRequest, log bool) (res wal.ConsumeResult, logged bool, err error) {
	id := r.Binding.PreflightID
	try := -1
	for i := range r.Binding.Steps {
		if r.Admits(i, &r.Binding.Steps[i]) {
			try = i
			break
		}
	}
	if try < 0 {
		// No step of the kind: only the binding's existence decides
		// between Gone and Mismatch.
		res, err := s.Peek(ctx, *r)
		return res, false, err
	}
	m := marker{RequestID: r.RequestID, ArgsDigest: r.CallDigest,
		At: r.Time.UTC().Format(wal.TimestampFormat), Replica: s.o.Replica}
	value, _ := json.Marshal(m)
	// known gathers the markers the failed tries showed: markers are
	// never taken back while the binding can be used, so each try adds one
	// and the loop ends.
	known := &seenState{bound: true, markers: map[int]marker{}}
	lone := log
	for range len(r.Binding.Steps) + 1 {
		a := s.newAttempt(id, try, m, value)
		consumed := wal.ConsumeResult{Status: wal.Consumed, StepID: r.Binding.Steps[try].ID, StepIndex: try}
		frames := func() []wal.FrameInput { return r.ConsumeFrames(consumed) }
		ans, sent := attemptAnswer{}, false
		if lone {
			ans, sent = s.consumeLone(ctx, a, frames)
			lone = false
		}
		if log {
			a.frames = frames
		}
		if !sent {
			ans, err = s.sendAttempt(ctx, a)
			if err == nil {
				err = ans.err
			}
		} else {
			err = ans.err
		}
		if err != nil && log && !errors.Is(err, errWithdrawn) {
			s.doubt(r, try) // sent, unanswered: etcd may still apply it
		}
		if err != nil {
			return wal.ConsumeResult{}, false, err
		}
		switch {
		case ans.put == a && ans.group != nil:
			return consumed, true, s.logGroup(ctx, ans.group)
		case ans.put == a:
			return consumed, ans.logged, nil
		case ans.put != nil:
			// Another call of this replica took the step in the same
			// transaction.
			known.markers[try] = ans.put.m
		default:
			st, err := s.decodeSeen(id, ans.seen)
			if err != nil {
				return wal.ConsumeResult{}, false, err
			}
			known.bound = st.bound
			maps.Copy(known.markers, st.markers)
		}
		res := plan(r, known)
		if res.Status != wal.Consumed {
			return res, false, nil
		}
		try = res.StepIndex
	}
	return wal.ConsumeResult{Status: wal.Replay, StepIndex: -1}, false, nil
}

// sendAttempt queues a for the shared write transactions and waits for its
// answer. An attempt still queued a request timeout on (the transaction
// before it hangs: etcd stalls), or whose caller has gone, is withdrawn
// and answered ErrUnavailable at once: never sent, it cannot put its
// marker after its caller was told 503. One already sent is waited for;
// its own transaction's timeout bounds that.
func (s *Store) sendAttempt(ctx context.Context, a *attempt) (attemptAnswer, error) {
	s.txns.addAndSend(ctx, part{a: a})
	wctx, cancel := context.WithTimeout(ctx, s.o.RequestTimeout)
	ans, err := await(wctx, s.txns, a.done)
	cancel()
	if err == nil {
		return ans, nil
	}
	if s.txns.withdraw(func(p part) bool { return p.a == a }) {
		return attemptAnswer{}, fmt.Errorf("%w: %w (waited %s)", ErrUnavailable, errWithdrawn, s.o.RequestTimeout)
	}
	if ctx.Err() != nil {
		return attemptAnswer{}, err
	}
	return await(ctx, s.txns, a.done)
}

// consumeLone sends attempt a of a consume that is alone (no shared write
// transaction of the replica's in flight or waiting, txns.go, no commit of
// its log running or waiting) in one transaction of its own that, if the marker
// is taken, also puts the copies of the frames the consume then appends
// (frames builds them) and their copy index: it takes the log's lead first, so the
// frames' seqs and hashes are fixed before the commit (wal.Lead). It
// reports false, having sent nothing, when the consume is not alone. A
// marker not taken lets go of the lead (nothing was copied); an etcd
// error, which leaves the copies maybe in etcd, holds the log until the
// dropper has deleted them, as a failed staged commit does (logAndCopy).
// A marker taken is answered at once: the marker and the frames' copies
// are committed in etcd, a quorum's disks, and the log commits the frames
// in the background, still leading (commitLone). A lone consume that
// finds that commit running waits for it rather than take the shared
// path's two round trips, unless another already waits (awaitLone).
func (s *Store) consumeLone(ctx context.Context, a *attempt, frames func() []wal.FrameInput) (attemptAnswer, bool) {
	if !s.txns.idle() || !s.awaitLone(ctx) {
		return attemptAnswer{}, false
	}
	fence, err := s.fence(ctx)
	if err != nil {
		return attemptAnswer{}, false // the shared path meets etcd's error
	}
	ins := frames()
	lead, ok := s.log.TryLead()
	if !ok {
		return attemptAnswer{}, false
	}
	resp, err := s.sendLed(ctx, lead, fence, []*attempt{a}, ins, nil, a.readsIn)
	switch {
	case errors.Is(err, errLedRefused):
		return attemptAnswer{}, false
	case err != nil:
		return attemptAnswer{err: err}, true
	case !resp.Succeeded:
		s.fenceMoved(a, resp.Responses, fence)
		return attemptAnswer{seen: resp.Responses}, true
	}
	return attemptAnswer{put: a, logged: true}, true
}

// errLedRefused: the transaction sendLed would send is over etcd's
// limits (maxTxnOps, maxTxnBytes), or etcd refused it before applying it
// (refusedUnapplied); nothing of it is in etcd, and the lead was let go.
var errLedRefused = errors.New("etcdstore: a led transaction over etcd's limits")

// errNotStaged: the frames of a led transaction could not be fixed (an
// attr that does not encode); nothing was sent, and the lead was let go.
var errNotStaged = errors.New("etcdstore: the frames of a led transaction could not be staged")

// refusedUnapplied reports whether err is etcd's refusal of a request it
// checks before it proposes it (too many operations, too large, a key put
// twice: InvalidArgument; no space left, too many requests waiting:
// ResourceExhausted), or gRPC's of a message over its send limit: the
// request was never applied.
func refusedUnapplied(err error) bool {
	code := status.Code(err)
	if e := (rpctypes.EtcdError{}); errors.As(err, &e) { // clientv3's form of etcd's errors
		code = e.Code()
	}
	return code == codes.InvalidArgument || code == codes.ResourceExhausted
}

// sendLed sends, under lead, the markers of as and the copies of the
// frames ins their consumes append in one transaction: If(each marker
// free and its binding there, the fence at fence) Then(each marker put,
// the copies, their index, and extra's puts: copies of frames the log has
// already) Else(els's reads). On success the consumes are answered and
// the log commits the frames in the background, still leading
// (commitLone); a failed comparison lets go of the lead (nothing was
// copied); an etcd error holds the log until the dropper has deleted the
// copies (Lose), unless etcd refused the request before applying it.
func (s *Store) sendLed(ctx context.Context, lead *wal.Lead, fence int64, as []*attempt, ins []wal.FrameInput,
	extra *copyWrite, els func(*txnBuf) []*etcdserverpb.RequestOp) (*etcdserverpb.TxnResponse, error) {
	// answered is set before commitLone starts, the only caller of lost
	// after it: a commit that fails once the consume was answered leaves
	// its copies to be taken up, not deleted.
	answered := false
	req, cw, err := s.stageCopies(lead, ins, &answered)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errNotStaged, err)
	}
	if extra == nil {
		extra = &copyWrite{}
	}
	size := 0
	for _, a := range as {
		size += a.bytes
	}
	for _, w := range []*copyWrite{cw, extra} {
		for i, k := range w.keys {
			size += len(k) + len(w.values[i])
		}
	}
	puts := len(as) + len(cw.keys) + len(extra.keys)
	if !ledFits(len(as), puts) || size > maxTxnBytes {
		lead.Release()
		return nil, errLedRefused
	}
	req.fenced = true
	var resp *etcdserverpb.TxnResponse
	refused := false
	err = s.withLease(ctx, func(lease clientv3.LeaseID) error {
		b := newTxnBuf(len(as), puts-len(as))
		then := make([]*etcdserverpb.RequestOp, 0, puts)
		cmps := make([]*etcdserverpb.Compare, 0, 2*len(as)+1)
		for _, a := range as {
			then = append(then, a.putIn(b, lease))
			cmps = append(cmps, a.cmpsIn(b)...)
		}
		then = extra.putsIn(b, cw.putsIn(b, then, lease), lease)
		octx, cancel := s.opCtx(ctx)
		defer cancel()
		var err error
		resp, err = s.sendTxn(octx, &etcdserverpb.TxnRequest{Compare: append(cmps, s.fenceCmp(fence)), Success: then, Failure: els(b)})
		refused = refusedUnapplied(err)
		return s.seen(octx, err)
	})
	switch {
	case err != nil && refused:
		req.end(err)
		lead.Release()
		if s.refusalLogged.CompareAndSwap(false, true) {
			s.logger.Warn("etcd: refused a consume's transaction before applying it, sent as sub-transactions instead (is --max-txn-ops or --max-request-bytes below etcd's default?); logged once", "err", err)
		}
		return nil, fmt.Errorf("%w: %w", errLedRefused, err)
	case err != nil:
		req.end(err)
		lead.Lose()
		s.wakeDropper()
		return nil, err
	}
	req.end(nil)
	if !resp.Succeeded {
		lead.Release()
		return resp, nil
	}
	if s.afterSent != nil {
		s.afterSent()
	}
	answered = true
	done := make(chan struct{})
	s.loneMu.Lock()
	s.lone = done
	s.loneMu.Unlock()
	go s.commitLone(lead, done)
	return resp, nil
}

// ledFits reports whether a led transaction of attempts markers and puts
// puts in all (markers, copies, copy indexes) is within etcd's
// --max-txn-ops at each of its levels: two comparisons a marker and the
// fence's, and the puts.
func ledFits(attempts, puts int) bool {
	return 2*attempts+1 <= maxTxnOps && puts <= maxTxnOps
}

// flatBackoff is how long the shared path sends no flat transaction after
// one failed or was refused: a failed flat transaction costs each of its
// consumes a round trip more, and while replays or consumes of steps
// taken elsewhere keep arriving, most would fail.
const flatBackoff = 250 * time.Millisecond

// sendFlat sends the leader attempts of a shared transaction, two or
// more, as a lone consume sends its own (consumeLone, sendLed): one flat
// transaction that puts every marker and the copies of the frames their
// consumes append, or none of them; the batch's other copies go in it
// too. For a crowd of consumes of fresh bindings each then pays one round
// trip rather than two (the marker's transaction, then the log's commit
// with its copies in the next one), and etcd decodes a comparison and a
// put per marker rather than a nested transaction with its reads.
//
// It first waits for the log's commit of the led transaction before it
// (awaitLedCommit: one fsync, ledCommitWait at most). When the log then
// commits other writes (at 64 callers, those of consumes answered by
// sub-transactions, whose commits wait for their copies, in this batch)
// it sends the batch's copies alone and waits up to ledCommitWait for the
// lead: the shared path returns to flat transactions rather than stay
// with sub-transactions, each batch's copies holding the log for the
// next. It reports flat false, having changed no marker, when it cannot
// lead by then, an attempt logs no frames or its frames do not encode,
// the transaction would be over etcd's limits or etcd refused it
// unapplied, a comparison failed (a marker taken, a binding gone, the
// fence moved), or one failed in the last flatBackoff: the attempts then
// go as sub-transactions of their own (sendParts), which tell each its
// answer. A lone attempt goes so at once: a replay, whose marker is
// taken, pays one round trip, not two. copiesSent reports that the
// batch's copies were sent and ended.
func (s *Store) sendFlat(ctx context.Context, leaders []*attempt, copies []*copyRequest) (flat, copiesSent bool, err error) {
	if len(leaders) < 2 || time.Now().UnixNano() < s.flatAfter.Load() {
		return false, false, nil
	}
	var ins []wal.FrameInput
	for _, a := range leaders {
		if a.frames == nil {
			return false, false, nil
		}
		ins = append(ins, a.frames()...)
	}
	puts := len(leaders) + inputRuns(ins) + 1
	for _, r := range copies {
		puts += copyPuts(r.frames)
	}
	if len(copies) > 0 {
		puts++
	}
	if !ledFits(len(leaders), puts) {
		return false, false, nil
	}
	s.awaitLedCommit()
	fence, err := s.fence(ctx)
	if err != nil {
		return false, false, nil // the shared path meets etcd's error
	}
	lead, ok := s.log.TryLead()
	if !ok {
		if len(copies) > 0 {
			s.sendNested(s.bg, nil, copies)
			copies, copiesSent = nil, true
		}
		lctx, cancel := context.WithTimeout(ctx, s.ledWait)
		lead, err = s.log.Lead(lctx)
		cancel()
		if err != nil {
			return false, copiesSent, nil
		}
	}
	var extra *copyWrite
	if len(copies) > 0 {
		extra = s.encodeCopies(copies)
	}
	resp, err := s.sendLed(ctx, lead, fence, leaders, ins, extra, func(b *txnBuf) []*etcdserverpb.RequestOp {
		return []*etcdserverpb.RequestOp{b.rng([]byte(s.p.fence(s.o.Replica)), nil, false)}
	})
	switch {
	case errors.Is(err, errNotStaged) || errors.Is(err, errLedRefused):
		// Nothing was sent and the lead is free: the sub-transactions go,
		// and meet what stopped this one if it stops them too.
		s.flatAfter.Store(time.Now().Add(flatBackoff).UnixNano())
		return false, copiesSent, nil
	case err != nil:
		for _, r := range copies {
			r.end(err)
		}
		return true, true, err
	case !resp.Succeeded:
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) == 0 || kvs[0].ModRevision != fence {
			s.fenceRev.CompareAndSwap(fence, -1)
		}
		s.flatAfter.Store(time.Now().Add(flatBackoff).UnixNano())
		return false, copiesSent, nil
	}
	for _, r := range copies {
		r.end(nil)
	}
	for _, a := range leaders {
		a.answer = attemptAnswer{put: a, logged: true}
	}
	return true, true, nil
}

// ledCommitWait bounds how long the shared sender waits for the log's
// commit of the last led transaction (awaitLedCommit): one fsync, a
// millisecond or two on a local disk, so the next batch may go flat; a
// commit that takes longer (a stalled disk) leaves the batch to go as
// sub-transactions, as before there were flat ones.
const ledCommitWait = 20 * time.Millisecond

// awaitLedCommit waits, for at most s.ledWait, for the log's commit of
// the last led transaction when it still runs, so that the shared
// sender's batch may lead next (sendFlat). It does not wait again for a
// commit it has already waited the whole time for.
func (s *Store) awaitLedCommit() {
	s.loneMu.Lock()
	done, stalled := s.lone, s.loneStalled
	s.loneMu.Unlock()
	if done == nil || done == stalled {
		return
	}
	if !s.awaitCommit(s.bg, s.ledWait) {
		s.loneMu.Lock()
		s.loneStalled = done
		s.loneMu.Unlock()
	}
}

// awaitCommit waits, for at most wait or until ctx is done, for the log's
// commit of the last answered lone or flat transaction (commitLone) when
// it still runs, and reports whether it has ended.
func (s *Store) awaitCommit(ctx context.Context, wait time.Duration) bool {
	s.loneMu.Lock()
	done := s.lone
	s.loneMu.Unlock()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	default:
	}
	if s.awaitingCommit != nil {
		s.awaitingCommit()
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// stageCopies fixes the frames ins append under lead, as the copy request
// of the one transaction that also carries another write of the
// replica's, and encodes their copies. When the log loses the frames (its
// commit fails, or Lose), they are taken up from their copies once
// *taken is set (etcd took that write), and deleted otherwise. On an
// error the lead is let go.
func (s *Store) stageCopies(lead *wal.Lead, ins []wal.FrameInput, taken *bool) (*copyRequest, *copyWrite, error) {
	req := &copyRequest{done: make(chan struct{})}
	fs, stored, err := lead.Stage(ins, func() {
		if *taken {
			s.takeUpLost()
		} else {
			s.lose(req)
		}
	})
	if err != nil {
		lead.Release()
		return nil, nil, err
	}
	req.frames, req.stored = fs, stored
	req.baseSeq, req.baseHash = lead.Head()
	return req, s.encodeCopies([]*copyRequest{req}), nil
}

// commitLone commits the frames of a lone consume that was answered, as
// lead staged them, and closes done. A commit that fails holds the log
// (wal.Lead) until the dropper has taken the frames up from their copies
// (settle.go): the answer stands on the copies in etcd, as it does when
// the process dies before the commit.
func (s *Store) commitLone(lead *wal.Lead, done chan struct{}) {
	defer close(done)
	if s.beforeLoneCommit != nil {
		s.beforeLoneCommit()
	}
	if err := lead.Commit(); err != nil {
		// Also a commit that reached the disk and then found the file
		// gone: the log holds only when the frames are not in it.
		s.logger.Error("etcd: the log's commit of an answered consume failed; its frames are taken up from their copies if the log lacks them", "err", err)
		s.wakeDropper()
	}
}

// awaitLone waits for the log's commit of the last answered lone consume
// when it still runs, so that this consume may lead next, and reports
// whether it may try. One consume waits; the others take the shared path
// rather than queue behind it.
func (s *Store) awaitLone(ctx context.Context) bool {
	s.loneMu.Lock()
	done := s.lone
	if done == nil || s.loneWaiting {
		s.loneMu.Unlock()
		return done == nil
	}
	select {
	case <-done:
		s.loneMu.Unlock()
		return true
	default:
	}
	s.loneWaiting = true
	s.loneMu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
	}
	s.loneMu.Lock()
	s.loneWaiting = false
	s.loneMu.Unlock()
	return ctx.Err() == nil && s.txns.idle()
}

// attempt is one call's try to take a step's marker, waiting for a
// shared write transaction (txns.go).
type attempt struct {
	id    string // the preflight id
	key   string // the marker's key
	value []byte // the marker as JSON
	m     marker
	bytes int // what the attempt adds to a transaction
	// The keys of its sub-transaction as sent: the marker's, the
	// binding's, the markers' prefix and the end of its range.
	markerKey, bindingKey, markersKey, markersEnd []byte
	// frames builds the frames the consume appends once a's marker is
	// put, for its logGroup; nil when the consume logs none (tests).
	frames func() []wal.FrameInput
	// leader is the attempt on the same key whose sub-transaction this one
	// shares the answer of, nil when it has its own (splitParts).
	leader *attempt
	answer attemptAnswer // a leader's, once its transaction answered
	done   chan attemptAnswer
}

// attemptAnswer is what a sub-transaction said of a marker.
type attemptAnswer struct {
	// put is the attempt whose marker was put; nil when the key was taken
	// or the binding gone, and seen then holds the Else branch's reads.
	put  *attempt
	seen []*etcdserverpb.ResponseOp
	err  error
	// logged, when put is set, says the consume's frames were copied with
	// the marker, and the log commits them (sendLed).
	logged bool
	// group, when put is set, is the logGroup of the markers the
	// transaction put, when there is more than one.
	group *logGroup
}

// logGroup is the consumes whose markers one shared transaction put: the
// first of them to take its answer appends the frames of every one to the
// log in one write,
// whose copies go to etcd in one copy request (logAndCopy), and the
// others wait for it; a consume that gives up waiting answers 503, its
// frames logged all the same. One write instead of one each keeps the
// local commits as large as the transaction: the consumes it answers at
// once would otherwise commit apart, the first alone (wal's lone writer)
// and the others after it.
type logGroup struct {
	members []*attempt
	taken   atomic.Bool // by the member that logs
	err     error       // set before done is closed
	done    chan struct{}
}

// logGroup logs the frames of g once, by the first member that calls it,
// and returns how that ended.
func (s *Store) logGroup(ctx context.Context, g *logGroup) error {
	if !g.taken.CompareAndSwap(false, true) {
		select {
		case <-g.done:
			return g.err
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", ErrUnavailable, ctx.Err())
		}
	}
	var ins []wal.FrameInput
	for _, m := range g.members {
		ins = append(ins, m.frames()...)
	}
	// Under the store's context: the frames are every member's.
	_, g.err = s.logAndCopy(s.bg, ins)
	close(g.done)
	return g.err
}

func (s *Store) newAttempt(id string, step int, m marker, value []byte) *attempt {
	a := &attempt{id: id, key: s.p.marker(id, step), value: value, m: m, done: make(chan attemptAnswer, 1)}
	markers := s.p.markers(id)
	a.markerKey, a.bindingKey, a.markersKey = []byte(a.key), []byte(s.p.binding(id)), []byte(markers)
	a.markersEnd = []byte(clientv3.GetPrefixRangeEnd(markers))
	// Two compares and a put of the key, the binding's key twice, the
	// markers' prefix, the value, and room for the framing.
	a.bytes = 3*len(a.key) + 2*len(a.bindingKey) + len(a.markersKey) + len(value) + 64
	return a
}

// cmpsIn are the comparisons of a's sub-transaction, in b: its marker not
// taken, its binding there.
func (a *attempt) cmpsIn(b *txnBuf) []*etcdserverpb.Compare {
	c := carve(&b.cmpLists, 2)
	c[0] = b.createRevision(a.markerKey, etcdserverpb.Compare_EQUAL, 0)
	c[1] = b.createRevision(a.bindingKey, etcdserverpb.Compare_GREATER, 0)
	return c
}

// readsIn are the reads of a's sub-transaction when a comparison fails,
// in b: the binding's existence and its markers (readOps).
func (a *attempt) readsIn(b *txnBuf) []*etcdserverpb.RequestOp {
	r := carve(&b.opLists, 2)
	r[0] = b.rng(a.bindingKey, nil, true)
	r[1] = b.rng(a.markersKey, a.markersEnd, false)
	return r
}

// putIn is the put of a's marker under lease, in b.
func (a *attempt) putIn(b *txnBuf, lease clientv3.LeaseID) *etcdserverpb.RequestOp {
	return b.put(a.markerKey, a.value, lease)
}

// opIn is a's sub-transaction (doc.go, "Consume-once"), in b: the marker
// put under lease when the key is free and the binding there, else the
// binding's and markers' reads.
func (a *attempt) opIn(b *txnBuf, lease clientv3.LeaseID) *etcdserverpb.RequestOp {
	then := carve(&b.opLists, 1)
	then[0] = a.putIn(b, lease)
	return b.txn(a.cmpsIn(b), then, a.readsIn(b))
}
