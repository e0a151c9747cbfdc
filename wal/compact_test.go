package wal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/preflight"
)

// compactLog is a log written over forty days, as a server with a 30-day
// retention would have written it.
type compactLog struct {
	db  *DB
	now time.Time
	// seqs maps a name to the seq of the frame written under it.
	seqs map[string]uint64
}

const day = 24 * time.Hour

// writeCompactLog writes, in seq order:
//
//	A   preflight pass, 40 days ago, session s1 attempt 1, idempotency key A
//	A.c consumed marker of A
//	A.d decision of A
//	X.d decision without a preflight, 39 days ago
//	B   preflight repair_required, 39 days ago, session s2 attempt 1
//	C   preflight pass, 39 days ago, session s2 attempt 2, idempotency key C
//	D   preflight pass, 31 days ago, but its binding runs until an hour from now
//	D.c consumed marker of D
//	D.d decision of D
//	E   preflight pass, 1 day ago, session s2 attempt 3, idempotency key E
//	E.d decision of E
func writeCompactLog(t *testing.T, opts *Options) *compactLog {
	t.Helper()
	l := &compactLog{db: openTest(t, opts), now: t0, seqs: map[string]uint64{}}
	ctx := context.Background()
	pf := func(name string, at time.Time, outcome preflight.Outcome, expires time.Time, session string, idem bool) {
		b := testBinding("pf_"+name, "tool.shell")
		b.Outcome, b.ExpiresAt = outcome, expires
		rec := PreflightRecord{Binding: b, Decision: json.RawMessage(`{"outcome":"` + string(outcome) + `"}`), Time: at,
			Submit: &SubmitAttrs{SessionID: session, PlanHash: "plan-1", SessionKey: sessionKeyOf(session),
				IntentSummary: "test " + name}}
		rec.SessionKey = sessionKeyOf(session)
		if idem {
			rec.Idempotency = &IdempotencyRecord{Key: "t\x00idem-" + name, RequestDigest: "sha256:" + name, PreflightID: b.PreflightID}
		}
		f, err := l.db.RecordPreflight(ctx, rec)
		if err != nil {
			t.Fatal(err)
		}
		l.seqs[name] = f.Seq
	}
	consume := func(name string, at time.Time) {
		b, err := l.db.Binding(ctx, "pf_"+name)
		if err != nil {
			t.Fatal(err)
		}
		res, err := l.db.Consume(ctx, ConsumeRequest{Binding: &b, Kind: "tool.shell", RequestID: "req-" + name, Time: at,
			Decision: func(ConsumeResult) FrameInput {
				return FrameInput{Kind: KindDecision, AuditID: b.AuditID, Time: at, Attrs: map[string]any{"outcome": "allow"}}
			}})
		if err != nil || res.Status != Consumed {
			t.Fatalf("consume %s: %+v %v", name, res, err)
		}
		seq, _ := l.db.Head()
		l.seqs[name+".c"], l.seqs[name+".d"] = seq-1, seq
	}
	decision := func(name, auditID string, at time.Time) {
		f, err := l.db.AppendDecision(ctx, FrameInput{Kind: KindDecision, AuditID: auditID, Time: at, Attrs: map[string]any{"outcome": "allow"}})
		if err != nil {
			t.Fatal(err)
		}
		l.seqs[name] = f.Seq
	}
	now := l.now
	pf("A", now.Add(-40*day), preflight.OutcomePass, now.Add(-40*day+5*time.Minute), "s1", true)
	consume("A", now.Add(-40*day+time.Minute))
	decision("X.d", "au_unbound", now.Add(-39*day))
	pf("B", now.Add(-39*day), preflight.OutcomeRepairRequired, now.Add(-39*day+5*time.Minute), "s2", false)
	pf("C", now.Add(-39*day+time.Minute), preflight.OutcomePass, now.Add(-39*day+6*time.Minute), "s2", true)
	pf("D", now.Add(-31*day), preflight.OutcomePass, now.Add(time.Hour), "s3", true)
	consume("D", now.Add(-31*day+time.Minute))
	pf("E", now.Add(-day), preflight.OutcomePass, now.Add(-day+5*time.Minute), "s2", true)
	decision("E.d", "au_pf_E", now.Add(-day+time.Minute))
	return l
}

func sessionKeyOf(session string) string {
	req := preflight.Request{Intent: preflight.Intent{PlanHash: "plan-1"},
		Context: preflight.Context{Actor: preflight.Actor{ID: testBinding("").ActorID, SessionID: session}}}
	k, _ := req.SessionKey("")
	return k
}

func TestCompactRemovesExactlyTheExpiredPrefix(t *testing.T) {
	ctx := context.Background()
	tests := map[string]struct{ chunk int }{
		"one frame per transaction": {chunk: 1},
		"small chunks":              {chunk: 3},
		"default chunk":             {chunk: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			l := writeCompactLog(t, &Options{CompactChunk: tc.chunk})
			db := l.db
			before := l.now.Add(-30 * day)
			rep, err := db.Compact(ctx, before)
			if err != nil {
				t.Fatal(err)
			}
			// A, A.c, A.d, X.d, B, C go; D is old but its binding is live, so it
			// and everything after it stay.
			want := CompactReport{Before: before, Frames: 6, FirstSeq: 1, LastSeq: l.seqs["C"], KeptFrom: l.seqs["D"],
				StopReason: StopLiveBinding, Preflights: 3, ConsumedMarkers: 1, Sessions: 1, IdempotencyKeys: 2}
			got := rep
			got.Transactions, got.Before = 0, before
			if got != want || !rep.Before.Equal(before) {
				t.Fatalf("report = %+v\nwant     %+v", got, want)
			}
			if tc.chunk == 1 && rep.Transactions < 6 {
				t.Fatalf("one-frame chunks took %d transactions", rep.Transactions)
			}
			for name, seq := range l.seqs {
				err := db.View(func(tx *Tx) error { _, err := tx.Frame(seq); return err })
				gone := seq < l.seqs["D"]
				if gone != errors.Is(err, ErrNotFound) {
					t.Errorf("frame %s (seq %d): gone=%v, lookup err %v", name, seq, gone, err)
				}
			}
			for id, present := range map[string]bool{"pf_A": false, "pf_B": false, "pf_C": false, "pf_D": true, "pf_E": true} {
				if _, err := db.Binding(ctx, id); (err == nil) != present {
					t.Errorf("binding %s: present=%v, err %v", id, present, err)
				}
			}
			for key, present := range map[string]bool{"t\x00idem-A": false, "t\x00idem-C": false, "t\x00idem-D": true, "t\x00idem-E": true} {
				if _, err := db.Idempotency(ctx, key); (err == nil) != present {
					t.Errorf("idempotency %q: present=%v, err %v", key, present, err)
				}
			}
			// s1's only attempt is gone; s2 keeps its full count because E stays.
			for session, want := range map[string]int{"s1": 0, "s2": 3, "s3": 1} {
				if s, _ := db.Session(ctx, sessionKeyOf(session)); s.Attempts != want {
					t.Errorf("session %s attempts = %d, want %d", session, s.Attempts, want)
				}
			}
			if frames, _ := db.AuditFrames(ctx, "au_pf_A"); len(frames) != 0 {
				t.Errorf("audit join of a removed preflight still has %d frames", len(frames))
			}
			if frames, _ := db.AuditFrames(ctx, "au_pf_D"); len(frames) != 2 {
				t.Errorf("audit join of D has %d frames, want 2", len(frames))
			}
			assertChainHolds(t, db, l.seqs["D"])

			// Replay of the live preflight is still denied from the WAL.
			d, err := db.Binding(ctx, "pf_D")
			if err != nil {
				t.Fatal(err)
			}
			if res, err := db.Peek(ctx, ConsumeRequest{Binding: &d, Kind: "tool.shell", RequestID: "req-replay"}); err != nil || res.Status != Replay {
				t.Fatalf("peek on the live preflight after compaction = %+v, %v; want replay", res, err)
			}

			// Idempotent: the same cut-off removes nothing more.
			again, err := db.Compact(ctx, before)
			if err != nil {
				t.Fatal(err)
			}
			if again.Frames != 0 || again.Preflights != 0 || again.Sessions != 0 || again.IdempotencyKeys != 0 ||
				again.KeptFrom != l.seqs["D"] || again.StopReason != StopLiveBinding {
				t.Fatalf("second compaction = %+v", again)
			}
			assertChainHolds(t, db, l.seqs["D"])
		})
	}
}

func TestCompactEverythingThenKeepWriting(t *testing.T) {
	ctx := context.Background()
	l := writeCompactLog(t, nil)
	db := l.db
	headSeq, headHash := db.Head()
	// Two hours on, D's binding has expired and every frame is old enough.
	rep, err := db.Compact(ctx, l.now.Add(2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Frames != int(headSeq) || rep.StopReason != StopEnd || rep.KeptFrom != 0 || rep.Preflights != 5 ||
		rep.ConsumedMarkers != 2 || rep.Sessions != 3 || rep.IdempotencyKeys != 4 {
		t.Fatalf("report = %+v", rep)
	}
	st, err := db.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Frames != 0 || st.Bindings != 0 || st.ConsumedMarkers != 0 || st.Sessions != 0 || st.IdempotencyKeys != 0 || st.BaseSeq != headSeq {
		t.Fatalf("stats after compacting everything = %+v", st)
	}
	// The retired counts are released with their sessions.
	if err := db.View(func(tx *Tx) error {
		if b := tx.btx.Bucket(bucketRetired); b != nil && b.Stats().KeyN != 0 {
			return fmt.Errorf("%d retired counts left", b.Stats().KeyN)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if rep, err := db.Verify(ctx); err != nil || !rep.OK() || rep.Frames != 0 {
		t.Fatalf("verify of an emptied log = %+v, %v", rep, err)
	}
	if seq, hash := db.Head(); seq != headSeq || hash != headHash {
		t.Fatalf("head moved to %d", seq)
	}

	// The chain continues from the base, also across a reopen.
	f, err := db.AppendDecision(ctx, FrameInput{Kind: KindDecision, AuditID: "au_after", Time: l.now})
	if err != nil || f.Seq != headSeq+1 || f.PrevHash != headHash {
		t.Fatalf("append after compaction: %+v, %v", f, err)
	}
	dir := db.path[:len(db.path)-len(FileName)-1]
	db.Close()
	db2, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	if _, err := db2.AppendDecision(ctx, FrameInput{Kind: KindDecision, AuditID: "au_after", Time: l.now}); err != nil {
		t.Fatal(err)
	}
	assertChainHolds(t, db2, headSeq+1)
}

func TestCompactRespectsContext(t *testing.T) {
	l := writeCompactLog(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.db.Compact(ctx, l.now); !errors.Is(err, context.Canceled) {
		t.Fatalf("compact with a cancelled context: %v", err)
	}
	if st, _ := l.db.Stats(context.Background()); st.Frames != len(l.seqs) {
		t.Fatalf("a cancelled compaction removed frames: %d left of %d", st.Frames, len(l.seqs))
	}
}

func TestCompactTamperedFrameStops(t *testing.T) {
	l := writeCompactLog(t, nil)
	key := seqKey(1)
	if err := l.db.Update(context.Background(), func(tx *Tx) error {
		return tx.btx.Bucket(bucketFrames).Put(key[:], []byte(`{"seq":1}`))
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.db.Compact(context.Background(), l.now); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("compact over a corrupt frame: %v, want ErrCorrupt", err)
	}
}

// assertChainHolds checks Verify and that the log now starts at firstSeq.
func assertChainHolds(t *testing.T, db *DB, firstSeq uint64) {
	t.Helper()
	rep, err := db.Verify(context.Background())
	if err != nil || !rep.OK() {
		t.Fatalf("verify after compaction = %+v, %v", rep, err)
	}
	if rep.FirstSeq != firstSeq {
		t.Fatalf("log starts at seq %d, want %d", rep.FirstSeq, firstSeq)
	}
}

func TestCompactWithNothingToRemoveDoesNotCommit(t *testing.T) {
	var commits atomic.Int32
	l := writeCompactLog(t, &Options{OnCommit: func(int, time.Duration, error) { commits.Add(1) }})
	tests := map[string]struct {
		before time.Time
		stop   string
	}{
		"first frame too young": {before: l.now.Add(-50 * day), stop: StopRetention},
		"cut-off at the first":  {before: l.now.Add(-40 * day), stop: StopRetention},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			was := commits.Load()
			rep, err := l.db.Compact(context.Background(), tc.before)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Frames != 0 || rep.Transactions != 0 || rep.StopReason != tc.stop || rep.KeptFrom != 1 {
				t.Fatalf("report = %+v", rep)
			}
			if n := commits.Load() - was; n != 0 {
				t.Fatalf("%d commits for a compaction that removed nothing", n)
			}
		})
	}
	empty := openTest(t, &Options{OnCommit: func(int, time.Duration, error) { commits.Add(1) }})
	was := commits.Load()
	if rep, err := empty.Compact(context.Background(), l.now); err != nil || rep.StopReason != StopEnd || rep.KeptFrom != 0 || commits.Load() != was {
		t.Fatalf("compacting an empty log: %+v, %v, %d commits", rep, err, commits.Load()-was)
	}
}

// BenchmarkCompact measures removing an old log of 100k frames (one
// preflight, one consumed marker and one decision per 3 frames) in
// default-size transactions, and reports the longest single commit: how
// long a concurrent check could wait behind compaction.
func BenchmarkCompact(b *testing.B) {
	const frames = 99999
	for b.Loop() {
		b.StopTimer()
		var longest atomic.Int64
		db := openTest(b, &Options{OnCommit: func(_ int, took time.Duration, _ error) {
			for {
				old := longest.Load()
				if int64(took) <= old || longest.CompareAndSwap(old, int64(took)) {
					return
				}
			}
		}})
		ctx := context.Background()
		at := t0.Add(-40 * day)
		if err := db.Update(ctx, func(tx *Tx) error {
			for i := range frames / 3 {
				bd := testBinding(fmt.Sprintf("pf_bench_%08d", i), "tool.echo")
				bd.ExpiresAt = at.Add(5 * time.Minute)
				if _, err := tx.RecordPreflight(PreflightRecord{Binding: bd, Decision: json.RawMessage(`{"outcome":"pass"}`), Time: at}); err != nil {
					return err
				}
				if _, err := tx.Append(FrameInput{Kind: KindConsumed, AuditID: bd.AuditID, Time: at}); err != nil {
					return err
				}
				if _, err := tx.Append(FrameInput{Kind: KindDecision, AuditID: bd.AuditID, Time: at}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
		longest.Store(0)
		b.StartTimer()
		rep, err := db.Compact(ctx, t0)
		b.StopTimer()
		if err != nil || rep.Frames != frames {
			b.Fatalf("compact: %+v, %v", rep, err)
		}
		b.ReportMetric(float64(longest.Load())/1e6, "max-commit-ms")
		b.ReportMetric(float64(rep.Transactions), "commits")
		db.Close()
		b.StartTimer()
	}
}
