package wal

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestLeadStagesWhatTheCommitStores: the frames a lead fixes before its
// commit are, byte for byte, those AppendStaged's commit stores on a log
// with the same head, and those the lead's commit then stores; while one
// leads no other lead is taken and other writes wait for it.
func TestLeadStagesWhatTheCommitStores(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)
	prior := FrameInput{Kind: KindDecision, AuditID: "au_prior", Time: at, Attrs: map[string]any{"outcome": "deny"}}
	ins := []FrameInput{
		{Kind: KindDecision, AuditID: "au_lead", Time: at, Attrs: map[string]any{"outcome": "allow"}},
		// Large attrs that shrink are stored packed.
		{Kind: KindDecision, AuditID: "au_lead", Time: at, Attrs: map[string]any{"outcome": "allow", "reason": strings.Repeat("policy ", 200)}},
	}
	var want [][]byte
	logs := make([]*DB, 2)
	for i := range logs {
		db, err := Open(t.TempDir(), &Options{Replica: "r"})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.AppendFrames(ctx, []FrameInput{prior}); err != nil {
			t.Fatal(err)
		}
		logs[i] = db
	}
	if _, err := logs[1].AppendStaged(ctx, ins, Staging{Sent: func(_ uint64, _ string, _ []Frame, stored [][]byte) {
		for _, b := range stored {
			want = append(want, bytes.Clone(b))
		}
	}}); err != nil || len(want) != 2 {
		t.Fatalf("staged append: %v, told %d frames", err, len(want))
	}

	db := logs[0]
	lead, ok := db.TryLead()
	if !ok {
		t.Fatal("no lead taken of an idle log")
	}
	if _, ok := db.TryLead(); ok {
		t.Fatal("a second lead taken while one is held")
	}
	if seq, hash := lead.Head(); seq != 1 {
		t.Fatalf("lead's head %d %s, want seq 1", seq, hash)
	}
	frames, stored, err := lead.Stage(ins, nil)
	if err != nil || len(frames) != 2 {
		t.Fatalf("stage: %d frames, %v", len(frames), err)
	}
	for i := range stored {
		if !bytes.Equal(stored[i], want[i]) {
			t.Errorf("frame %d staged as %s; AppendStaged stores %s", frames[i].Seq, stored[i], want[i])
		}
	}
	if packAttrs(frames[1].Attrs) == nil {
		t.Error("the large frame's attrs do not pack")
	}
	waited := make(chan error, 1)
	go func() {
		_, err := db.AppendFrames(ctx, []FrameInput{prior})
		waited <- err
	}()
	select {
	case err := <-waited:
		t.Fatalf("a write committed while the lead was held: %v", err)
	default:
	}
	if err := lead.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	err = db.View(func(tx *Tx) error {
		for i := range frames {
			k := seqKey(frames[i].Seq)
			if got := tx.btx.Bucket(bucketFrames).Get(k[:]); !bytes.Equal(got, stored[i]) {
				t.Errorf("frame %d stored as %s, staged as %s", frames[i].Seq, got, stored[i])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := db.Verify(ctx); err != nil || !rep.OK() || rep.Frames != 4 {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
}

// TestLeadReleaseAndLose: a lead let go without writing leaves the log as
// it was; a lead lost holds the log, tells its stage, and the seqs it
// staged are free again once the owner releases the log.
func TestLeadReleaseAndLose(t *testing.T) {
	ctx := context.Background()
	db, err := Open(t.TempDir(), &Options{Replica: "r"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	in := FrameInput{Kind: KindDecision, AuditID: "au_lose", Time: time.Now(), Attrs: map[string]any{"outcome": "deny"}}
	lead, ok := db.TryLead()
	if !ok {
		t.Fatal("no lead taken of an idle log")
	}
	if _, _, err := lead.Stage([]FrameInput{in}, nil); err != nil {
		t.Fatal(err)
	}
	lead.Release()
	if err := db.Probe(ctx); err != nil {
		t.Fatalf("probe after a released lead: %v", err)
	}
	if seq, _ := db.Head(); seq != 0 {
		t.Fatalf("head after a released lead: %d, want 0", seq)
	}

	if lead, ok = db.TryLead(); !ok {
		t.Fatal("no lead taken after a release")
	}
	lost := false
	staged, _, err := lead.Stage([]FrameInput{in}, func() { lost = true })
	if err != nil {
		t.Fatal(err)
	}
	lead.Lose()
	if !lost {
		t.Fatal("a lost lead did not tell its stage")
	}
	if err := db.Probe(ctx); !errors.Is(err, ErrHeld) {
		t.Fatalf("probe after a lost lead: %v, want ErrHeld", err)
	}
	if _, ok := db.TryLead(); ok {
		t.Fatal("a lead taken of a held log")
	}
	db.Release()
	fs, err := db.AppendFrames(ctx, []FrameInput{in})
	if err != nil || fs[0].Seq != staged[0].Seq {
		t.Fatalf("append after the release: %+v, %v; want seq %d", fs, err, staged[0].Seq)
	}
}

// TestLeadNotTakenOfALogHeldMeanwhile: a commit that fails after TryLead
// first found the log free holds it before it lets go of the lead; the
// lead TryLead then takes is given back, not used to stage at the seqs
// the failed commit's copies name.
func TestLeadNotTakenOfALogHeldMeanwhile(t *testing.T) {
	db, err := Open(t.TempDir(), &Options{Replica: "r"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.beforeLead = db.Hold
	if lead, ok := db.TryLead(); ok {
		lead.Release()
		t.Fatal("a lead taken of a log held between TryLead's look and its lead")
	}
	db.beforeLead = nil
	db.Release()
	lead, ok := db.TryLead()
	if !ok {
		t.Fatal("no lead taken once the hold ended: the refused lead was not given back")
	}
	lead.Release()
	if err := db.Probe(context.Background()); err != nil {
		t.Fatalf("probe after the leads: %v", err)
	}
}

// TestLeadWaitsItsTurn: Lead on a busy log queues for the lead, and the one
// leading hands it over before the writes queued behind: the waiter's
// frame takes the next seq, the queued write's the one after. A waiter
// whose ctx ends gives up its place, and the log goes on.
func TestLeadWaitsItsTurn(t *testing.T) {
	ctx := context.Background()
	db, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	at := time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC)
	frame := func(id string) FrameInput {
		return FrameInput{Kind: KindDecision, AuditID: id, Time: at, Attrs: map[string]any{"outcome": "deny"}}
	}
	// A lone writer commits slowly; a second write queues behind it.
	inCommit, finish := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- db.Update(ctx, func(tx *Tx) error {
			select {
			case <-inCommit:
			default:
				close(inCommit)
			}
			<-finish
			_, err := tx.Append(frame("au_first"))
			return err
		})
	}()
	<-inCommit
	queued := make(chan error, 1)
	go func() {
		_, err := db.AppendFrames(ctx, []FrameInput{frame("au_queued")})
		queued <- err
	}()
	waitFor(t, func() bool { db.wmu.Lock(); defer db.wmu.Unlock(); return len(db.waiting) == 1 })

	// A waiter that gives up leaves no trace.
	gone, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() { _, err := db.Lead(gone); gaveUp <- err }()
	waitFor(t, func() bool { db.wmu.Lock(); defer db.wmu.Unlock(); return len(db.leadWants) == 1 })
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("Lead after its ctx ended: %v", err)
	}

	type led struct {
		lead *Lead
		err  error
	}
	leads := make(chan led, 1)
	go func() { l, err := db.Lead(ctx); leads <- led{l, err} }()
	waitFor(t, func() bool { db.wmu.Lock(); defer db.wmu.Unlock(); return len(db.leadWants) == 1 })
	close(finish)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	l := <-leads
	if l.err != nil {
		t.Fatalf("Lead on a busy log: %v", l.err)
	}
	if seq, _ := l.lead.Head(); seq != 1 {
		t.Fatalf("the lead follows seq %d, want 1: it was handed over before the queued write", seq)
	}
	select {
	case err := <-queued:
		t.Fatalf("the queued write committed while the lead was held: %v", err)
	default:
	}
	if _, _, err := l.lead.Stage([]FrameInput{frame("au_lead")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := l.lead.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-queued; err != nil {
		t.Fatal(err)
	}
	var ids []string
	if err := db.Frames(ctx, ExportFilter{}, func(f *Frame) error { ids = append(ids, f.AuditID); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(ids, ",") != "au_first,au_lead,au_queued" {
		t.Fatalf("frames in order %v, want the lead's before the queued write's", ids)
	}
}

// waitFor polls cond until it holds, for up to ten seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWriteOfAGoneCallerCommits: a write whose ctx is already done still
// commits when a slot is free (a deny's decision frame for a client that
// hung up), where a select between the two would drop it half the time.
func TestWriteOfAGoneCallerCommits(t *testing.T) {
	db, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	at := time.Date(2026, 12, 4, 22, 0, 0, 0, time.UTC)
	for i := range 40 {
		if _, err := db.AppendFrames(gone, []FrameInput{{Kind: KindDecision, AuditID: "au_gone", Time: at,
			Attrs: map[string]any{"outcome": "deny"}}}); err != nil {
			t.Fatalf("write %d with a done ctx: %v", i, err)
		}
	}
	if seq, _ := db.Head(); seq != 40 {
		t.Fatalf("head %d, want 40 frames", seq)
	}
}

// TestWritersOwnErrorIsNoCommitFailure: a write whose function refuses
// (an approval already decided) is answered its error; OnCommit, which
// feeds autonomy_wal_commit_errors_total, hears of no failed commit.
func TestWritersOwnErrorIsNoCommitFailure(t *testing.T) {
	var failed, commits atomic.Int64
	db, err := Open(t.TempDir(), &Options{OnCommit: func(_ int, _ time.Duration, err error) {
		commits.Add(1)
		if err != nil {
			failed.Add(1)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mine := errors.New("already decided")
	if err := db.Update(context.Background(), func(*Tx) error { return mine }); !errors.Is(err, mine) {
		t.Fatalf("the refusing write: %v, want its own error", err)
	}
	if failed.Load() != 0 {
		t.Fatalf("%d failed commits reported for a writer's own error", failed.Load())
	}
}
