package etcdstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/internal/etcdtest"
	"github.com/contractrefine/autonomy/wal"
)

func decisionIn(audit string) wal.FrameInput {
	return wal.FrameInput{Kind: wal.KindDecision, AuditID: audit, Time: time.Now(), Attrs: map[string]any{"outcome": "deny"}}
}

// snapshotLog copies the log of a closed store's data dir to a new dir:
// the log as it was before the commits that follow, as a replica killed
// between their copies and their fsyncs comes back with. The log's
// instance goes with it: it is the same log.
func snapshotLog(t *testing.T, dir string) string {
	t.Helper()
	to := t.TempDir()
	if b, err := os.ReadFile(filepath.Join(dir, instanceFile)); err == nil {
		if err := os.WriteFile(filepath.Join(to, instanceFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	src, err := os.Open(filepath.Join(dir, wal.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(filepath.Join(to, wal.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return to
}

// checkClean fails the test unless the log verifies and check-store finds
// etcd and the log agreeing.
func checkClean(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	// A consume answered on its copies (a lone or flat transaction) is
	// committed to the log in the background.
	if !s.awaitCommit(ctx, 10*time.Second) {
		t.Fatal("the log's commit of the last lone or flat transaction: not within 10 s")
	}
	if rep, err := s.log.Verify(ctx); err != nil || !rep.OK() {
		t.Fatalf("wal verify: %+v, %v", rep, err)
	}
	if rep, err := s.Check(ctx, time.Now()); err != nil || !rep.OK() {
		t.Fatalf("check-store: %+v, %v", rep.Problems, err)
	}
}

// waitReleased waits, up to within, for s's log to take writes again after
// a commit whose frames were sent elsewhere failed: until then Probe must
// answer wal.ErrHeld. while, when set, runs at each wait, to check what the
// held log answers meanwhile.
func waitReleased(t *testing.T, s *Store, within time.Duration, while func()) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(within)
	for err := s.log.Probe(ctx); err != nil; err = s.log.Probe(ctx) {
		if !errors.Is(err, wal.ErrHeld) || time.Now().After(deadline) {
			t.Fatalf("probe after the lost frames: %v; want wal.ErrHeld until their copies are deleted, then nil", err)
		}
		if while != nil {
			while()
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCrashCopiesAdopted: a replica killed after its frame's copy
// committed but before its own commit reached the disk comes back with a
// log one frame short; opening the store takes the copy up into the log,
// so the chain the other replicas see is the replica's own, and the next
// frame follows it.
func TestCrashCopiesAdopted(t *testing.T) {
	ctx := context.Background()
	prefix, crashed, lostFrames := crashAfterCopies(t, "au_crash", "au_crash")

	// check-store on the stopped replica's log counts the copies as
	// pending, no problem: they are settled when the replica opens.
	log, err := wal.Open(crashed, &wal.Options{Replica: "replica-a"})
	if err != nil {
		t.Fatal(err)
	}
	inspect, err := Open(Options{Endpoints: cluster.Endpoints(), Prefix: prefix, Replica: "replica-a", Log: log, Inspect: true})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := inspect.Check(ctx, time.Now())
	closeStore(inspect)
	if err != nil || !rep.OK() || rep.Pending != 2 {
		t.Fatalf("check-store before the reopen: pending %d, problems %+v, %v; want 2 pending, no problem", rep.Pending, rep.Problems, err)
	}

	a := reopenAdopting(t, prefix, crashed, lostFrames, "au_crash", 2)
	defer closeStore(a)
	next, err := a.AppendDecision(ctx, decisionIn("au_after"))
	if err != nil || next.Seq != lostFrames[1].Seq+1 || next.PrevHash != lostFrames[1].Hash {
		t.Fatalf("next frame: seq %d prev %s, %v; want it to follow the adopted frame", next.Seq, next.PrevHash, err)
	}
	checkClean(t, a)
}

// reopenAdopting opens replica-a on the log a crash left one commit
// short of lost, whose copies are in etcd, and checks what the open did:
// the log took them up (its head is the last of them, it verifies, and
// check-store finds etcd agreeing), and another replica's audit join of
// auditID has n frames and ends with them. The caller closes the store.
func reopenAdopting(t *testing.T, prefix, crashed string, lost []wal.Frame, auditID string, n int) *Store {
	t.Helper()
	last := lost[len(lost)-1]
	a := open(t, "replica-a", prefix, crashed)
	if seq, hash := a.log.Head(); seq != last.Seq || hash != last.Hash {
		closeStore(a)
		t.Fatalf("reopened log's head: %d %s; want the adopted frame %d %s", seq, hash, last.Seq, last.Hash)
	}
	checkClean(t, a)
	b := open(t, "replica-b", prefix, t.TempDir())
	defer closeStore(b)
	got, err := b.AuditFrames(context.Background(), auditID)
	if err == nil && len(got) == n && n >= len(lost) {
		for i, f := range got[n-len(lost):] {
			if f.Hash != lost[i].Hash {
				err = fmt.Errorf("frame %d is not the adopted one", f.Seq)
			}
		}
	}
	if err != nil || len(got) != n {
		closeStore(a)
		t.Fatalf("another replica's audit join of %s: %+v, %v; want it to end with the adopted frames", auditID, got, err)
	}
	return a
}

// TestCrashCopiesAfterGapDropped: copies past the log's head that do not
// continue it (the copy of the first frame of the lost commit never
// committed) are deleted with their index when the store opens, and the
// log goes on from its own head.
func TestCrashCopiesAfterGapDropped(t *testing.T) {
	prefix, crashed, lostFrames := crashAfterCopies(t, "au_gap1", "au_gap2")
	a := reopenAfterGap(t, prefix, crashed, lostFrames)
	defer closeStore(a)
	checkClean(t, a)
}

// reopenAfterGap deletes the copy of lost[0], the first of the two frames
// a crash left only in etcd, opens replica-a on the log the crash left,
// and checks what the open did: it adopted nothing, deleted the copy of
// lost[1] with its index, and the log goes on from its own head. The
// caller closes the store.
func reopenAfterGap(t *testing.T, prefix, crashed string, lost []wal.Frame) *Store {
	t.Helper()
	ctx := context.Background()
	other := open(t, "replica-b", prefix, t.TempDir())
	if _, err := other.cli.Delete(ctx, other.p.frame(lost[0].AuditID, "replica-a", lost[0].Seq)); err != nil {
		closeStore(other)
		t.Fatal(err)
	}
	closeStore(other)

	a := open(t, "replica-a", prefix, crashed)
	fail := func(format string, args ...any) {
		t.Helper()
		closeStore(a)
		t.Fatalf(format, args...)
	}
	if seq, _ := a.log.Head(); seq != lost[0].Seq-1 {
		fail("reopened log's head: %d; want %d, nothing adopted", seq, lost[0].Seq-1)
	}
	for _, k := range []string{a.p.frame(lost[1].AuditID, "replica-a", lost[1].Seq), a.p.copyIndex("replica-a", lost[1].Seq)} {
		if resp, err := a.cli.Get(ctx, k); err != nil || len(resp.Kvs) != 0 {
			fail("%s after the open: %v, %v; want it deleted", k, resp.Kvs, err)
		}
	}
	next, err := a.AppendDecision(ctx, decisionIn("au_after"))
	if err != nil || next.Seq != lost[0].Seq {
		fail("next frame: seq %d, %v; want %d", next.Seq, err, lost[0].Seq)
	}
	return a
}

// crashAfterCopies is replica-a killed after the copies of one commit of
// decision frames, one per audit id, reached etcd and before the commit
// reached its disk: it returns the prefix, the data directory as the
// crash left it (the log one commit short) and the lost frames.
func crashAfterCopies(t *testing.T, auditIDs ...string) (prefix, crashed string, lost []wal.Frame) {
	t.Helper()
	prefix, dir := newPrefix(), t.TempDir()
	ctx := context.Background()
	a := open(t, "replica-a", prefix, dir)
	if _, err := a.AppendDecision(ctx, decisionIn("au_before")); err != nil {
		t.Fatal(err)
	}
	closeStore(a)
	crashed = snapshotLog(t, dir)
	a = open(t, "replica-a", prefix, dir)
	defer closeStore(a)
	ins := make([]wal.FrameInput, len(auditIDs))
	for i, id := range auditIDs {
		ins[i] = decisionIn(id)
	}
	lost, err := a.logAndCopy(ctx, ins)
	if err != nil {
		t.Fatal(err)
	}
	return prefix, crashed, lost
}

// TestCheckShortRecordTTL: with a record_ttl under two minutes the check
// still has a window: a frame just written whose copy is gone is found.
func TestCheckShortRecordTTL(t *testing.T) {
	ctx := context.Background()
	log, err := wal.Open(t.TempDir(), &wal.Options{Replica: "replica-a"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(Options{Endpoints: cluster.Endpoints(), Prefix: newPrefix(), Replica: "replica-a", Log: log, RecordTTL: 20 * time.Second})
	if err != nil {
		log.Close()
		t.Fatal(err)
	}
	defer closeStore(s)
	f, err := s.AppendDecision(ctx, decisionIn("au_short_ttl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.deleteKeys([]string{s.p.frame(f.AuditID, "replica-a", f.Seq)}); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Check(ctx, time.Now())
	if err != nil || rep.Frames != 1 || len(rep.Problems) != 1 || rep.Problems[0].Problem != ProblemFrameWithoutCopy {
		t.Fatalf("check-store: %d frames in the window, problems %+v, %v; want the frame without its copy", rep.Frames, rep.Problems, err)
	}
}

// TestRefusalNeedsNoCopy: with etcd away, a decision's frame reaches the
// log but its write fails (its copy cannot be made), while a refusal's
// frame is appended without waiting for its copy, which follows once
// etcd is back.
func TestRefusalNeedsNoCopy(t *testing.T) {
	c := etcdtest.StartT(t, etcdtest.Options{})
	log, err := wal.Open(t.TempDir(), &wal.Options{Replica: "replica-a"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(Options{Endpoints: c.Endpoints(), Replica: "replica-a", Log: log, RequestTimeout: 300 * time.Millisecond})
	if err != nil {
		log.Close()
		t.Fatal(err)
	}
	defer closeStore(s)
	ctx := context.Background()
	c.Members[0].Stop()
	if _, err := s.AppendDecision(ctx, decisionIn("au_decided")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("decision with etcd away: %v, want ErrUnavailable", err)
	}
	f, err := s.AppendRefusal(ctx, decisionIn("au_refused"))
	if err != nil || f.Seq == 0 {
		t.Fatalf("refusal with etcd away: %+v, %v; want its frame in the log", f, err)
	}
	if err := c.Members[0].Start(); err != nil {
		t.Fatal(err)
	}
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	key := s.p.frame(f.AuditID, "replica-a", f.Seq)
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := cli.Get(ctx, key)
		if err == nil && len(r.Kvs) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the refusal's copy is not in etcd 20s after it came back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCrashCopiesOfAnotherLogLeftAlone: a replica that comes back under
// the same name on an empty data directory (a replaced disk) does not take
// up the copies its old log's crash left: every empty log has the same
// base, not the same instance.
func TestCrashCopiesOfAnotherLogLeftAlone(t *testing.T) {
	prefix := newPrefix()
	old := open(t, "replica-a", prefix, t.TempDir())
	// The old log's first commit: its copies' base is the empty log's.
	lost, err := old.logAndCopy(context.Background(), []wal.FrameInput{decisionIn("au_other_log")})
	closeStore(old)
	if err != nil || lost[0].Seq != 1 {
		t.Fatalf("the old log's first frame: %+v, %v", lost, err)
	}
	var logs lockedLines
	log, err := wal.Open(t.TempDir(), &wal.Options{Replica: "replica-a"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := Open(Options{Endpoints: cluster.Endpoints(), Prefix: prefix, Replica: "replica-a", Log: log,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		log.Close()
		t.Fatal(err)
	}
	defer closeStore(a)
	// The log is held until the copies past its head are settled.
	for deadline := time.Now().Add(20 * time.Second); a.log.Probe(context.Background()) != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the new log is still held 20s after it opened")
		}
	}
	if seq, _ := a.log.Head(); seq != 0 {
		t.Fatalf("a new log took up %d frames another log wrote", seq)
	}
	// Its log says whose they are: another log's, not a crash's.
	if got := logs.String(); !strings.Contains(got, `"msg":"etcd: frame copies another log wrote under this replica_id are past this log's head`) ||
		!strings.Contains(got, `"left_alone":1`) || strings.Contains(got, "a crash left") {
		t.Fatalf("the new log's lines about the other log's copies:\n%s", got)
	}
}

// lockedLines is a log sink safe for concurrent writes.
type lockedLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestWholeRunsAdopted: frames that continue the log are taken up by
// whole copies; a copy that continues it only in part is left out with
// everything after it.
func TestWholeRunsAdopted(t *testing.T) {
	adopt := make([]wal.Frame, 3) // seqs 5, 6 and 7 continue the log at 4
	runs := map[uint64]uint64{5: 6, 7: 8, 9: 9}
	if got := wholeRuns(4, adopt, runs); len(got) != 2 {
		t.Fatalf("%d frames taken up, want the first copy's 2: the second continues the log in part", len(got))
	}
	if got := wholeRuns(4, adopt[:2], runs); len(got) != 2 {
		t.Fatalf("%d frames taken up, want 2", len(got))
	}
	if got := wholeRuns(4, adopt[:1], runs); len(got) != 0 {
		t.Fatalf("%d frames taken up, want none: the first copy continues the log in part", len(got))
	}
	if got := wholeRuns(4, nil, runs); len(got) != 0 {
		t.Fatalf("%d frames taken up from nothing", len(got))
	}
}
