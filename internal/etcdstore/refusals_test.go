package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/wal"
)

// TestRefusalsWhileHeldAreRecordedOnRelease: a 503 refusal answered while
// the log is held (copies of a failed commit not yet settled) names an
// audit id its frame could not take then; the frame is appended, and
// copied, once the log is released, in the order the refusals came. Past
// maxHeldRefusals the rest are dropped, not kept without bound.
func TestRefusalsWhileHeldAreRecordedOnRelease(t *testing.T) {
	s := open(t, "replica-a", newPrefix(), t.TempDir())
	defer closeStore(s)
	ctx := context.Background()
	waitAppends(t, s) // else the open's settling could release the hold below
	s.log.Hold()
	n := maxHeldRefusals + 3
	for i := range n {
		if _, err := s.AppendRefusal(ctx, decisionIn(fmt.Sprintf("au_held_%04d", i))); !errors.Is(err, wal.ErrHeld) {
			t.Fatalf("refusal %d while held: %v, want ErrHeld", i, err)
		}
	}
	if frames, err := s.log.AuditFrames(ctx, "au_held_0000"); err != nil || len(frames) != 0 {
		t.Fatalf("while held: %d frames, %v; want none yet", len(frames), err)
	}
	s.log.Release()
	s.appendHeldRefusals()
	var last uint64
	for i := range n {
		frames, err := s.log.AuditFrames(ctx, fmt.Sprintf("au_held_%04d", i))
		if err != nil {
			t.Fatal(err)
		}
		if kept := i < maxHeldRefusals; kept != (len(frames) == 1) {
			t.Fatalf("refusal %d: %d frames; want one for each of the first %d", i, len(frames), maxHeldRefusals)
		}
		if len(frames) == 1 {
			if frames[0].Seq <= last {
				t.Fatalf("refusal %d at seq %d after %d: out of order", i, frames[0].Seq, last)
			}
			last = frames[0].Seq
		}
	}
	// The copies follow in etcd: the audit join reads every replica's.
	deadline := time.Now().Add(20 * time.Second)
	for {
		frames, err := s.AuditFrames(ctx, fmt.Sprintf("au_held_%04d", maxHeldRefusals-1))
		if err == nil && len(frames) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the last held refusal's copy: %d frames, %v", len(frames), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitAppends waits until s's log takes writes: the open's settling of
// crash copies, which holds it, has released it.
func waitAppends(t *testing.T, s *Store) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for s.log.Refuses() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the log still refuses writes 20s after open: %v", s.log.Refuses())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRefusalHeldAfterTheReleaseIsRecorded: a refusal whose write the held
// log refused, kept only after the release had appended what was kept
// (the two crossed), is appended all the same, not left until the next
// hold.
func TestRefusalHeldAfterTheReleaseIsRecorded(t *testing.T) {
	s := open(t, "replica-a", newPrefix(), t.TempDir())
	defer closeStore(s)
	waitAppends(t, s)
	s.log.Hold()
	s.log.Release()
	s.appendHeldRefusals() // the release's, finding nothing kept yet
	s.holdRefusal(decisionIn("au_crossed"))
	deadline := time.Now().Add(20 * time.Second)
	for {
		frames, err := s.log.AuditFrames(context.Background(), "au_crossed")
		if err == nil && len(frames) == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the refusal kept after the release: %d frames, %v; want it appended", len(frames), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
