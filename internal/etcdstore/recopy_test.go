package etcdstore

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/contractrefine/autonomy/wal"
)

// TestRestartCopiesWhatFailedBefore: decision and outcome frames whose
// copies failed before the replica stopped (here: appended to its log
// alone) are copied when it opens again, so the other replicas' audit
// joins hold them; a preflight frame without its copy (its binding write
// failed, its caller refused) stays out.
func TestRestartCopiesWhatFailedBefore(t *testing.T) {
	ctx := context.Background()
	prefix, dir := newPrefix(), t.TempDir()
	log, err := wal.Open(dir, &wal.Options{Replica: "replica-a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := log.AppendFrames(ctx, []wal.FrameInput{decisionIn("au_recopy"), decisionIn("au_recopy"),
		{Kind: wal.KindPreflight, AuditID: "au_recopy_pf", Time: time.Now(), Attrs: map[string]any{"outcome": "pass"}}}); err != nil {
		t.Fatal(err)
	}
	log.Close()

	a := open(t, "replica-a", prefix, dir)
	defer closeStore(a)
	b := open(t, "replica-b", prefix, t.TempDir())
	defer closeStore(b)
	deadline := time.Now().Add(10 * time.Second)
	var got []wal.Frame
	for {
		if got, err = b.AuditFrames(ctx, "au_recopy"); err == nil && len(got) == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(got) != 2 || got[0].Seq != 1 || got[1].Seq != 2 {
		t.Fatalf("another replica's join of the decisions after the restart: %+v, %v; want seqs 1 and 2", got, err)
	}
	if pf, err := b.AuditFrames(ctx, "au_recopy_pf"); err == nil && len(pf) != 0 {
		t.Fatalf("a preflight frame without its copy was copied: %+v", pf)
	}
	// The restarted replica's log and etcd agree but for that preflight.
	rep, err := a.Check(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		if p.Kind != wal.KindPreflight {
			t.Errorf("check-store after the restart: %+v", p)
		}
	}
}

// TestRecopyFindsFramesInOneCopy: a consume's consumed and decision frames
// share one copy under the first one's key; the check at open finds the
// decision there and sends nothing again, so no audit join shows it twice.
func TestRecopyFindsFramesInOneCopy(t *testing.T) {
	ctx := context.Background()
	a := open(t, "replica-a", newPrefix(), t.TempDir())
	defer closeStore(a)
	bd := recordSteps(t, a, "pf_recopy_list", 1)
	if res, err := a.Consume(ctx, consumeIn(&bd, "req-recopy-list")); err != nil || res.Status != wal.Consumed {
		t.Fatalf("consume: %v, %v", res.Status, err)
	}
	keys := func() int {
		resp, err := a.cli.Get(ctx, a.p.replicaFrames(bd.AuditID, "replica-a"), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return int(resp.Count)
	}
	if n := keys(); n != 2 {
		t.Fatalf("%d copies under the audit id, want the preflight's and one of the consume's two frames", n)
	}
	// The decision copied again under its own key, as a copy sent again
	// while its list was on its way would be, is joined once.
	fs := framesAfter(t, a, 0) // once the consume's commit is in
	head, _ := a.log.Head()
	if len(fs) != 3 || fs[2].Kind != wal.KindDecision || fs[2].Seq != head {
		t.Fatalf("the log: %+v, want the preflight, then the consume's frames, its decision last", fs)
	}
	again := a.p.frame(bd.AuditID, "replica-a", head)
	if _, err := a.cli.Put(ctx, again, string(wal.EncodeFrame(&fs[2]))); err != nil {
		t.Fatal(err)
	}
	if got, err := a.AuditFrames(ctx, bd.AuditID); err != nil || len(got) != 2 {
		t.Fatalf("audit join with the decision copied twice: %d frames, %v; want the preflight and the decision", len(got), err)
	}
	if _, err := a.cli.Delete(ctx, again); err != nil {
		t.Fatal(err)
	}
	if err := a.recopyTail(ctx, head); err != nil {
		t.Fatal(err)
	}
	if n := keys(); n != 2 {
		t.Fatalf("%d copies after the check at open, want still 2", n)
	}
	// A decision past the head the check looks up to is left to its own
	// copy; up to it, one without a copy is copied.
	if _, err := a.log.AppendFrames(ctx, []wal.FrameInput{decisionIn(bd.AuditID)}); err != nil {
		t.Fatal(err)
	}
	if err := a.recopyTail(ctx, head); err != nil {
		t.Fatal(err)
	}
	if n := keys(); n != 2 {
		t.Fatalf("%d copies after a check up to the head before the decision, want still 2", n)
	}
	next, _ := a.log.Head()
	if err := a.recopyTail(ctx, next); err != nil {
		t.Fatal(err)
	}
	if n := keys(); n != 3 {
		t.Fatalf("%d copies after a check up to the decision, want 3", n)
	}
	got, err := a.AuditFramesOf(ctx, bd.AuditID, []string{wal.KindPreflight, wal.KindConsumed, wal.KindDecision})
	if err != nil || len(got) != 4 || got[1].Kind != wal.KindConsumed || got[2].Kind != wal.KindDecision || got[3].Kind != wal.KindDecision {
		t.Fatalf("audit join: %+v, %v; want the preflight, consumed and decision frames once each, then the second decision", got, err)
	}
}
