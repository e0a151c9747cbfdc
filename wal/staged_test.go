package wal

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestAdoptAndHold: frames staged in one log are told before their commit
// with the head they follow; another log takes them up as they are, only
// when they continue it; a held log refuses every write but Adopt's.
func TestAdoptAndHold(t *testing.T) {
	ctx := context.Background()
	a, err := Open(t.TempDir(), &Options{Replica: "r"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(t.TempDir(), &Options{Replica: "r"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	in := FrameInput{Kind: KindDecision, AuditID: "au_staged", Time: time.Now(), Attrs: map[string]any{"outcome": "deny"}}
	var told []Frame
	var base uint64 = 99
	frames, err := a.AppendStaged(ctx, []FrameInput{in, in}, Staging{Sent: func(seq uint64, hash string, fs []Frame, stored [][]byte) {
		base, told = seq, fs
		for i := range fs {
			if want := EncodeFrame(&fs[i]); string(stored[i]) != string(want) {
				t.Errorf("frame %d told stored as %s, want %s", fs[i].Seq, stored[i], want)
			}
		}
	}})
	if err != nil || len(frames) != 2 || len(told) != 2 || base != 0 || told[1].Hash != frames[1].Hash {
		t.Fatalf("staged append: %v, %d frames, told %d after base %d", err, len(frames), len(told), base)
	}

	if err := b.Adopt(ctx, frames[1:]); err == nil {
		t.Fatal("adopt of a frame that does not continue the log: no error")
	}
	if seq, _ := b.Head(); seq != 0 {
		t.Fatalf("head after a refused adopt: %d, want 0", seq)
	}
	b.Hold()
	if err := b.Probe(ctx); !errors.Is(err, ErrHeld) {
		t.Fatalf("probe of a held log: %v, want ErrHeld", err)
	}
	if _, err := b.AppendFrames(ctx, []FrameInput{in}); !errors.Is(err, ErrHeld) {
		t.Fatalf("append to a held log: %v, want ErrHeld", err)
	}
	if err := b.Adopt(ctx, frames); err != nil {
		t.Fatal(err)
	}
	b.Release()
	next, err := b.AppendFrames(ctx, []FrameInput{in})
	if err != nil || next[0].Seq != 3 || next[0].PrevHash != frames[1].Hash {
		t.Fatalf("append after the adopted frames: %+v, %v", next, err)
	}
	if rep, err := b.Verify(ctx); err != nil || !rep.OK() || rep.Frames != 3 {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
	got, err := b.AuditFrames(ctx, "au_staged")
	if err != nil || len(got) != 3 {
		t.Fatalf("audit frames of the adopted log: %d, %v; want 3", len(got), err)
	}
}
