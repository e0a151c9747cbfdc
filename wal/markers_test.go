package wal

import (
	"context"
	"testing"
)

// TestMarkerKeysApartFromEntries: in the audit index a marker's key and an
// entry's key are told apart by the first 0x00 or 0x01 after the audit id,
// whatever bytes the entry's seq holds, and a marker's key splits back
// into what made it.
func TestMarkerKeysApartFromEntries(t *testing.T) {
	for _, seq := range []uint64{1, 0x0100, 0x010000, 0x01000000_00000001, 1<<64 - 1} {
		if k := auditKey("au_entry000000001", seq); isMarkerKey(k) {
			t.Errorf("the entry of seq %#x is taken for a marker: %q", seq, k)
		}
	}
	for _, step := range []int{0, 1, 0x0100, 0xffff} {
		k := markerKey("au_marker00000001", "pf_marker00000001", step)
		a, p, s, ok := splitMarkerKey(k)
		if !isMarkerKey(k) || !ok || a != "au_marker00000001" || p != "pf_marker00000001" || s != step {
			t.Errorf("step %d: key %q splits into %q %q %d %v", step, k, a, p, s, ok)
		}
	}
	for _, k := range []string{"\x01pf\x00\x00\x00", "au\x01\x00\x00\x00", "au\x01pf\x00\x00", "au\x01pf\x01\x00\x00"} {
		if _, _, _, ok := splitMarkerKey([]byte(k)); ok {
			t.Errorf("malformed key %q splits", k)
		}
	}
}

// TestAuditIDWithSeparatorRefused: a frame whose audit id holds a byte the
// audit index separates its keys with is refused, and nothing is written.
func TestAuditIDWithSeparatorRefused(t *testing.T) {
	db := openTest(t, nil)
	for _, id := range []string{"au_a\x01pf_b", "au_a\x00b"} {
		err := db.Update(context.Background(), func(tx *Tx) error {
			_, err := tx.Append(FrameInput{Kind: KindDecision, AuditID: id, Time: t0, Attrs: map[string]any{}})
			return err
		})
		if err == nil {
			t.Errorf("append under audit id %q: no error", id)
		}
	}
	if st, err := db.Stats(context.Background()); err != nil || st.Frames != 0 {
		t.Fatalf("stats: %d frames, %v; want none", st.Frames, err)
	}
}
