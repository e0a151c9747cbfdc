package etcdstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/wal"
)

// TestFailedLocalCommitLeavesNoCopy: a frame's copy goes to etcd while the
// replica's own commit of it goes to the disk; when that commit fails, the
// call fails and the copy is deleted again, so no replica's audit join
// shows a frame the writer's log lacks.
func TestFailedLocalCommitLeavesNoCopy(t *testing.T) {
	prefix, dir := newPrefix(), t.TempDir()
	a := open(t, "replica-a", prefix, dir)
	defer closeStore(a)
	b := open(t, "replica-b", prefix, t.TempDir())
	defer closeStore(b)
	ctx := context.Background()
	in := func(audit string) wal.FrameInput {
		return wal.FrameInput{Kind: wal.KindDecision, AuditID: audit, Time: time.Now(), Attrs: map[string]any{"outcome": "deny"}}
	}
	sent := false
	a.afterStaged = func() {
		// The log's file leaves its path during the commit: the commit
		// answers wal.ErrFileGone after the copy was sent.
		sent = true
		if err := os.Rename(filepath.Join(dir, "wal.db"), filepath.Join(dir, "moved.db")); err != nil {
			t.Error(err)
		}
	}
	if _, err := a.AppendDecision(ctx, in("au_failed_commit")); !errors.Is(err, wal.ErrFileGone) {
		t.Fatalf("append with its log's file gone mid-commit: %v, want wal.ErrFileGone", err)
	}
	if !sent {
		t.Fatal("the copy was not sent before the local commit")
	}
	if got, err := b.AuditFrames(ctx, "au_failed_commit"); err != nil || len(got) != 0 {
		t.Fatalf("another replica's audit join after the failed commit: %d frames, %v; want none", len(got), err)
	}

	// A commit that succeeds leaves its copy, which the other replica reads.
	a.afterStaged = nil
	if err := os.Rename(filepath.Join(dir, "moved.db"), filepath.Join(dir, "wal.db")); err != nil {
		t.Fatal(err)
	}
	f, err := a.AppendDecision(ctx, in("au_commit"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.AuditFrames(ctx, "au_commit"); err != nil || len(got) != 1 || got[0].Hash != f.Hash {
		t.Fatalf("another replica's audit join: %d frames, %v; want the frame", len(got), err)
	}
}

// TestLargeCopiesSplitTransactions: concurrent frames whose copies
// together pass etcd's request limit (--max-request-bytes, 1.5 MiB by
// default) go in several transactions, so none is refused.
func TestLargeCopiesSplitTransactions(t *testing.T) {
	s := open(t, "replica-a", newPrefix(), t.TempDir())
	defer closeStore(s)
	ctx := context.Background()
	const calls = 48
	errs := make(chan error, calls)
	for i := range calls {
		go func() {
			// Random hex packs to about half: some 64 KB a copy.
			raw := make([]byte, 64<<10)
			rand.Read(raw)
			_, err := s.AppendDecision(ctx, wal.FrameInput{Kind: wal.KindDecision, AuditID: fmt.Sprintf("au_large_%02d", i),
				Time: time.Now(), Attrs: map[string]any{"outcome": "deny", "args": hex.EncodeToString(raw)}})
			errs <- err
		}()
	}
	for range calls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
