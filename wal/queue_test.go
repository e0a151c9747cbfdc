package wal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"runtime"
	"testing"
	"time"
)

func denyFrame(auditID string) FrameInput {
	return FrameInput{Kind: KindDecision, AuditID: auditID, Time: t0,
		Attrs: map[string]any{"outcome": "deny", "reason": "contract: preflight_replay"}}
}

// TestEnqueueIsVisibleAfterFlushAndDurableAfterClose: queued frames are
// read back once Flush returns, and Close commits every queued frame, so a
// graceful shutdown loses none.
func TestEnqueueIsVisibleAfterFlushAndDurableAfterClose(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := db.Enqueue(denyFrame("au_flush")); err != nil {
		t.Fatal(err)
	}
	frames, err := db.AuditFrames(ctx, "au_flush") // flushes first
	if err != nil || len(frames) != 1 {
		t.Fatalf("after flush: %d frames, %v", len(frames), err)
	}
	const queued = 3000
	for range queued {
		if err := db.Enqueue(denyFrame("au_close")); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Enqueue(denyFrame("au_close")); !errors.Is(err, ErrClosed) {
		t.Fatalf("enqueue after close: %v", err)
	}
	db, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	frames, err = db.AuditFrames(ctx, "au_close")
	if err != nil || len(frames) != queued {
		t.Fatalf("after reopen: %d frames, want %d (%v)", len(frames), queued, err)
	}
	if rep, err := db.Verify(ctx); err != nil || !rep.OK() || rep.Frames != queued+1 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

// TestQueuedFramesHeldOnlyWithoutWaiters: a commit of queued frames alone
// is held (QueuedDelay) to gather more, but a writer that waits is never
// held: with an hour's delay its write still commits at once, queued
// frames with it, and Close commits what is held. With the default delay
// queued frames reach the disk without any Flush.
func TestQueuedFramesHeldOnlyWithoutWaiters(t *testing.T) {
	type commit struct{ writes int }
	commits := make(chan commit, 16)
	db := openTest(t, &Options{QueuedDelay: time.Hour,
		OnCommit: func(writes int, _ time.Duration, err error) {
			if err == nil {
				commits <- commit{writes}
			}
		}})
	ctx := context.Background()
	for range 3 {
		if err := db.Enqueue(denyFrame("au_held")); err != nil {
			t.Fatal(err)
		}
	}
	// Would block for the hour if the waiting write were held.
	if _, err := db.AppendDecision(ctx, denyFrame("au_waiter")); err != nil {
		t.Fatal(err)
	}
	got := 0
	for got < 4 {
		got += (<-commits).writes
	}
	if got != 4 {
		t.Fatalf("the waiting write's commit held %d writes, want the 3 queued and itself", got)
	}
	if err := db.Enqueue(denyFrame("au_close")); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil { // would block for the hour if held
		t.Fatal(err)
	}
	if c := <-commits; c.writes != 1 {
		t.Fatalf("close committed %d writes, want the queued frame", c.writes)
	}

	quick := openTest(t, nil)
	if err := quick.Enqueue(denyFrame("au_quick")); err != nil {
		t.Fatal(err)
	}
	for quick.queued.Load() != 0 { // committed by the loop alone, no Flush
		runtime.Gosched()
	}
	var n int
	err := quick.View(func(tx *Tx) error {
		return tx.btx.Bucket(bucketAudit).ForEach(func(k, _ []byte) error { n++; return nil })
	})
	if err != nil || n != 1 {
		t.Fatalf("audit index after the held commit: %d entries, %v", n, err)
	}
}

// TestEnqueueRefusesWhenTheLogCannotWrite: with the file gone, or after a
// failed commit, Enqueue queues nothing and says why, so the gate can fall
// back to a write it waits for (and answer 503).
func TestEnqueueRefusesWhenTheLogCannotWrite(t *testing.T) {
	cases := map[string]func(t *testing.T, db *DB) error{
		"file removed": func(t *testing.T, db *DB) error {
			if err := os.Remove(db.Path()); err != nil {
				t.Fatal(err)
			}
			return ErrFileGone
		},
		"last commit failed": func(t *testing.T, db *DB) error {
			// As the commit loop records a failed commit (a full disk, an
			// I/O error): the next successful commit clears it.
			err := errors.New("injected commit failure")
			db.lastErr.Store(&err)
			return err
		},
	}
	for name, breakIt := range cases {
		t.Run(name, func(t *testing.T) {
			db := openTest(t, nil)
			want := breakIt(t, db)
			if err := db.Enqueue(denyFrame("au_x")); !errors.Is(err, want) {
				t.Fatalf("enqueue: %v, want %v", err, want)
			}
			if errors.Is(want, ErrFileGone) {
				return
			}
			if err := db.Probe(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := db.Enqueue(denyFrame("au_x")); err != nil {
				t.Fatalf("enqueue after a good commit: %v", err)
			}
		})
	}
}

// TestStoredFrameBytes: a frame is stored as encoding/json writes it with
// HTML escaping off, attrs byte for byte, for any string in any member.
func TestStoredFrameBytes(t *testing.T) {
	cases := map[string]string{
		"plain":        "au_0123456789abcdefghij",
		"html":         "a<b>&c",
		"quote":        `say "hi" \ bye`,
		"control":      "tab\tnew\nline\x01",
		"unicode":      "zoë ✓ 🚀",
		"line sep":     "a\u2028b\u2029c",
		"invalid utf8": "a\xffb",
		"del":          "a\x7fb",
		"empty":        "",
	}
	for name, s := range cases {
		t.Run(name, func(t *testing.T) {
			f := Frame{Seq: 7, Kind: s, Timestamp: "2026-06-23T14:29:00Z", AuditID: s,
				Attrs: json.RawMessage(`{"r":"a<b&c>"}`), PrevHash: s, Hash: s}
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(&f); err != nil {
				t.Fatal(err)
			}
			if got := f.encode(); string(got) != string(bytes.TrimSuffix(want.Bytes(), []byte("\n"))) {
				t.Fatalf("encode:\n got %s\nwant %s", got, want.Bytes())
			}
		})
	}
}

// TestVerifyAcceptsHTMLEscapedAttrs: frames stored before attrs were kept
// byte for byte had <, > and & escaped by encoding/json while their hash
// covered the canonical attrs; Verify still proves them.
func TestVerifyAcceptsHTMLEscapedAttrs(t *testing.T) {
	db := openTest(t, nil)
	ctx := context.Background()
	f, err := db.AppendDecision(ctx, FrameInput{Kind: KindDecision, AuditID: "au_old", Time: t0,
		Attrs: map[string]any{"reason": "a<b&c>"}})
	if err != nil {
		t.Fatal(err)
	}
	old := f
	old.Attrs = bytes.ReplaceAll(bytes.ReplaceAll(bytes.ReplaceAll(f.Attrs,
		[]byte("<"), []byte(`\u003c`)), []byte(">"), []byte(`\u003e`)), []byte("&"), []byte(`\u0026`))
	tampered := old
	tampered.Attrs = bytes.Replace(old.Attrs, []byte(`\u003c`), []byte(`\u003e`), 1)
	for name, tc := range map[string]struct {
		frame Frame
		ok    bool
	}{
		"escaped, same content":   {old, true},
		"escaped, other content":  {tampered, false},
		"as written by this code": {f, true},
	} {
		t.Run(name, func(t *testing.T) {
			err := db.Update(ctx, func(tx *Tx) error {
				key := seqKey(tc.frame.Seq)
				return tx.btx.Bucket(bucketFrames).Put(key[:], tc.frame.encode())
			})
			if err != nil {
				t.Fatal(err)
			}
			rep, err := db.Verify(ctx)
			if err != nil || rep.OK() != tc.ok {
				t.Fatalf("verify: %+v, %v; want ok %v", rep, err, tc.ok)
			}
		})
	}
}
