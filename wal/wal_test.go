package wal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/contractrefine/autonomy/preflight"
)

var t0 = time.Date(2026, 6, 23, 14, 29, 0, 0, time.UTC)

func openTest(t testing.TB, opts *Options) *DB {
	t.Helper()
	db, err := Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func testBinding(id string, kinds ...string) preflight.Binding {
	b := preflight.Binding{PreflightID: id, AuditID: "au_" + id, Outcome: preflight.OutcomePass,
		ActorID: "user:example", ExpiresAt: t0.Add(5 * time.Minute)}
	for i, k := range kinds {
		b.Steps = append(b.Steps, preflight.BoundStep{ID: fmt.Sprintf("s%d", i+1), Kind: k, ArgsDigest: "sha256:" + k})
	}
	return b
}

func record(t testing.TB, db *DB, b preflight.Binding) Frame {
	t.Helper()
	f, err := db.RecordPreflight(context.Background(), PreflightRecord{Binding: b,
		Decision: json.RawMessage(`{"outcome":"` + string(b.Outcome) + `"}`), Time: t0,
		SessionKey: "session:001\x00plan-1", Idempotency: &IdempotencyRecord{Key: "t\x00idem-" + b.PreflightID, RequestDigest: "sha256:r", PreflightID: b.PreflightID}})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestRecordAndLookUp(t *testing.T) {
	db := openTest(t, nil)
	ctx := context.Background()
	b := testBinding("pf_one", "tool.echo")
	f := record(t, db, b)
	if f.Seq != 1 || f.PrevHash != "" || len(f.Hash) != 64 {
		t.Fatalf("first frame: %+v", f)
	}
	got, err := db.Binding(ctx, "pf_one")
	if err != nil {
		t.Fatal(err)
	}
	if got.AuditID != "au_pf_one" || got.ActorID != "user:example" || !got.ExpiresAt.Equal(b.ExpiresAt) ||
		len(got.Steps) != 1 || got.Steps[0] != b.Steps[0] {
		t.Fatalf("binding = %+v", got)
	}
	if d, err := db.Decision(ctx, "pf_one"); err != nil || string(d) != `{"outcome":"pass"}` {
		t.Fatalf("decision = %s, %v", d, err)
	}
	if _, err := db.Decision(ctx, "pf_unknown"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	if _, err := db.Binding(ctx, "pf_unknown"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	if s, _ := db.Session(ctx, "session:001\x00plan-1"); s.Attempts != 1 {
		t.Fatalf("session attempts = %d", s.Attempts)
	}
	rec, err := db.Idempotency(ctx, "t\x00idem-pf_one")
	if err != nil || rec.PreflightID != "pf_one" {
		t.Fatalf("idempotency = %+v, %v", rec, err)
	}
	found, passed, err := db.ChainStatus(ctx, "au_pf_one", "")
	if err != nil || !found || !passed {
		t.Fatalf("chain status = %v %v %v", found, passed, err)
	}
	if found, _, _ := db.ChainStatus(ctx, "au_missing", ""); found {
		t.Fatal("missing audit id found")
	}
}

func TestConsumeExactlyOnceUnderConcurrency(t *testing.T) {
	db := openTest(t, nil)
	b := testBinding("pf_race", "tool.shell")
	record(t, db, b)
	var consumed, replays atomic.Int32
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := db.Consume(context.Background(), ConsumeRequest{Binding: &b, Kind: "tool.shell",
				RequestID: fmt.Sprintf("req-%d", i), Time: t0,
				Decision: func(r ConsumeResult) FrameInput {
					return FrameInput{Kind: KindDecision, AuditID: b.AuditID, Time: t0, Attrs: map[string]any{"status": r.Status.String()}}
				}})
			if err != nil {
				t.Error(err)
				return
			}
			switch res.Status {
			case Consumed:
				consumed.Add(1)
			case Replay:
				replays.Add(1)
			default:
				t.Errorf("status %v", res.Status)
			}
		}()
	}
	wg.Wait()
	if consumed.Load() != 1 || replays.Load() != 63 {
		t.Fatalf("consumed %d, replays %d; want 1 and 63", consumed.Load(), replays.Load())
	}
	frames, err := db.AuditFrames(context.Background(), b.AuditID)
	if err != nil {
		t.Fatal(err)
	}
	// One preflight frame and 64 decision frames; the consumed marker is not part of the join.
	if len(frames) != 65 || frames[0].Kind != KindPreflight {
		t.Fatalf("audit join has %d frames, first %s", len(frames), frames[0].Kind)
	}
	rep, err := db.Verify(context.Background())
	if err != nil || !rep.OK() || rep.Frames != 66 {
		t.Fatalf("verify = %+v, %v", rep, err)
	}
}

func TestConsumeStatuses(t *testing.T) {
	ctx := context.Background()
	tests := map[string]struct {
		kinds  []string
		prior  []ConsumeRequest
		req    ConsumeRequest
		status ConsumeStatus
		stepID string
	}{
		"first consume":                {kinds: []string{"a"}, req: ConsumeRequest{Kind: "a", RequestID: "r1"}, status: Consumed, stepID: "s1"},
		"second step of same kind":     {kinds: []string{"a", "a"}, prior: []ConsumeRequest{{Kind: "a", RequestID: "r1"}}, req: ConsumeRequest{Kind: "a", RequestID: "r2"}, status: Consumed, stepID: "s2"},
		"replay":                       {kinds: []string{"a"}, prior: []ConsumeRequest{{Kind: "a", RequestID: "r1"}}, req: ConsumeRequest{Kind: "a", RequestID: "r2"}, status: Replay},
		"replay without request id":    {kinds: []string{"a"}, prior: []ConsumeRequest{{Kind: "a"}}, req: ConsumeRequest{Kind: "a"}, status: Replay},
		"same request id repeats":      {kinds: []string{"a"}, prior: []ConsumeRequest{{Kind: "a", RequestID: "r1"}}, req: ConsumeRequest{Kind: "a", RequestID: "r1"}, status: Repeated, stepID: "s1"},
		"repeat with the same call":    {kinds: []string{"a"}, prior: []ConsumeRequest{{Kind: "a", RequestID: "r1", CallDigest: "sha256:x"}}, req: ConsumeRequest{Kind: "a", RequestID: "r1", CallDigest: "sha256:x"}, status: Repeated, stepID: "s1"},
		"repeat with another call":     {kinds: []string{"a"}, prior: []ConsumeRequest{{Kind: "a", RequestID: "r1", CallDigest: "sha256:x"}}, req: ConsumeRequest{Kind: "a", RequestID: "r1", CallDigest: "sha256:y"}, status: Replay},
		"another call, a step left":    {kinds: []string{"a", "a"}, prior: []ConsumeRequest{{Kind: "a", RequestID: "r1", CallDigest: "sha256:x"}}, req: ConsumeRequest{Kind: "a", RequestID: "r1", CallDigest: "sha256:y"}, status: Consumed, stepID: "s2"},
		"marker of a call without one": {kinds: []string{"a"}, prior: []ConsumeRequest{{Kind: "a", RequestID: "r1"}}, req: ConsumeRequest{Kind: "a", RequestID: "r1", CallDigest: "sha256:y"}, status: Replay},
		"digest matches":               {kinds: []string{"a"}, req: ConsumeRequest{Kind: "a", ArgsDigest: "sha256:a"}, status: Consumed, stepID: "s1"},
		"digest differs":               {kinds: []string{"a"}, req: ConsumeRequest{Kind: "a", ArgsDigest: "sha256:other"}, status: Mismatch},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			db := openTest(t, nil)
			b := testBinding("pf_x", tc.kinds...)
			record(t, db, b)
			for _, p := range tc.prior {
				p.Binding, p.Time = &b, t0
				if _, err := db.Consume(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			tc.req.Binding, tc.req.Time = &b, t0
			peek, err := db.Peek(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			res, err := db.Consume(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != tc.status || res.StepID != tc.stepID || !reflect.DeepEqual(peek, res) {
				t.Fatalf("consume = %+v (peek %+v), want %v %q", res, peek, tc.status, tc.stepID)
			}
		})
	}
}

func TestConsumedSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := testBinding("pf_reopen", "tool.shell")
	record(t, db, b)
	if res, err := db.Consume(ctx, ConsumeRequest{Binding: &b, Kind: "tool.shell", RequestID: "r1", Time: t0}); err != nil || res.Status != Consumed {
		t.Fatalf("consume: %+v %v", res, err)
	}
	db.Close()
	db, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	res, err := db.Consume(ctx, ConsumeRequest{Binding: &b, Kind: "tool.shell", RequestID: "r2", Time: t0})
	if err != nil || res.Status != Replay {
		t.Fatalf("after reopen: %+v %v", res, err)
	}
	// The chain continues across the reopen.
	f, err := db.AppendDecision(ctx, FrameInput{Kind: KindDecision, AuditID: b.AuditID, Time: t0})
	if err != nil || f.Seq != 3 {
		t.Fatalf("append after reopen: seq %d, %v", f.Seq, err)
	}
	if rep, _ := db.Verify(ctx); !rep.OK() {
		t.Fatalf("verify: %+v", rep)
	}
}

func TestAuditFramesOrder(t *testing.T) {
	db := openTest(t, nil)
	ctx := context.Background()
	b := testBinding("pf_order", "tool.echo")
	record(t, db, b)
	// Appended later but timestamped earlier: the join sorts by timestamp.
	for _, at := range []time.Time{t0.Add(2 * time.Second), t0.Add(time.Second), t0.Add(time.Second)} {
		if _, err := db.AppendDecision(ctx, FrameInput{Kind: KindDecision, AuditID: b.AuditID, Time: at}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.AppendDecision(ctx, FrameInput{Kind: KindConsumed, AuditID: b.AuditID, Time: t0}); err != nil {
		t.Fatal(err)
	}
	frames, err := db.AuditFrames(ctx, b.AuditID)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, f := range frames {
		seqs = append(seqs, f.Seq)
	}
	if fmt.Sprint(seqs) != "[1 3 4 2]" {
		t.Fatalf("join order %v, want [1 3 4 2]", seqs)
	}
}

func TestVerifyNamesFirstTamperedSeq(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := db.AppendDecision(ctx, FrameInput{Kind: KindDecision, AuditID: "au_t", Time: t0,
			Attrs: map[string]any{"outcome": "deny", "n": i}}); err != nil {
			t.Fatal(err)
		}
	}
	if rep, _ := db.Verify(ctx); !rep.OK() || rep.Frames != 5 {
		t.Fatalf("clean log: %+v", rep)
	}
	db.Close()

	// Edit frame 3's bytes in the file itself: "n":2 becomes "n":7.
	path := filepath.Join(dir, FileName)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	old := []byte(`{"n":2,"outcome":"deny"}`)
	// bbolt may keep stale copies of a page on its freelist; edit every copy.
	if bytes.Count(raw, old) == 0 {
		t.Fatal("frame 3 attrs not found in the file")
	}
	raw = bytes.ReplaceAll(raw, old, []byte(`{"n":7,"outcome":"deny"}`))
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rep, err := db.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.BadSeq != 3 || rep.ChainHeld {
		t.Fatalf("verify after tamper = %+v, want bad seq 3, the chain broken", rep)
	}
}

func TestClosedFailsWrites(t *testing.T) {
	db, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := db.AppendDecision(context.Background(), FrameInput{Kind: KindDecision, Time: t0}); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	if _, err := db.Binding(context.Background(), "x"); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
}

func TestFailedWriteDoesNotFailOthers(t *testing.T) {
	db := openTest(t, nil)
	ctx := context.Background()
	boom := errors.New("boom")
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = db.Update(ctx, func(tx *Tx) error {
				if _, err := tx.Append(FrameInput{Kind: KindDecision, Time: t0, Attrs: map[string]any{"i": i}}); err != nil {
					return err
				}
				if i == 7 {
					return boom
				}
				return nil
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if i == 7 && !errors.Is(err, boom) || i != 7 && err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	rep, _ := db.Verify(ctx)
	if !rep.OK() || rep.Frames != 15 {
		t.Fatalf("verify = %+v, want 15 frames and an intact chain", rep)
	}
}

func TestFileRemovedFailsCommits(t *testing.T) {
	db := openTest(t, nil)
	if err := os.Remove(db.Path()); err != nil {
		t.Fatal(err)
	}
	if err := db.Probe(context.Background()); !errors.Is(err, ErrFileGone) {
		t.Fatalf("probe after remove: %v", err)
	}
}

func TestGroupCommitSharesCommits(t *testing.T) {
	var commits, writes atomic.Int64
	db := openTest(t, &Options{OnCommit: func(n int, _ time.Duration, _ error) { commits.Add(1); writes.Add(int64(n)) }})
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if _, err := db.AppendDecision(context.Background(), FrameInput{Kind: KindDecision, Time: t0}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if writes.Load() != 64*20 {
		t.Fatalf("writes %d", writes.Load())
	}
	if commits.Load() >= writes.Load() {
		t.Fatalf("%d commits for %d writes: no commit was shared", commits.Load(), writes.Load())
	}
	t.Logf("%d writes in %d commits", writes.Load(), commits.Load())
}

func FuzzDecodeFrame(f *testing.F) {
	f.Add([]byte(`{"seq":1,"kind":"autonomy.decision","timestamp":"2026-06-23T14:29:00Z","audit_id":"au","attrs":{},"prev_hash":"","hash":"` + string(bytes.Repeat([]byte("a"), 64)) + `"}`))
	f.Add([]byte(`{}`))
	// A packed frame of each form, so that mutations reach both readers.
	canonical, err := EncodeAttrs(bigAttrs())
	if err != nil {
		f.Fatal(err)
	}
	pf := Frame{Seq: 2, Kind: KindPreflight, Timestamp: "2026-06-23T14:29:00Z", AuditID: "au_x", Attrs: canonical}
	pf.Hash = pf.computeHash()
	f.Add(pf.encodePacked(packS2Dict1, packAttrs(canonical)))
	f.Add(pf.encodePacked(packDeflate, deflateAttrs(canonical)))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeFrame(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", err)
			}
			return
		}
		if fr.Seq == 0 || fr.Kind == "" || len(fr.Hash) != 64 {
			t.Fatalf("accepted incomplete frame %+v", fr)
		}
		_ = fr.computeHash()
	})
}

// TestSessionRepairBudget: a session's record counts every attempt and
// remembers the first repair_required, across a reopen; a value written
// before that second field reads as a budget opened at attempt 1.
func TestSessionRepairBudget(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	outcomes := []preflight.Outcome{preflight.OutcomePass, preflight.OutcomeRepairRequired,
		preflight.OutcomeRepairRequired, preflight.OutcomeDeny}
	for i, o := range outcomes {
		b := testBinding(fmt.Sprintf("pf_%d", i), "tool.echo")
		b.Outcome = o
		record(t, db, b)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = Open(dir, nil); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const key = "session:001\x00plan-1"
	if s, err := db.Session(ctx, key); err != nil || s != (Session{Attempts: 4, RepairFrom: 2}) {
		t.Fatalf("session after reopen = %+v, %v; want 4 attempts, budget from 2", s, err)
	}
	if s, err := db.Session(ctx, "never\x00seen"); err != nil || s != (Session{}) {
		t.Fatalf("unknown session = %+v, %v", s, err)
	}
	err = db.Update(ctx, func(tx *Tx) error {
		return tx.btx.Bucket(bucketSessions).Put([]byte("old\x00plan"), []byte{0, 0, 0, 3})
	})
	if err != nil {
		t.Fatal(err)
	}
	if s, err := db.Session(ctx, "old\x00plan"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a 4-byte sessions value = %+v, %v; want ErrCorrupt", s, err)
	}
}

// TestOpenLocked shows that a log another process holds open is refused
// with ErrLocked, which names the likely cause.
func TestOpenLocked(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	second, err := Open(dir, &Options{OpenTimeout: 50 * time.Millisecond})
	if !errors.Is(err, ErrLocked) {
		if second != nil {
			second.Close()
		}
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
}

// TestVerifyChecksConsumedMarkers: the markers the gate reads to refuse a
// replay are checked against the consumed frames, so a marker deleted (the
// step could be consumed again) or edited does not pass for a verified log.
func TestVerifyChecksConsumedMarkers(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) (*DB, []byte, uint64) {
		db := openTest(t, nil)
		b := testBinding("pf_marker0000000001", "tool.echo")
		if _, err := db.RecordPreflight(ctx, PreflightRecord{Binding: b, Decision: json.RawMessage(`{}`), Time: t0}); err != nil {
			t.Fatal(err)
		}
		res, err := db.Consume(ctx, ConsumeRequest{Binding: &b, Kind: "tool.echo", RequestID: "req-1", CallDigest: "sha256:aaaa", Time: t0})
		if err != nil || res.Status != Consumed {
			t.Fatalf("consume: %+v, %v", res, err)
		}
		if rep, err := db.Verify(ctx); err != nil || !rep.OK() {
			t.Fatalf("clean log: %+v, %v", rep, err)
		}
		var seq uint64
		if err := db.View(func(tx *Tx) error {
			var m consumedRecord
			err := json.Unmarshal(tx.marker(b.AuditID, b.PreflightID, 0), &m)
			seq = m.Seq
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return db, markerKey(b.AuditID, b.PreflightID, 0), seq
	}
	for name, edit := range map[string]func(*bolt.Bucket, []byte) error{
		"marker deleted": func(b *bolt.Bucket, k []byte) error { return b.Delete(k) },
		"marker names another request": func(b *bolt.Bucket, k []byte) error {
			return b.Put(k, bytes.Replace(b.Get(k), []byte("req-1"), []byte("req-9"), 1))
		},
		// A repeat of req-1 with these args would then be allowed.
		"marker names other args": func(b *bolt.Bucket, k []byte) error {
			return b.Put(k, bytes.Replace(b.Get(k), []byte("sha256:aaaa"), []byte("sha256:bbbb"), 1))
		},
		"marker at another time": func(b *bolt.Bucket, k []byte) error {
			return b.Put(k, bytes.Replace(b.Get(k), []byte(`"at":"2026`), []byte(`"at":"2025`), 1))
		},
		"marker names no args": func(b *bolt.Bucket, k []byte) error {
			return b.Put(k, bytes.Replace(b.Get(k), []byte(`,"args_digest":"sha256:aaaa"`), nil, 1))
		},
		"marker on another step": func(b *bolt.Bucket, k []byte) error {
			v := bytes.Clone(b.Get(k))
			if err := b.Delete(k); err != nil {
				return err
			}
			return b.Put(append(bytes.Clone(k[:len(k)-2]), 0, 1), v)
		},
		// The gate would look for it under the preflight's audit id.
		"marker under another audit id": func(b *bolt.Bucket, k []byte) error {
			v := bytes.Clone(b.Get(k))
			if err := b.Delete(k); err != nil {
				return err
			}
			return b.Put(markerKey("au_elsewhere", "pf_marker0000000001", 0), v)
		},
	} {
		t.Run(name, func(t *testing.T) {
			db, key, seq := setup(t)
			if err := db.update(func(tx *bolt.Tx) error { return edit(tx.Bucket(bucketAudit), key) }); err != nil {
				t.Fatal(err)
			}
			rep, err := db.Verify(ctx)
			if err != nil || rep.OK() || rep.BadSeq != seq {
				t.Fatalf("Verify = %+v, %v; want a failure at the consumed frame, seq %d", rep, err, seq)
			}
		})
	}
}

// TestVerifyChecksAuditIndex: the audit index is what the audit join reads;
// an entry deleted, moved to another frame, forged or malformed fails
// Verify, at the frame that lost its entry or the frame the entry names.
func TestVerifyChecksAuditIndex(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) *DB {
		db := openTest(t, nil)
		for i, id := range []string{"au_one", "au_two", "au_two"} {
			if _, err := db.AppendDecision(ctx, FrameInput{Kind: KindDecision, AuditID: id, Time: t0,
				Attrs: map[string]any{"outcome": "deny", "n": i}}); err != nil {
				t.Fatal(err)
			}
		}
		if rep, err := db.Verify(ctx); err != nil || !rep.OK() || rep.Frames != 3 {
			t.Fatalf("clean log: %+v, %v", rep, err)
		}
		return db
	}
	tests := map[string]struct {
		edit    func(*bolt.Bucket) error
		wantSeq uint64
	}{
		// The deny of seq 3 no longer shows under au_two.
		"entry deleted": {edit: func(b *bolt.Bucket) error { return b.Delete(auditKey("au_two", 3)) }, wantSeq: 3},
		// One bit of the seq flipped: seq 3's entry says seq 1.
		"entry moved": {edit: func(b *bolt.Bucket) error {
			if err := b.Delete(auditKey("au_two", 3)); err != nil {
				return err
			}
			return b.Put(auditKey("au_two", 1), nil)
		}, wantSeq: 3},
		// Frame 1 shown under another audit id as well.
		"entry forged":         {edit: func(b *bolt.Bucket) error { return b.Put(auditKey("au_three", 1), nil) }, wantSeq: 1},
		"entry names no frame": {edit: func(b *bolt.Bucket) error { return b.Put(auditKey("au_one", 9), nil) }, wantSeq: 9},
		"entry malformed":      {edit: func(b *bolt.Bucket) error { return b.Put([]byte("au_one"), nil) }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			db := setup(t)
			if err := db.update(func(tx *bolt.Tx) error { return tc.edit(tx.Bucket(bucketAudit)) }); err != nil {
				t.Fatal(err)
			}
			rep, err := db.Verify(ctx)
			if err != nil || rep.OK() || rep.BadSeq != tc.wantSeq || !strings.Contains(rep.Problem, "audit index") {
				t.Fatalf("Verify = %+v, %v; want an audit index problem at seq %d", rep, err, tc.wantSeq)
			}
		})
	}
}

// TestVerifyRepeatedStepIDs: the wal API takes bindings whose steps repeat
// an id (the service's plan_shape never passes one); consuming each of them
// leaves a log that verifies, and a deleted marker is still named.
func TestVerifyRepeatedStepIDs(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, nil)
	b := testBinding("pf_repeated00000001", "tool.echo", "tool.echo")
	b.Steps[1].ID = b.Steps[0].ID
	if _, err := db.RecordPreflight(ctx, PreflightRecord{Binding: b, Decision: json.RawMessage(`{}`), Time: t0}); err != nil {
		t.Fatal(err)
	}
	for _, rid := range []string{"req-1", "req-2"} {
		if res, err := db.Consume(ctx, ConsumeRequest{Binding: &b, Kind: "tool.echo", RequestID: rid, Time: t0}); err != nil || res.Status != Consumed {
			t.Fatalf("consume %s: %+v, %v", rid, res, err)
		}
	}
	if rep, err := db.Verify(ctx); err != nil || !rep.OK() {
		t.Fatalf("both steps consumed: %+v, %v", rep, err)
	}
	if err := db.update(func(tx *bolt.Tx) error { return tx.Bucket(bucketAudit).Delete(markerKey(b.AuditID, b.PreflightID, 1)) }); err != nil {
		t.Fatal(err)
	}
	if rep, err := db.Verify(ctx); err != nil || rep.OK() {
		t.Fatalf("second marker deleted: %+v, %v; want a failure", rep, err)
	}
}

// queued waits until n writes wait for the commit loop.
func queued(t *testing.T, db *DB, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		db.wmu.Lock()
		got := len(db.waiting)
		db.wmu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A lone writer commits its own write; the writes that queue meanwhile
// share the loop's commits, MaxBatch at a time, one failing write is
// retried away, and Close answers every write queued before it.
func TestGroupCommitSchedule(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	db := openTest(t, &Options{MaxBatch: 4, OnCommit: func(writes int, _ time.Duration, _ error) {
		mu.Lock()
		sizes = append(sizes, writes)
		mu.Unlock()
	}})
	ctx := context.Background()
	hold, held := make(chan struct{}), make(chan struct{})
	lone := make(chan error, 1)
	go func() {
		lone <- db.Update(ctx, func(tx *Tx) error {
			close(held)
			<-hold
			_, err := tx.Append(FrameInput{Kind: KindDecision, Time: t0})
			return err
		})
	}()
	<-held
	boom := errors.New("boom")
	const n = 10
	errs := make(chan error, n)
	for i := range n {
		go func() {
			errs <- db.Update(ctx, func(tx *Tx) error {
				if i == 3 {
					return boom
				}
				_, err := tx.Append(FrameInput{Kind: KindDecision, Time: t0})
				return err
			})
		}()
	}
	queued(t, db, n)
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	close(hold)
	if err := <-lone; err != nil {
		t.Fatalf("lone write: %v", err)
	}
	failed := 0
	for range n {
		if err := <-errs; errors.Is(err, boom) {
			failed++
		} else if err != nil {
			t.Fatalf("queued write: %v", err)
		}
	}
	if err := <-closed; err != nil || failed != 1 {
		t.Fatalf("close: %v; %d writes failed, want 1", err, failed)
	}
	if err := db.Update(ctx, func(*Tx) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	// The lone write alone; then the ten queued ones in batches of at most
	// 4 (4, 4, 2), the batch holding the failing write tried again without
	// it, which is no failed commit (OnCommit hears of commits only): four
	// commits, the queued ones counting the nine that succeeded.
	total := 0
	for _, s := range sizes[1:] {
		if s > 4 {
			t.Fatalf("commit sizes %v: one over MaxBatch", sizes)
		}
		total += s
	}
	if len(sizes) != 4 || sizes[0] != 1 || total != n-1 {
		t.Fatalf("commit sizes %v", sizes)
	}
	db2, err := Open(filepath.Dir(db.Path()), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	if rep, _ := db2.Verify(ctx); !rep.OK() || rep.Frames != n {
		t.Fatalf("verify = %+v, want %d frames", rep, n)
	}
}

// TestConsumeDecisionBuiltBeforeTheCommit: DB.Consume builds the decision
// frame for the result it expects before queueing, and again in the commit
// only when the result differs; the frame written is always the one built
// for the consume's result.
func TestConsumeDecisionBuiltBeforeTheCommit(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, nil)
	b := testBinding("pf_expect", "a", "b")
	record(t, db, b)
	var calls []ConsumeStatus
	consume := func(kind, requestID string) ConsumeResult {
		t.Helper()
		res, err := db.Consume(ctx, ConsumeRequest{Binding: &b, Kind: kind, RequestID: requestID, Time: t0,
			Decision: func(res ConsumeResult) FrameInput {
				calls = append(calls, res.Status)
				return FrameInput{Kind: KindDecision, AuditID: b.AuditID, Time: t0,
					Attrs: map[string]any{"status": res.Status.String(), "step_id": res.StepID}}
			}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, tc := range []struct {
		kind, requestID string
		want            ConsumeStatus
		calls           []ConsumeStatus
	}{
		{"b", "r1", Consumed, []ConsumeStatus{Consumed}},           // built once, before the commit
		{"b", "r2", Replay, []ConsumeStatus{Consumed, Replay}},     // expected consumed, found spent
		{"b", "r1", Repeated, []ConsumeStatus{Consumed, Repeated}}, // the same request id again
		{"a", "r3", Consumed, []ConsumeStatus{Consumed}},
	} {
		calls = nil
		res := consume(tc.kind, tc.requestID)
		if res.Status != tc.want || !slices.Equal(calls, tc.calls) {
			t.Fatalf("consume %s %s = %v, Decision called with %v; want %v, %v", tc.kind, tc.requestID, res.Status, calls, tc.want, tc.calls)
		}
		frames, err := db.AuditFrames(ctx, b.AuditID)
		if err != nil {
			t.Fatal(err)
		}
		last := frames[len(frames)-1]
		if want := fmt.Sprintf(`{"status":%q,"step_id":%q}`, res.Status, res.StepID); string(last.Attrs) != want {
			t.Fatalf("decision frame attrs %s, want %s", last.Attrs, want)
		}
	}
	if rep, err := db.Verify(ctx); err != nil || !rep.OK() {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
}
