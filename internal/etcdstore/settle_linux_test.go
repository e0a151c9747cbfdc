package etcdstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/contractrefine/autonomy/internal/etcdtest"
	"github.com/contractrefine/autonomy/wal"
)

// failingWrites makes the writes to the files open at path fail until
// the returned function is called: each descriptor is swapped for a
// read-only one, as a disk that refuses writes.
func failingWrites(t *testing.T, path string) (restore func()) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	// Every descriptor is read before any is made: a new one could take
	// the number the listing's own had.
	var open []int
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if to, lerr := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && lerr == nil && to == path {
			open = append(open, fd)
		}
	}
	saved := map[int]int{}
	for _, fd := range open {
		dup, err := unix.Dup(fd)
		if err != nil {
			t.Fatal(err)
		}
		saved[fd] = dup
		ro, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Dup3(ro, fd, unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		unix.Close(ro)
	}
	if len(saved) == 0 {
		t.Fatalf("%s is not open", path)
	}
	return func() {
		for fd, dup := range saved {
			if err := unix.Dup3(dup, fd, unix.O_CLOEXEC); err != nil {
				t.Error(err)
			}
			unix.Close(dup)
		}
	}
}

// TestFailedLocalCommitLeavesNoCopy: a frame's copy goes to etcd while
// the replica's own commit of it goes to the disk; when that commit fails
// (the disk refuses the write), the call fails, the log is held (calls
// answer ErrUnavailable) until the copy is deleted again, then appends by
// itself, and no replica's audit join shows a frame the writer's log
// lacks.
func TestFailedLocalCommitLeavesNoCopy(t *testing.T) {
	prefix, dir := newPrefix(), t.TempDir()
	a := open(t, "replica-a", prefix, dir)
	defer closeStore(a)
	b := open(t, "replica-b", prefix, t.TempDir())
	defer closeStore(b)
	ctx := context.Background()
	path, err := filepath.EvalSymlinks(filepath.Join(dir, wal.FileName))
	if err != nil {
		t.Fatal(err)
	}
	var restore func()
	a.afterSent = func() { restore = failingWrites(t, path) }
	if _, err := a.AppendDecision(ctx, decisionIn("au_failed_commit")); err == nil {
		t.Fatal("append whose local write failed: no error")
	}
	a.afterSent = nil
	if restore == nil {
		t.Fatal("the copy was not sent before the local commit")
	}
	restore()
	// Held until the dropper has deleted the copy: then appending again.
	waitReleased(t, a, 10*time.Second, func() {
		if _, err := a.AppendDecision(ctx, decisionIn("au_while_held")); err != nil && !errors.Is(err, ErrUnavailable) {
			t.Fatalf("append while held: %v, want ErrUnavailable", err)
		}
	})
	if got, err := b.AuditFrames(ctx, "au_failed_commit"); err != nil || len(got) != 0 {
		t.Fatalf("another replica's audit join after the failed commit: %d frames, %v; want none", len(got), err)
	}
	f, err := a.AppendDecision(ctx, decisionIn("au_commit"))
	if err != nil {
		t.Fatal(err)
	}
	if f.Seq != 1 {
		t.Fatalf("the frame after the failed commit: seq %d, want 1 (the failed commit's seq, free again)", f.Seq)
	}
	if got, err := b.AuditFrames(ctx, "au_commit"); err != nil || len(got) != 1 || got[0].Hash != f.Hash {
		t.Fatalf("another replica's audit join: %d frames, %v; want the frame", len(got), err)
	}
	checkClean(t, a)
}

// TestFailedCommitHeldUntilEtcdTakesTheDelete: when the local commit fails
// after its copy went out and etcd is down too, the copy cannot be deleted
// yet: the log stays held (every append answers ErrUnavailable) until etcd
// is back and takes the delete, then appends again by itself.
func TestFailedCommitHeldUntilEtcdTakesTheDelete(t *testing.T) {
	c := etcdtest.StartT(t, etcdtest.Options{})
	dir := t.TempDir()
	log, err := wal.Open(dir, &wal.Options{Replica: "replica-a"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := Open(Options{Endpoints: c.Endpoints(), Replica: "replica-a", Log: log, RequestTimeout: 500 * time.Millisecond})
	if err != nil {
		log.Close()
		t.Fatal(err)
	}
	defer closeStore(a)
	ctx := context.Background()
	path, err := filepath.EvalSymlinks(filepath.Join(dir, wal.FileName))
	if err != nil {
		t.Fatal(err)
	}
	var restore func()
	a.afterSent = func() {
		restore = failingWrites(t, path)
		c.Members[0].Stop()
	}
	if _, err := a.AppendDecision(ctx, decisionIn("au_failed_commit")); err == nil {
		t.Fatal("append whose local write failed: no error")
	}
	a.afterSent = nil
	restore()
	// etcd is down: whatever the copy did, its delete cannot be taken.
	for range 3 {
		if _, err := a.AppendDecision(ctx, decisionIn("au_while_held")); !errors.Is(err, ErrUnavailable) || !errors.Is(err, wal.ErrHeld) {
			t.Fatalf("append while the copy cannot be deleted: %v, want ErrUnavailable (wal.ErrHeld)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := c.Members[0].Start(); err != nil {
		t.Fatal(err)
	}
	waitReleased(t, a, 20*time.Second, nil)
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for _, k := range []string{a.p.frame("au_failed_commit", "replica-a", 1), a.p.copyIndex("replica-a", 1)} {
		if resp, err := cli.Get(ctx, k); err != nil || len(resp.Kvs) != 0 {
			t.Fatalf("%s once the log appends again: %v, %v; want it deleted", k, resp.Kvs, err)
		}
	}
	if f, err := a.AppendDecision(ctx, decisionIn("au_commit")); err != nil || f.Seq != 1 {
		t.Fatalf("append once the copy is deleted: seq %d, %v; want seq 1", f.Seq, err)
	}
	checkClean(t, a)
}

// TestLoneFailedLocalCommitTakesCopiesUp: a lone consume is answered once
// its marker and its frames' copies are committed in etcd, before the
// local commit; when that commit then fails (the disk refuses the write),
// the answer stands: the log is held (appends answer ErrUnavailable) until
// it has taken the frames up from their copies, as after a crash, then
// appends again by itself after them, and every replica's audit join has
// the decision.
func TestLoneFailedLocalCommitTakesCopiesUp(t *testing.T) {
	prefix, dir := newPrefix(), t.TempDir()
	a := open(t, "replica-a", prefix, dir)
	defer closeStore(a)
	b := open(t, "replica-b", prefix, t.TempDir())
	defer closeStore(b)
	ctx := context.Background()
	bd := recordSteps(t, a, "pf_lone_failed", 1)
	path, err := filepath.EvalSymlinks(filepath.Join(dir, wal.FileName))
	if err != nil {
		t.Fatal(err)
	}
	var restore func()
	a.afterSent = func() { restore = failingWrites(t, path) }
	head, err := consumeLoneT(t, a, &bd, "req-failed")
	a.afterSent = nil
	if err != nil {
		t.Fatalf("lone consume whose local write then failed: %v; want it answered on its copies", err)
	}
	if restore == nil {
		t.Fatal("the copies were not sent before the local commit")
	}
	if !a.awaitCommit(ctx, 10*time.Second) {
		t.Fatal("the lone consume's commit: not ended within 10 s")
	}
	if seq, _ := a.log.Head(); seq != head {
		t.Fatalf("log's head after the failed commit: %d, want %d", seq, head)
	}
	// Held until the frames are taken up; the disk refuses them until
	// restored, so the hold outlasts a first try.
	if _, err := a.AppendDecision(ctx, decisionIn("au_while_held")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("append while held: %v, want ErrUnavailable", err)
	}
	restore()
	waitReleased(t, a, 10*time.Second, nil)
	fs := framesAfter(t, a, head)
	if len(fs) != 2 || fs[0].Kind != wal.KindConsumed || fs[1].Kind != wal.KindDecision {
		t.Fatalf("frames after the failed commit: %+v; want the consume's two, taken up", fs)
	}
	if got, err := b.AuditFrames(ctx, bd.AuditID); err != nil || len(got) != 2 || got[1].Hash != fs[1].Hash {
		t.Fatalf("another replica's audit join: %+v, %v; want the preflight and the decision", got, err)
	}
	if res, err := a.Consume(ctx, consumeIn(&bd, "req-failed")); err != nil || res.Status != wal.Repeated {
		t.Fatalf("the consume again: %v, %v; want repeated", res.Status, err)
	}
	if next := framesAfter(t, a, fs[1].Seq); len(next) != 1 || next[0].PrevHash != fs[1].Hash {
		t.Fatalf("frames after the taken-up ones: %+v; want the repeat's decision, following them", next)
	}
	checkClean(t, a)
}
