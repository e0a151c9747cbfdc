package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// flatParts are the attempts of one shared transaction, one per binding
// of bs on its first step, each with the frames its consume appends.
func flatParts(s *Store, bs []preflight.Binding) ([]part, []*attempt) {
	parts, as, _ := flatRequests(s, bs)
	return parts, as
}

// flatRequests is flatParts with the consume requests the attempts are of.
func flatRequests(s *Store, bs []preflight.Binding) ([]part, []*attempt, []*wal.ConsumeRequest) {
	var parts []part
	var as []*attempt
	var rs []*wal.ConsumeRequest
	for i := range bs {
		r := consumeIn(&bs[i], "req-flat")
		rs = append(rs, &r)
		m := marker{RequestID: r.RequestID, ArgsDigest: r.CallDigest, At: r.Time.UTC().Format(wal.TimestampFormat), Replica: s.o.Replica}
		value, _ := json.Marshal(m)
		a := s.newAttempt(bs[i].PreflightID, 0, m, value)
		res := wal.ConsumeResult{Status: wal.Consumed, StepID: bs[i].Steps[0].ID, StepIndex: 0}
		a.frames = func() []wal.FrameInput { return r.ConsumeFrames(res) }
		parts = append(parts, part{a: a})
		as = append(as, a)
	}
	return parts, as, rs
}

// flatStore opens replica-a on a prefix of its own (or prefix, when not
// empty) with a one-step binding recorded for each of ids.
func flatStore(t *testing.T, prefix string, ids ...string) (*Store, []preflight.Binding) {
	t.Helper()
	if prefix == "" {
		prefix = newPrefix()
	}
	s := open(t, "replica-a", prefix, t.TempDir())
	t.Cleanup(func() { closeStore(s) })
	var bs []preflight.Binding
	for _, id := range ids {
		bs = append(bs, recordSteps(t, s, id, 1))
	}
	return s, bs
}

// logGroupAndCheck logs the frames of the group whose markers a
// sub-transaction put and checks that the log then holds n frames past
// head and agrees with etcd.
func logGroupAndCheck(t *testing.T, s *Store, g *logGroup, head uint64, n int) {
	t.Helper()
	if err := s.logGroup(context.Background(), g); err != nil {
		t.Fatal(err)
	}
	if fs := framesAfter(t, s, head); len(fs) != n {
		t.Fatalf("%d frames after the group logged, want %d", len(fs), n)
	}
	checkClean(t, s)
}

// markerRev is the revision that put the marker of b's first step.
func markerRev(t *testing.T, s *Store, b *preflight.Binding) int64 {
	t.Helper()
	resp, err := s.cli.Get(context.Background(), s.p.marker(b.PreflightID, 0))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("marker of %s: %v, %v", b.PreflightID, resp, err)
	}
	return resp.Kvs[0].ModRevision
}

// TestFlatTransactionTakesEveryMarker: the markers of a shared
// transaction with no copies go with their frames' copies in one flat
// transaction; the consumes are answered with their frames copied, and
// the log then commits those frames itself.
func TestFlatTransactionTakesEveryMarker(t *testing.T) {
	s, bs := flatStore(t, "", "pf_flat_1", "pf_flat_2", "pf_flat_3")
	head, _ := s.log.Head()
	parts, as := flatParts(s, bs)
	s.sendParts(context.Background(), parts)
	for i, a := range as {
		if ans := <-a.done; ans.err != nil || ans.put != a || !ans.logged || ans.group != nil {
			t.Fatalf("attempt %d: %+v; want its marker put and its frames copied with it", i, ans)
		}
	}
	rev := markerRev(t, s, &bs[0])
	for i := range bs[1:] {
		if r := markerRev(t, s, &bs[i+1]); r != rev {
			t.Fatalf("marker %d at revision %d, the first at %d: want one transaction", i+1, r, rev)
		}
	}
	idx, err := s.cli.Get(context.Background(), s.p.copyIndex(s.o.Replica, head+6))
	if err != nil || len(idx.Kvs) != 1 || idx.Kvs[0].ModRevision != rev {
		t.Fatalf("the copy index of the six frames: %v, %v; want it put with the markers at %d", idx, err, rev)
	}
	fs := framesAfter(t, s, head)
	if len(fs) != 6 {
		t.Fatalf("%d frames after the transaction, want each consume's two", len(fs))
	}
	for i, f := range fs {
		want := []string{wal.KindConsumed, wal.KindDecision}[i%2]
		if f.Kind != want || f.AuditID != bs[i/2].AuditID {
			t.Fatalf("frame %d: %s of %s, want %s of %s", i, f.Kind, f.AuditID, want, bs[i/2].AuditID)
		}
	}
	checkClean(t, s)
}

// TestFlatTransactionFallsBackWhenAMarkerIsTaken: one taken marker fails
// the flat transaction whole, which copies nothing and lets go of the
// log; the attempts then go as sub-transactions of their own, which put
// the free markers and tell the taken one what etcd holds.
func TestFlatTransactionFallsBackWhenAMarkerIsTaken(t *testing.T) {
	prefix := newPrefix()
	a, bs := flatStore(t, prefix, "pf_flat_taken_1", "pf_flat_taken_2", "pf_flat_taken_3")
	b := open(t, "replica-b", prefix, t.TempDir())
	defer closeStore(b)
	ctx := context.Background()
	if res, err := b.Consume(ctx, consumeIn(&bs[1], "req-b")); err != nil || res.Status != wal.Consumed {
		t.Fatalf("consume on replica-b: %v, %v", res.Status, err)
	}
	head, _ := a.log.Head()
	parts, as := flatParts(a, bs)
	a.sendParts(ctx, parts)
	answers := make([]attemptAnswer, len(as))
	for i, at := range as {
		answers[i] = <-at.done
		if answers[i].err != nil || answers[i].logged {
			t.Fatalf("attempt %d: %+v; want an answer of its own sub-transaction", i, answers[i])
		}
	}
	if answers[1].put != nil || len(answers[1].seen) != 2 {
		t.Fatalf("the taken marker's attempt: %+v; want the reads of its Else branch", answers[1])
	}
	st, err := a.decodeSeen(bs[1].PreflightID, answers[1].seen)
	if err != nil || !st.bound || st.markers[0].Replica != "replica-b" {
		t.Fatalf("what the taken attempt saw: %+v, %v; want replica-b's marker", st, err)
	}
	for _, i := range []int{0, 2} {
		if answers[i].put != as[i] || answers[i].group == nil {
			t.Fatalf("attempt %d: %+v; want its marker put, its frames for its group to log", i, answers[i])
		}
	}
	if seq, _ := a.log.Head(); seq != head {
		t.Fatalf("log's head after the failed flat transaction: %d, want %d: nothing of it is logged", seq, head)
	}
	// etcd counts a range before its revision filters: the keys tell.
	if n, err := a.cli.Get(ctx, string(a.p)+"f/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMinCreateRev(markerRev(t, b, &bs[1])+1)); err != nil || len(n.Kvs) != 0 {
		t.Fatalf("frame copies put after replica-b's consume: %v, %v; want none before the group logs", n, err)
	}
	if markerRev(t, a, &bs[0]) != markerRev(t, a, &bs[2]) {
		t.Fatal("the free markers were not put by one transaction")
	}
	logGroupAndCheck(t, a, answers[0].group, head, 4)
	// For flatBackoff after a failure, batches go as sub-transactions.
	more := []preflight.Binding{recordSteps(t, a, "pf_flat_taken_4", 1), recordSteps(t, a, "pf_flat_taken_5", 1)}
	parts, as = flatParts(a, more)
	a.flatAfter.Store(time.Now().Add(time.Hour).UnixNano()) // the backoff outlasts the test's pace
	a.sendParts(ctx, parts)
	for i, at := range as {
		if ans := <-at.done; ans.err != nil || ans.put != at || ans.logged {
			t.Fatalf("attempt %d after a failed flat transaction: %+v; want its marker put by a sub-transaction", i, ans)
		}
	}
}

// TestFlatTransactionNoticesAMovedFence: a flat transaction requires the
// replica's fence where it last saw it, as a lone consume's does; one
// that finds it moved forgets the revision and the attempts go on as
// sub-transactions.
func TestFlatTransactionNoticesAMovedFence(t *testing.T) {
	s, bs := flatStore(t, "", "pf_flat_fence_1", "pf_flat_fence_2")
	ctx := context.Background()
	fence, err := s.fence(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.cli.Put(ctx, s.p.fence(s.o.Replica), s.o.Replica); err != nil {
		t.Fatal(err)
	}
	parts, as := flatParts(s, bs)
	s.sendParts(ctx, parts)
	for i, a := range as {
		if ans := <-a.done; ans.err != nil || ans.put != a || ans.logged {
			t.Fatalf("attempt %d: %+v; want its marker put by a sub-transaction", i, ans)
		}
	}
	if rev := s.fenceRev.Load(); rev == fence {
		t.Fatalf("the fence's revision is still %d after the flat transaction failed on it", fence)
	}
}

// holdLoneCommit consumes b's step as a lone consume, whose answer comes
// before its log's commit, and holds that commit until release is closed.
func holdLoneCommit(t *testing.T, s *Store, b *preflight.Binding) (release chan struct{}) {
	t.Helper()
	release = make(chan struct{})
	held := false
	s.beforeLoneCommit = func() {
		if !held {
			held = true
			<-release
		}
	}
	if res, err := s.Consume(context.Background(), consumeIn(b, "req-held")); err != nil || res.Status != wal.Consumed {
		close(release)
		t.Fatalf("lone consume: %v, %v", res.Status, err)
	}
	return release
}

// queueParts queues parts for s's shared sender, as consumes that arrive
// together do.
func queueParts(s *Store, parts []part) {
	for _, p := range parts {
		s.txns.add(p)
	}
}

// TestFlatTransactionWaitsForALoneCommit: while the log commits a lone
// consume that was answered, the shared sender waits for that commit (one
// fsync) so that its batch may go flat, rather than send the markers as
// sub-transactions whose frames are copied a round trip later.
func TestFlatTransactionWaitsForALoneCommit(t *testing.T) {
	s, bs := flatStore(t, "", "pf_flat_wait_1", "pf_flat_wait_2", "pf_flat_wait_3")
	s.ledWait = time.Minute
	ctx := context.Background()
	head, _ := s.log.Head()
	waiting := make(chan struct{}, 1)
	s.awaitingCommit = func() { waiting <- struct{}{} }
	release := holdLoneCommit(t, s, &bs[0])
	parts, as := flatParts(s, bs[1:])
	queueParts(s, parts)
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the shared sender did not wait for the lone commit within 10 s")
	}
	for _, b := range bs[1:] {
		if resp, err := s.cli.Get(ctx, s.p.marker(b.PreflightID, 0)); err != nil || len(resp.Kvs) != 0 {
			close(release)
			t.Fatalf("%s's marker while the lone commit runs: %v, %v; want none yet", b.PreflightID, resp, err)
		}
	}
	close(release)
	for i, a := range as {
		if ans := <-a.done; ans.err != nil || ans.put != a || !ans.logged {
			t.Fatalf("attempt %d: %+v; want its marker put with its frames' copies", i, ans)
		}
	}
	if markerRev(t, s, &bs[1]) != markerRev(t, s, &bs[2]) {
		t.Fatal("the markers were not put by one transaction")
	}
	if fs := framesAfter(t, s, head); len(fs) != 6 {
		t.Fatalf("%d frames after the lone consume and the flat transaction, want each consume's two", len(fs))
	}
	checkClean(t, s)
}

// TestFlatTransactionWaitsAtMostLedWait: a lone commit that takes longer
// than the sender's wait (a stalled disk) does not hold the shared path:
// its attempts go as sub-transactions, and their frames are logged once
// the log takes writes again; the sender does not wait for that commit a
// second time.
func TestFlatTransactionWaitsAtMostLedWait(t *testing.T) {
	s, bs := flatStore(t, "", "pf_flat_stall_1", "pf_flat_stall_2", "pf_flat_stall_3", "pf_flat_stall_4", "pf_flat_stall_5")
	s.ledWait = 50 * time.Millisecond
	var waits atomic.Int32
	s.awaitingCommit = func() { waits.Add(1) }
	head, _ := s.log.Head()
	release := holdLoneCommit(t, s, &bs[0])
	var groups []*logGroup
	for _, pair := range [][]preflight.Binding{bs[1:3], bs[3:5]} {
		parts, as := flatParts(s, pair)
		queueParts(s, parts)
		for i, a := range as {
			ans := <-a.done
			if ans.err != nil || ans.put != a || ans.logged || ans.group == nil {
				close(release)
				t.Fatalf("attempt %d while the lone commit is held: %+v; want its marker put by a sub-transaction", i, ans)
			}
			if i == 0 {
				groups = append(groups, ans.group)
			}
		}
	}
	if n := waits.Load(); n != 1 {
		close(release)
		t.Fatalf("the sender waited %d times for one stalled commit, want once", n)
	}
	close(release)
	if err := s.logGroup(context.Background(), groups[0]); err != nil {
		t.Fatal(err)
	}
	logGroupAndCheck(t, s, groups[1], head, 10)
}

// refusingStub is the store's KV stub with etcd refusing the next
// transaction before it applies it, as it refuses one of more operations
// than its --max-txn-ops.
type refusingStub struct {
	etcdserverpb.KVClient
	armed *atomic.Bool
}

func (k refusingStub) Txn(ctx context.Context, in *etcdserverpb.TxnRequest, opts ...grpc.CallOption) (*etcdserverpb.TxnResponse, error) {
	if k.armed.CompareAndSwap(true, false) {
		return nil, rpctypes.ErrGRPCTooManyOps
	}
	return k.KVClient.Txn(ctx, in, opts...)
}

// TestFlatTransactionRefusedUnapplied: a flat transaction etcd refuses
// before applying it (over its limits) wrote nothing: the log is let go,
// not held, and the attempts go as sub-transactions.
func TestFlatTransactionRefusedUnapplied(t *testing.T) {
	s, bs := flatStore(t, "", "pf_flat_refused_1", "pf_flat_refused_2")
	head, _ := s.log.Head()
	armed := &atomic.Bool{}
	armed.Store(true)
	s.kv = refusingStub{KVClient: s.kv, armed: armed}
	parts, as := flatParts(s, bs)
	s.sendParts(context.Background(), parts)
	ans := make([]attemptAnswer, len(as))
	for i, a := range as {
		if ans[i] = <-a.done; ans[i].err != nil || ans[i].put != a || ans[i].logged || ans[i].group == nil {
			t.Fatalf("attempt %d of a refused flat transaction: %+v; want its marker put by a sub-transaction", i, ans[i])
		}
	}
	if armed.Load() {
		t.Fatal("no transaction was refused")
	}
	if err := s.Probe(context.Background()); err != nil {
		t.Fatalf("probe after the refusal: %v; want the log not held", err)
	}
	logGroupAndCheck(t, s, ans[0].group, head, 4)
}

// otherCopy appends another call's decision frame under auditID to s's
// log and returns the request of its copy, not yet sent.
func otherCopy(t *testing.T, s *Store, auditID string) *copyRequest {
	t.Helper()
	baseSeq, baseHash := s.log.Head()
	fs, err := s.log.AppendFrames(context.Background(), []wal.FrameInput{{Kind: wal.KindDecision, AuditID: auditID, Time: time.Now(),
		Attrs: map[string]any{"outcome": "deny"}}})
	if err != nil {
		t.Fatal(err)
	}
	return &copyRequest{frames: fs, baseSeq: baseSeq, baseHash: baseHash, done: make(chan struct{})}
}

// TestFlatTransactionCarriesOtherCopies: the copies of frames the log
// already has (another call's) go in the flat transaction with the
// markers, under their own copy index.
func TestFlatTransactionCarriesOtherCopies(t *testing.T) {
	s, bs := flatStore(t, "", "pf_flat_copies_1", "pf_flat_copies_2")
	ctx := context.Background()
	other := otherCopy(t, s, "au_flat_copies_other")
	fs := other.frames
	parts, as := flatParts(s, bs)
	s.sendParts(ctx, append(parts, part{c: other}))
	for i, a := range as {
		if ans := <-a.done; ans.err != nil || ans.put != a || !ans.logged {
			t.Fatalf("attempt %d: %+v; want its marker put with its frames' copies", i, ans)
		}
	}
	<-other.done
	if other.err != nil {
		t.Fatalf("the other call's copy: %v", other.err)
	}
	rev := markerRev(t, s, &bs[0])
	cp, err := s.cli.Get(ctx, s.p.frame(fs[0].AuditID, s.o.Replica, fs[0].Seq))
	if err != nil || len(cp.Kvs) != 1 || cp.Kvs[0].ModRevision != rev {
		t.Fatalf("the other call's copy: %v, %v; want it put with the markers at %d", cp, err, rev)
	}
	if idx, err := s.cli.Get(ctx, s.p.copyIndex(s.o.Replica, fs[0].Seq)); err != nil || len(idx.Kvs) != 1 || idx.Kvs[0].ModRevision != rev {
		t.Fatalf("its copy index: %v, %v; want its own, put at %d", idx, err, rev)
	}
	if got := framesAfter(t, s, fs[0].Seq); len(got) != 4 {
		t.Fatalf("%d frames after the other call's, want the two consumes' two each", len(got))
	}
	checkClean(t, s)
}

// TestFlatTransactionEtcdErrorDropsCopies: a flat transaction that etcd
// applied but whose answer was lost fails every attempt (503); the log is
// held until the copies it put are deleted, and the consumes, kept in
// doubt as decide keeps them, then have their consumed frames logged.
func TestFlatTransactionEtcdErrorDropsCopies(t *testing.T) {
	s, bs := flatStore(t, "", "pf_flat_lost_1", "pf_flat_lost_2")
	ctx := context.Background()
	if _, err := s.fence(ctx); err != nil {
		t.Fatal(err)
	}
	head, _ := s.log.Head()
	lk := &lostAnswerKV{KV: s.cli.KV}
	lk.armed.Store(true)
	s.kv = lostAnswerStub{KVClient: s.kv, kv: lk}
	parts, as, rs := flatRequests(s, bs)
	s.sendParts(ctx, parts)
	for i, a := range as {
		if ans := <-a.done; !errors.Is(ans.err, ErrUnavailable) {
			t.Fatalf("attempt %d of a transaction whose answer was lost: %+v, want ErrUnavailable", i, ans)
		}
		s.doubt(rs[i], 0)
	}
	if seq, _ := s.log.Head(); seq != head {
		t.Fatalf("log's head after the lost answer: %d, want %d (nothing logged)", seq, head)
	}
	waitReleased(t, s, 10*time.Second, nil)
	if resp, err := s.cli.Get(ctx, s.p.copyIndex(s.o.Replica, head+4)); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the lost transaction's copy index once the log appends again: %v, %v; want it deleted", resp.Kvs, err)
	}
	for deadline := time.Now().Add(10 * time.Second); len(framesAfter(t, s, head)) < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the consumes kept in doubt have no consumed frames 10 s after the log appends again")
		}
	}
	for i, f := range framesAfter(t, s, head) {
		if c, err := f.Consumed(); f.Kind != wal.KindConsumed || err != nil || c.RequestID != "req-flat" {
			t.Fatalf("frame %d after the lost answer: %+v, %v; want a consumed frame of req-flat", i, f, err)
		}
	}
	checkClean(t, s)
}

// TestFlatTransactionSendsCopiesAloneWhileTheLogCommits: when the log is
// committing other writes as a flat transaction is about to lead (the
// commits of consumes a nested transaction answered, which wait for their
// copies in this batch), the batch's copies go alone first, and the
// markers go flat once the log's lead is free, rather than nested.
func TestFlatTransactionSendsCopiesAloneWhileTheLogCommits(t *testing.T) {
	s, bs := flatStore(t, "", "pf_flat_alone_1", "pf_flat_alone_2")
	s.ledWait = time.Minute
	ctx := context.Background()
	other := otherCopy(t, s, "au_flat_alone_other")
	fs := other.frames
	busy, ok := s.log.TryLead() // another write's commit, running
	if !ok {
		t.Fatal("the log's lead is not free")
	}
	parts, as := flatParts(s, bs)
	go s.sendParts(ctx, append(parts, part{c: other}))
	select {
	case <-other.done:
	case <-time.After(10 * time.Second):
		busy.Release()
		t.Fatal("the batch's copies were not sent within 10 s while the log was busy")
	}
	if other.err != nil {
		busy.Release()
		t.Fatalf("the copies sent alone: %v", other.err)
	}
	for _, b := range bs {
		if resp, err := s.cli.Get(ctx, s.p.marker(b.PreflightID, 0)); err != nil || len(resp.Kvs) != 0 {
			busy.Release()
			t.Fatalf("%s's marker while the log is busy: %v, %v; want none yet", b.PreflightID, resp, err)
		}
	}
	busy.Release()
	for i, a := range as {
		if ans := <-a.done; ans.err != nil || ans.put != a || !ans.logged {
			t.Fatalf("attempt %d: %+v; want its marker put flat once the log was free", i, ans)
		}
	}
	if got := framesAfter(t, s, fs[0].Seq); len(got) != 4 {
		t.Fatalf("%d frames after the other call's, want the two consumes' two each", len(got))
	}
	checkClean(t, s)
}
