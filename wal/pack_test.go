package wal

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// bigAttrs is attrs the size of a one-step preflight frame's.
func bigAttrs() map[string]any {
	rows := make([]any, 7)
	for i := range rows {
		rows[i] = map[string]any{"contract": "plan_shape", "outcome": "not_applicable", "severity": "info",
			"reason": "", "repair_hints": []any{}, "evidence": map[string]any{"detail": "no step's capability has side effects <&>"}}
	}
	return map[string]any{"decision": map[string]any{"contract_results": rows}, "preflight_id": "pf_0123456789abcdefghij"}
}

// TestLargeFramesArePackedAndReadBack: large attrs are stored compressed,
// small ones as JSON; either way every reader sees the same frame and the
// chain verifies.
func TestLargeFramesArePackedAndReadBack(t *testing.T) {
	cases := map[string]struct {
		attrs  map[string]any
		packed bool
	}{
		"small decision frame": {map[string]any{"outcome": "deny", "reason": "contract: preflight_replay"}, false},
		"preflight-sized":      {bigAttrs(), true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			db := openTest(t, nil)
			ctx := context.Background()
			written, err := db.AppendDecision(ctx, FrameInput{Kind: KindPreflight, AuditID: "au_pack", Time: t0, Attrs: tc.attrs})
			if err != nil {
				t.Fatal(err)
			}
			var stored []byte
			db.View(func(tx *Tx) error {
				key := seqKey(written.Seq)
				stored = bytes.Clone(tx.btx.Bucket(bucketFrames).Get(key[:]))
				return nil
			})
			if packed := stored[0] == packMarker; packed != tc.packed {
				t.Fatalf("stored packed %v, want %v: %q", packed, tc.packed, stored)
			}
			if tc.packed && len(stored) >= len(written.Attrs) {
				t.Fatalf("packed frame is %d bytes, attrs alone %d", len(stored), len(written.Attrs))
			}
			frames, err := db.AuditFrames(ctx, "au_pack")
			if err != nil || len(frames) != 1 {
				t.Fatalf("audit frames: %v %v", frames, err)
			}
			got := frames[0]
			if got.Seq != written.Seq || got.Hash != written.Hash || got.PrevHash != written.PrevHash ||
				got.Timestamp != written.Timestamp || got.Kind != written.Kind || !bytes.Equal(got.Attrs, written.Attrs) {
				t.Fatalf("read back %+v\nwritten %+v", got, written)
			}
			if rep, err := db.Verify(ctx); err != nil || !rep.OK() {
				t.Fatalf("verify: %+v %v", rep, err)
			}
			st, err := db.Stats(ctx)
			if err != nil || st.Frames != 1 || st.ByKind[KindPreflight] != 1 || st.FirstTime != written.Timestamp {
				t.Fatalf("stats: %+v %v", st, err)
			}
		})
	}
}

// TestDecodeRejectsDamagedPackedFrames: a packed frame that does not parse
// is ErrCorrupt, never a panic or a frame.
func TestDecodeRejectsDamagedPackedFrames(t *testing.T) {
	attrs, err := encodeAttrs(bigAttrs())
	if err != nil || attrs.packed == nil {
		t.Fatalf("attrs not packed: %v", err)
	}
	f := Frame{Seq: 1, Kind: KindPreflight, Timestamp: "2026-06-23T14:29:00Z", AuditID: "au_x", Attrs: attrs.canonical}
	f.Hash = f.computeHash()
	good := f.encodePacked(attrs.packed)
	if got, err := DecodeFrame(good); err != nil || !bytes.Equal(got.Attrs, attrs.canonical) || got.Hash != f.Hash {
		t.Fatalf("good frame: %+v %v", got, err)
	}
	withHead := func(head string) []byte {
		b := binary.AppendUvarint([]byte{packMarker}, uint64(len(attrs.packed)))
		return append(append(b, attrs.packed...), head...)
	}
	notJSON := packAttrs([]byte(strings.Repeat("x", 2000)))
	cases := map[string][]byte{
		"marker only":        {packMarker},
		"bad length":         {packMarker, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"length past end":    append([]byte{packMarker, 0x7f}, attrs.packed[:10]...),
		"not deflate":        append([]byte{packMarker, 0x04}, "abcd{}"...),
		"cut short":          good[:len(good)/2],
		"attrs in the head":  withHead(`{"seq":1,"kind":"k","timestamp":"2026-06-23T14:29:00Z","attrs":{},"hash":"` + f.Hash + `"}`),
		"trailing data":      append(bytes.Clone(good), `{}`...),
		"head missing hash":  withHead(`{"seq":1,"kind":"k","timestamp":"2026-06-23T14:29:00Z"}`),
		"attrs are not JSON": append(binary.AppendUvarint([]byte{packMarker}, uint64(len(notJSON))), append(notJSON, `{"seq":1}`...)...),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeFrame(b); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("DecodeFrame: %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestPackOnlyWhatShrinks: attrs below the threshold, or that compress
// poorly, are stored as JSON.
func TestPackOnlyWhatShrinks(t *testing.T) {
	// Random bytes, which mustJSON writes as base64: six bits of entropy per
	// byte, so no DEFLATE writer can take a quarter off.
	random := make([]byte, 3000)
	_, _ = rand.NewChaCha8([32]byte{7}).Read(random)
	cases := map[string]struct {
		attrs  []byte
		packed bool
	}{
		"small":        {[]byte(`{"a":"` + strings.Repeat("x", packMin-10) + `"}`), false},
		"large, plain": {[]byte(`{"a":"` + strings.Repeat("abc", 1000) + `"}`), true},
		"large, noisy": {mustJSON(t, map[string]any{"a": random}), false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := packAttrs(tc.attrs) != nil; got != tc.packed {
				t.Fatalf("packed %v, want %v (%d bytes)", got, tc.packed, len(tc.attrs))
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BenchmarkPackAttrs is the DEFLATE packing of a one-step preflight's attrs.
func BenchmarkPackAttrs(b *testing.B) {
	raw, err := os.ReadFile("../internal/httpapi/testdata/golden/echo_pass.json")
	if err != nil {
		b.Skip(err)
	}
	rec := PreflightRecord{Binding: testBinding("pf_bench", "tool.echo"), Decision: raw, Time: t0,
		Submit: &SubmitAttrs{Attempt: 1, RequestDigest: "sha256:x"}}
	attrs, err := EncodeAttrs(rec.attrs())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var n int
	for b.Loop() {
		n = len(packAttrs(attrs))
	}
	b.ReportMetric(float64(len(attrs)), "attrs-bytes")
	b.ReportMetric(float64(n), "packed-bytes")
}
