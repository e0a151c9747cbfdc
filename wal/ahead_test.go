//go:build unix

package wal

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"syscall"
	"testing"
)

// TestZeroAhead: the commit loop keeps at least aheadLow bytes of written
// blocks past the log's high-water mark, so commits overwrite blocks
// instead of filling holes; the log reopens and verifies as written, and a
// NoSync log (bulk fills) does not write ahead.
func TestZeroAhead(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Frames of 1 KiB or more attrs are packed: random text packs little.
	raw := make([]byte, 2250)
	_, _ = rand.Read(raw)
	big := base64.StdEncoding.EncodeToString(raw)
	// Three commits of about 0.9 MB of frames each, past one refill, then
	// a small one that finds the zeros short and refills.
	n := 0
	for range 3 {
		err := db.Update(ctx, func(tx *Tx) error {
			for range 300 {
				n++
				if _, err := tx.Append(FrameInput{Kind: KindDecision, AuditID: fmt.Sprintf("au_ahead_%06d", n),
					Time: t0, Attrs: map[string]any{"outcome": "allow", "pad": big}}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	last, err := db.AppendDecision(ctx, FrameInput{Kind: KindDecision, AuditID: "au_ahead_last", Time: t0,
		Attrs: map[string]any{"outcome": "allow"}})
	if err != nil {
		t.Fatal(err)
	}
	var hwm int64
	if err := db.View(func(tx *Tx) error { hwm = tx.btx.Size(); return nil }); err != nil {
		t.Fatal(err)
	}
	// The loop is idle after the commits returned, so zeroedTo is stable.
	t.Logf("high-water mark %d, zeros to %d", hwm, db.ahead.zeroedTo)
	if db.ahead.zeroedTo < hwm+aheadLow/2 {
		t.Fatalf("zeros reach %d bytes, the high-water mark is %d", db.ahead.zeroedTo, hwm)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(db.Path(), &st); err != nil {
		t.Fatal(err)
	}
	if allocated := st.Blocks * 512; allocated < db.ahead.zeroedTo {
		t.Fatalf("%d bytes of blocks allocated, the zeros reach %d", allocated, db.ahead.zeroedTo)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := db.Verify(ctx)
	if err != nil || !rep.OK() || rep.Frames != 901 {
		t.Fatalf("verify after reopening: %+v, %v", rep, err)
	}
	if seq, _ := db.Head(); seq != last.Seq {
		t.Fatalf("head %d, want %d", seq, last.Seq)
	}
	db.Close()

	quiet := openTest(t, &Options{NoSync: true})
	if _, err := quiet.AppendDecision(ctx, FrameInput{Kind: KindDecision, AuditID: "au_quiet", Time: t0,
		Attrs: map[string]any{"outcome": "allow"}}); err != nil {
		t.Fatal(err)
	}
	if quiet.ahead != nil {
		t.Fatal("a NoSync log writes ahead")
	}
}
