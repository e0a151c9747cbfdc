package wal

import (
	"context"
	"testing"
)

// TestMarkerKeysSplit: a marker's key splits back into what made it, and
// malformed ones do not split.
func TestMarkerKeysSplit(t *testing.T) {
	for _, step := range []int{0, 1, 0x0100, 0xffff} {
		k := markerKey("au_marker00000001", "pf_marker00000001", step)
		a, p, s, ok := splitMarkerKey(k)
		if !ok || a != "au_marker00000001" || p != "pf_marker00000001" || s != step {
			t.Errorf("step %d: key %q splits into %q %q %d %v", step, k, a, p, s, ok)
		}
	}
	for _, k := range []string{"\x01pf\x00\x00\x00", "au\x01\x00\x00\x00", "au\x01pf\x00\x00", "au\x01pf\x01\x00\x00"} {
		if _, _, _, ok := splitMarkerKey([]byte(k)); ok {
			t.Errorf("malformed key %q splits", k)
		}
	}
}

// TestEntriesOfOddAuditIDsVerify: a log written before audit ids were
// refused a 0x00 or 0x01 byte may hold frames under such ids (a client's
// x-autonomy-audit-id on a direct ext_proc stream). Their index entries
// are told from the markers beside them by their empty values, so the log
// still verifies, counts its one marker, and lists those frames.
func TestEntriesOfOddAuditIDsVerify(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, nil)
	odd := []string{"au_a\x01pf_b", "au_c\x01", "au_d\x00e"}
	if err := db.Update(ctx, func(tx *Tx) error {
		for _, id := range odd {
			// What an older binary appended: chainFrame now refuses these ids.
			f := Frame{Seq: tx.head.Seq + 1, Kind: KindDecision, Timestamp: t0.UTC().Format(TimestampFormat),
				AuditID: id, Attrs: []byte(`{"outcome":"deny"}`), PrevHash: tx.head.Hash}
			f.Hash = f.computeHash()
			if err := tx.put(&f, f.encode()); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b := testBinding("pf_oddaudit0000001", "tool.echo")
	if _, err := db.RecordPreflight(ctx, PreflightRecord{Binding: b, Decision: []byte(`{}`), Time: t0}); err != nil {
		t.Fatal(err)
	}
	if res, err := db.Consume(ctx, ConsumeRequest{Binding: &b, Kind: "tool.echo", RequestID: "r", Time: t0}); err != nil || res.Status != Consumed {
		t.Fatalf("consume: %+v %v", res, err)
	}
	if rep, err := db.Verify(ctx); err != nil || !rep.OK() {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	if st, err := db.Stats(ctx); err != nil || st.ConsumedMarkers != 1 {
		t.Fatalf("stats: %d markers, %v; want 1", st.ConsumedMarkers, err)
	}
	for _, id := range odd {
		if frames, err := db.AuditFrames(ctx, id); err != nil || len(frames) != 1 {
			t.Errorf("frames of %q: %d, %v; want 1", id, len(frames), err)
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
