package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// consumeIn is a consume of b's step under request id req, with its
// decision frame, as the gate makes it.
func consumeIn(b *preflight.Binding, req string) wal.ConsumeRequest {
	return wal.ConsumeRequest{Binding: b, Kind: "refund.create", ArgsDigest: "sha256:a", RequestID: req,
		CallDigest: "sha256:call", Time: time.Now(),
		Decision: func(r wal.ConsumeResult) wal.FrameInput {
			return wal.FrameInput{Kind: wal.KindDecision, AuditID: b.AuditID, Time: time.Now(),
				Attrs: map[string]any{"outcome": r.Status.String()}}
		}}
}

// consumeLoneT consumes b's step under request id req, as a lone consume
// (nothing else runs on s), and returns the log's head before it and the
// consume's error. Whatever follows, its marker and its frames' copies
// went to etcd in one transaction: the copy index of the frames it fixed
// (seq head+1 and head+2) was put at the marker's revision.
func consumeLoneT(t *testing.T, s *Store, b *preflight.Binding, req string) (uint64, error) {
	t.Helper()
	ctx := context.Background()
	head, _ := s.log.Head()
	res, err := s.Consume(ctx, consumeIn(b, req))
	if err == nil && res.Status != wal.Consumed {
		t.Fatalf("lone consume: %v, want consumed", res.Status)
	}
	m, merr := s.cli.Get(ctx, s.p.marker(b.PreflightID, 0))
	if merr != nil || len(m.Kvs) != 1 {
		t.Fatalf("the lone consume's marker: %v, %v", m, merr)
	}
	rev := m.Kvs[0].ModRevision
	idx, ierr := s.cli.Get(ctx, s.p.copyIndex(s.o.Replica, head+2), clientv3.WithRev(rev))
	if ierr != nil || len(idx.Kvs) != 1 || idx.Kvs[0].ModRevision != rev {
		t.Fatalf("the lone consume's copy index at its marker's revision %d: %v, %v; want it put by the same transaction", rev, idx, ierr)
	}
	return head, err
}

// framesAfter are the log's frames past seq, once the commit of an
// answered lone consume has ended.
func framesAfter(t *testing.T, s *Store, seq uint64) []wal.Frame {
	t.Helper()
	if !s.awaitCommit(context.Background(), 10*time.Second) {
		t.Fatal("the log's commit of the last lone or flat transaction: not within 10 s")
	}
	head, _ := s.log.Head()
	var fs []wal.Frame
	err := s.log.View(func(tx *wal.Tx) error {
		for n := seq + 1; n <= head; n++ {
			f, err := tx.Frame(n)
			if err != nil {
				return err
			}
			fs = append(fs, f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// checkOnly fails the test unless the log verifies and check-store finds
// no problem but those of the kinds allowed.
func checkOnly(t *testing.T, s *Store, allowed ...string) {
	t.Helper()
	ctx := context.Background()
	if rep, err := s.log.Verify(ctx); err != nil || !rep.OK() {
		t.Fatalf("wal verify: %+v, %v", rep, err)
	}
	rep, err := s.Check(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		if !slices.Contains(allowed, p.Problem) {
			t.Fatalf("check-store: %+v", rep.Problems)
		}
	}
}

// TestLoneConsumeOneTransaction: a lone consume puts its marker and its
// frames' copy in one transaction; the copy is one value, the log's
// frames byte for byte under the first one's key, and every replica's
// audit join has the decision.
func TestLoneConsumeOneTransaction(t *testing.T) {
	prefix := newPrefix()
	a := open(t, "replica-a", prefix, t.TempDir())
	defer closeStore(a)
	b := open(t, "replica-b", prefix, t.TempDir())
	defer closeStore(b)
	ctx := context.Background()
	bd := recordSteps(t, a, "pf_lone", 1)
	head, err := consumeLoneT(t, a, &bd, "req-lone")
	if err != nil {
		t.Fatal(err)
	}
	fs := framesAfter(t, a, head)
	if len(fs) != 2 || fs[0].Kind != wal.KindConsumed || fs[1].Kind != wal.KindDecision {
		t.Fatalf("the lone consume's frames: %+v; want its consumed and decision frames", fs)
	}
	resp, err := a.cli.Get(ctx, a.p.replicaFrames(bd.AuditID, "replica-a"), clientv3.WithPrefix())
	want := wal.EncodeFrameList([][]byte{wal.EncodeFrame(&fs[0]), wal.EncodeFrame(&fs[1])})
	if err != nil || len(resp.Kvs) != 2 || string(resp.Kvs[1].Key) != a.p.frame(bd.AuditID, "replica-a", fs[0].Seq) ||
		string(resp.Kvs[1].Value) != string(want) {
		t.Fatalf("copies under the audit id: %v, %v; want the preflight's, then one of both frames as the log stores them", resp.Kvs, err)
	}
	got, err := b.AuditFrames(ctx, bd.AuditID)
	if err != nil || len(got) != 2 || got[1].Hash != fs[1].Hash {
		t.Fatalf("another replica's audit join: %+v, %v; want the preflight and the decision", got, err)
	}
	if res, err := b.Consume(ctx, consumeIn(&bd, "req-other")); err != nil || res.Status != wal.Replay {
		t.Fatalf("the step on another replica: %v, %v; want replay", res.Status, err)
	}
	checkClean(t, a)
}

// crashAfterLoneConsume is replica-a killed after a lone consume's
// transaction (marker and copies) committed and before its frames reached
// its disk: it returns the prefix, the data directory as the crash left
// it (the log one commit short), the binding and the lost frames.
func crashAfterLoneConsume(t *testing.T, id string) (prefix, crashed string, bd preflight.Binding, lost []wal.Frame) {
	t.Helper()
	prefix, dir := newPrefix(), t.TempDir()
	a := open(t, "replica-a", prefix, dir)
	bd = recordSteps(t, a, id, 1)
	closeStore(a)
	crashed = snapshotLog(t, dir)
	a = open(t, "replica-a", prefix, dir)
	defer closeStore(a)
	head, err := consumeLoneT(t, a, &bd, "req-"+id)
	if err != nil {
		t.Fatal(err)
	}
	return prefix, crashed, bd, framesAfter(t, a, head)
}

// TestLoneCrashCopiesAdopted: TestCrashCopiesAdopted for a lone consume's
// frames, whose copies went with its marker: the reopened log takes them
// up, the step is spent with its frames in both places, and the next
// frame follows them.
func TestLoneCrashCopiesAdopted(t *testing.T) {
	ctx := context.Background()
	prefix, crashed, bd, lost := crashAfterLoneConsume(t, "pf_lone_crash")
	a := reopenAdopting(t, prefix, crashed, lost[1:], bd.AuditID, 2)
	defer closeStore(a)
	if res, err := a.Consume(ctx, consumeIn(&bd, "req-pf_lone_crash")); err != nil || res.Status != wal.Repeated {
		t.Fatalf("the consume again: %v, %v; want repeated", res.Status, err)
	}
	if next := framesAfter(t, a, lost[1].Seq); len(next) != 1 || next[0].PrevHash != lost[1].Hash {
		t.Fatalf("frames after the adopted ones: %+v; want the repeat's decision, following them", next)
	}
	checkClean(t, a)
}

// TestLoneCrashCopiesAfterGapDropped: TestCrashCopiesAfterGapDropped for
// a lone consume's frames: with the first copy gone the others are
// deleted with their index, and the log goes on from its own head.
func TestLoneCrashCopiesAfterGapDropped(t *testing.T) {
	prefix, crashed, _, lost := crashAfterLoneConsume(t, "pf_lone_gap")
	a := reopenAfterGap(t, prefix, crashed, lost)
	defer closeStore(a)
	// The step stays spent; its frames are gone with the crash.
	checkOnly(t, a, ProblemMarkerWithoutFrame)
}

// lostAnswerKV is the client's KV whose next transaction, once armed,
// commits in etcd and then answers an error: a lost answer, the outcome
// unknown to the store.
type lostAnswerKV struct {
	clientv3.KV
	armed atomic.Bool
}

func (k *lostAnswerKV) Txn(ctx context.Context) clientv3.Txn {
	return &lostAnswerTxn{Txn: k.KV.Txn(ctx), kv: k}
}

type lostAnswerTxn struct {
	clientv3.Txn
	kv *lostAnswerKV
}

func (t *lostAnswerTxn) If(cs ...clientv3.Cmp) clientv3.Txn   { t.Txn = t.Txn.If(cs...); return t }
func (t *lostAnswerTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Then(ops...); return t }
func (t *lostAnswerTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }

// lostAnswerStub is lostAnswerKV for the store's KV stub (pbtxn.go).
type lostAnswerStub struct {
	etcdserverpb.KVClient
	kv *lostAnswerKV
}

func (t lostAnswerStub) Txn(ctx context.Context, in *etcdserverpb.TxnRequest, opts ...grpc.CallOption) (*etcdserverpb.TxnResponse, error) {
	resp, err := t.KVClient.Txn(ctx, in, opts...)
	if err == nil && t.kv.armed.CompareAndSwap(true, false) {
		return nil, context.DeadlineExceeded
	}
	return resp, err
}

func (t *lostAnswerTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	if err == nil && t.kv.armed.CompareAndSwap(true, false) {
		return nil, context.DeadlineExceeded
	}
	return resp, err
}

// TestLoneConsumeEtcdErrorDropsCopies: a lone consume whose transaction
// committed but whose answer was lost fails (503) without logging its
// frames; the log is held until their copies, which the transaction put,
// are deleted, then appends again from the seqs they had, and the step
// stays spent. The replica, which kept the consume in doubt, finds its
// marker and logs its consumed frame (doubt.go), so the spent step is on
// record; the same request id is then Repeated and logs its decision.
func TestLoneConsumeEtcdErrorDropsCopies(t *testing.T) {
	prefix := newPrefix()
	a := open(t, "replica-a", prefix, t.TempDir())
	defer closeStore(a)
	ctx := context.Background()
	bd := recordSteps(t, a, "pf_lone_lost", 1)
	lk := &lostAnswerKV{KV: a.cli.KV}
	fenceBefore, err := a.fence(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lk.armed.Store(true)
	a.cli.KV = lk // armed once: it answers the next transactions as they are
	a.kv = lostAnswerStub{KVClient: a.kv, kv: lk}
	head, err := consumeLoneT(t, a, &bd, "req-lost")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("lone consume whose answer was lost: %v, want ErrUnavailable", err)
	}
	if seq, _ := a.log.Head(); seq != head {
		t.Fatalf("log's head after the lost answer: %d, want %d (nothing logged)", seq, head)
	}
	waitReleased(t, a, 10*time.Second, nil)
	// The fence moved before the copies were deleted: a transaction of
	// the lost kind, applied only now, fails its compare.
	late, err := a.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(a.p.fence("replica-a")), "=", fenceBefore)).
		Then(clientv3.OpPut(a.p.frame(bd.AuditID, "replica-a", head+9), "late")).Commit()
	if err != nil || late.Succeeded || a.fenceRev.Load() <= fenceBefore {
		t.Fatalf("a transaction guarded by the fence before the loss: %v, %v (fence %d, was %d); want it refused", late, err, a.fenceRev.Load(), fenceBefore)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(framesAfter(t, a, head)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the consume kept in doubt has no consumed frame 10s after the log appends again")
		}
		time.Sleep(20 * time.Millisecond)
	}
	fs := framesAfter(t, a, head)
	if len(fs) != 1 || fs[0].Kind != wal.KindConsumed {
		t.Fatalf("frames after the lost answer: %+v; want the consumed frame alone", fs)
	}
	if c, err := fs[0].Consumed(); err != nil || c.RequestID != "req-lost" || c.StepID != bd.Steps[0].ID {
		t.Fatalf("the consumed frame logged: %+v, %v; want request req-lost, step %s", c, err, bd.Steps[0].ID)
	}
	// The lost commit's copy (its consumed and decision frames) and its
	// index are gone; its consumed frame is logged again at its seq, its
	// copy with it, alone.
	if resp, err := a.cli.Get(ctx, a.p.copyIndex("replica-a", head+2)); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the lost commit's copy index once the log appends again: %v, %v; want it deleted", resp.Kvs, err)
	}
	if resp, err := a.cli.Get(ctx, a.p.frame(bd.AuditID, "replica-a", head+1)); err != nil || len(resp.Kvs) != 1 ||
		string(resp.Kvs[0].Value) != string(wal.EncodeFrame(&fs[0])) {
		t.Fatalf("the copy at the lost commit's first seq once the log appends again: %v, %v; want the consumed frame logged again, alone", resp.Kvs, err)
	}
	if res, err := a.Consume(ctx, consumeIn(&bd, "req-lost")); err != nil || res.Status != wal.Repeated {
		t.Fatalf("the consume again: %v, %v; want repeated", res.Status, err)
	}
	if next := framesAfter(t, a, fs[0].Seq); len(next) != 1 || next[0].Kind != wal.KindDecision {
		t.Fatalf("frames after the repeat: %+v; want its decision alone", next)
	}
	fs = append(fs, framesAfter(t, a, fs[0].Seq)...)
	// A second repeat finds that frame and logs its decision alone.
	if res, err := a.Consume(ctx, consumeIn(&bd, "req-lost")); err != nil || res.Status != wal.Repeated {
		t.Fatalf("the consume a third time: %v, %v; want repeated", res.Status, err)
	}
	if next := framesAfter(t, a, fs[1].Seq); len(next) != 1 || next[0].Kind != wal.KindDecision {
		t.Fatalf("frames after the second repeat: %+v; want its decision alone", next)
	}
	checkClean(t, a)
}

// TestConcurrentConsumesLogTogether: concurrent consumes on distinct ids,
// whose markers share transactions and whose frames go to the log
// together (logGroup), each take their step, and each has its frames in
// the log and in every replica's audit join; check-store finds nothing.
func TestConcurrentConsumesLogTogether(t *testing.T) {
	prefix := newPrefix()
	a := open(t, "replica-a", prefix, t.TempDir())
	defer closeStore(a)
	ctx := context.Background()
	const calls = 64
	bs := recordMany(t, a, "pf_together", calls)
	errs := make(chan error, calls)
	start := make(chan struct{})
	for i := range calls {
		go func() {
			<-start
			res, err := a.Consume(ctx, consumeIn(&bs[i], fmt.Sprintf("req-%d", i)))
			if err == nil && res.Status != wal.Consumed {
				err = fmt.Errorf("consume %d: %v, want consumed", i, res.Status)
			}
			errs <- err
		}()
	}
	close(start)
	for range calls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := range bs {
		fs, err := a.AuditFramesOf(ctx, bs[i].AuditID, []string{wal.KindConsumed, wal.KindDecision})
		if err != nil || len(fs) != 2 {
			t.Fatalf("audit join of %s: %d frames, %v; want its consumed and decision frames", bs[i].AuditID, len(fs), err)
		}
		local, err := a.log.AuditFramesOf(ctx, bs[i].AuditID, []string{wal.KindConsumed, wal.KindDecision})
		if err != nil || len(local) != 2 {
			t.Fatalf("log's frames of %s: %d, %v; want 2", bs[i].AuditID, len(local), err)
		}
	}
	checkOnly(t, a)
}

// TestLoneConsumesBackToBack: a consume that arrives while the previous
// lone consume's local commit still runs (it was answered before it)
// waits for that commit and goes alone too: each put its marker and its
// frames' copy index in one transaction, and the log holds both consumes'
// frames in order.
func TestLoneConsumesBackToBack(t *testing.T) {
	a := open(t, "replica-a", newPrefix(), t.TempDir())
	defer closeStore(a)
	ctx := context.Background()
	bs := []preflight.Binding{recordSteps(t, a, "pf_back_1", 1), recordSteps(t, a, "pf_back_2", 1)}
	head, _ := a.log.Head()
	for i := range bs {
		if res, err := a.Consume(ctx, consumeIn(&bs[i], "req-back")); err != nil || res.Status != wal.Consumed {
			t.Fatalf("consume %d: %v, %v; want consumed", i, res.Status, err)
		}
	}
	for i := range bs {
		m, err := a.cli.Get(ctx, a.p.marker(bs[i].PreflightID, 0))
		if err != nil || len(m.Kvs) != 1 {
			t.Fatalf("marker %d: %v, %v", i, m, err)
		}
		rev := m.Kvs[0].ModRevision
		idx, err := a.cli.Get(ctx, a.p.copyIndex("replica-a", head+2*uint64(i+1)), clientv3.WithRev(rev))
		if err != nil || len(idx.Kvs) != 1 || idx.Kvs[0].ModRevision != rev {
			t.Fatalf("consume %d's copy index at its marker's revision %d: %v, %v; want one transaction", i, rev, idx, err)
		}
	}
	fs := framesAfter(t, a, head)
	if len(fs) != 4 || fs[1].AuditID != bs[0].AuditID || fs[3].AuditID != bs[1].AuditID ||
		fs[2].Kind != wal.KindConsumed || fs[3].Kind != wal.KindDecision {
		t.Fatalf("frames after the two consumes: %+v; want each one's consumed and decision frames, in order", fs)
	}
	checkClean(t, a)
}

// TestOneConsumeWaitsForALoneCommit: while an answered lone consume's
// local commit runs, one consume waits for it to lead next, and the
// others take the shared path at once rather than queue behind it: a
// third consume's marker reaches etcd while the second still waits.
func TestOneConsumeWaitsForALoneCommit(t *testing.T) {
	a := open(t, "replica-a", newPrefix(), t.TempDir())
	defer closeStore(a)
	ctx := context.Background()
	bs := []preflight.Binding{recordSteps(t, a, "pf_wait_1", 1), recordSteps(t, a, "pf_wait_2", 1), recordSteps(t, a, "pf_wait_3", 1)}
	head, _ := a.log.Head()
	release := make(chan struct{})
	var held atomic.Bool
	a.beforeLoneCommit = func() {
		if held.CompareAndSwap(false, true) {
			<-release
		}
	}
	if res, err := a.Consume(ctx, consumeIn(&bs[0], "req-wait")); err != nil || res.Status != wal.Consumed {
		t.Fatalf("first consume: %v, %v; want consumed, answered before its commit", res.Status, err)
	}
	errs := make(chan error, 2)
	consume := func(b *preflight.Binding) {
		res, err := a.Consume(ctx, consumeIn(b, "req-wait"))
		if err == nil && res.Status != wal.Consumed {
			err = fmt.Errorf("%s: %v, want consumed", b.PreflightID, res.Status)
		}
		errs <- err
	}
	marker := func(b *preflight.Binding) bool {
		resp, err := a.cli.Get(ctx, a.p.marker(b.PreflightID, 0))
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.Kvs) == 1
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); {
			if time.Now().After(deadline) {
				close(release)
				t.Fatalf("%s: not within 10 s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	go consume(&bs[1])
	waitFor("the second consume waiting for the lone commit", func() bool {
		a.loneMu.Lock()
		defer a.loneMu.Unlock()
		return a.loneWaiting
	})
	go consume(&bs[2])
	waitFor("the third consume's marker in etcd", func() bool { return marker(&bs[2]) })
	if marker(&bs[1]) {
		close(release)
		t.Fatal("the second consume's marker is in etcd while it waits for the lone commit")
	}
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if fs := framesAfter(t, a, head); len(fs) != 6 {
		t.Fatalf("frames after the three consumes: %d, want each one's consumed and decision frames", len(fs))
	}
	checkClean(t, a)
}

// TestConsumeOnALogThatCannotWriteSpendsNothing: a consume on a replica
// whose log refuses writes (held, or still being verified) is refused
// before its marker is put: the step stays free for the next call.
func TestConsumeOnALogThatCannotWriteSpendsNothing(t *testing.T) {
	prefix := newPrefix()
	a := open(t, "replica-a", prefix, t.TempDir())
	defer closeStore(a)
	ctx := context.Background()
	bd := recordSteps(t, a, "pf_refused_log", 1)
	a.log.Hold()
	if _, err := a.Consume(ctx, consumeIn(&bd, "req-held")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("consume on a held log: %v, want ErrUnavailable", err)
	}
	a.log.Release()
	if res, err := a.Consume(ctx, consumeIn(&bd, "req-after")); err != nil || res.Status != wal.Consumed {
		t.Fatalf("the next call: %v, %v; want the step consumed (nothing was spent before)", res.Status, err)
	}
}
