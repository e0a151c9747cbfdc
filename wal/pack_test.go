package wal

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
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
			if packed := stored[0] == packS2Dict1; packed != tc.packed {
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

// TestDecodeRejectsDamagedPackedFrames: a packed frame of either form that
// does not parse is ErrCorrupt, never a panic or a frame.
func TestDecodeRejectsDamagedPackedFrames(t *testing.T) {
	canonical, err := EncodeAttrs(bigAttrs())
	if err != nil {
		t.Fatal(err)
	}
	for _, form := range []struct {
		name   string
		marker byte
		pack   func([]byte) []byte
	}{{"s2", packS2Dict1, packAttrs}, {"deflate", packDeflate, deflateAttrs}} {
		t.Run(form.name, func(t *testing.T) {
			m := form.marker
			packed := form.pack(canonical)
			if packed == nil {
				t.Fatal("attrs not packed")
			}
			f := Frame{Seq: 1, Kind: KindPreflight, Timestamp: "2026-06-23T14:29:00Z", AuditID: "au_x", Attrs: canonical}
			f.Hash = f.computeHash()
			good := f.encodePacked(m, packed)
			if got, err := DecodeFrame(good); err != nil || !bytes.Equal(got.Attrs, canonical) || got.Hash != f.Hash {
				t.Fatalf("good frame: %+v %v", got, err)
			}
			withHead := func(head string) []byte {
				b := binary.AppendUvarint([]byte{m}, uint64(len(packed)))
				return append(append(b, packed...), head...)
			}
			notJSON := form.pack([]byte(strings.Repeat("x", 2000)))
			cases := map[string][]byte{
				"marker only":        {m},
				"bad length":         {m, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
				"length past end":    append([]byte{m, 0x7f}, packed[:10]...),
				"not packed":         append([]byte{m, 0x04}, "abcd{}"...),
				"cut short":          good[:len(good)/2],
				"attrs in the head":  withHead(`{"seq":1,"kind":"k","timestamp":"2026-06-23T14:29:00Z","attrs":{},"hash":"` + f.Hash + `"}`),
				"trailing data":      append(bytes.Clone(good), `{}`...),
				"head missing hash":  withHead(`{"seq":1,"kind":"k","timestamp":"2026-06-23T14:29:00Z"}`),
				"attrs are not JSON": append(binary.AppendUvarint([]byte{m}, uint64(len(notJSON))), append(notJSON, `{"seq":1}`...)...),
			}
			if m == packS2Dict1 {
				// An S2 block opens with the length it decodes to: one past
				// the bound is refused before anything is allocated.
				huge := binary.AppendUvarint(nil, maxUnpacked+1)
				huge = append(huge, packed[len(binary.AppendUvarint(nil, uint64(len(canonical)))):]...)
				cases["inflates past the bound"] = append(binary.AppendUvarint([]byte{m}, uint64(len(huge))), append(huge, `{"seq":1}`...)...)
			}
			for name, b := range cases {
				t.Run(name, func(t *testing.T) {
					if _, err := DecodeFrame(b); !errors.Is(err, ErrCorrupt) {
						t.Fatalf("DecodeFrame: %v, want ErrCorrupt", err)
					}
				})
			}
		})
	}
}

// TestSharedFramesReadByEitherVersion: the log packs a large frame against
// dictionary 1 (0x02), which format version 1 cannot read; the form
// replicas share it in is DEFLATE (0x01), which both versions read, and
// every form decodes to the same frame.
func TestSharedFramesReadByEitherVersion(t *testing.T) {
	db := openTest(t, nil)
	ctx := context.Background()
	small, err := db.AppendDecision(ctx, FrameInput{Kind: KindDecision, AuditID: "au_share", Time: t0, Attrs: map[string]any{"outcome": "allow"}})
	if err != nil {
		t.Fatal(err)
	}
	big, err := db.AppendDecision(ctx, FrameInput{Kind: KindPreflight, AuditID: "au_share", Time: t0, Attrs: bigAttrs()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f              Frame
		stored, shared byte
	}{{small, '{', '{'}, {big, packS2Dict1, packDeflate}} {
		var stored []byte
		db.View(func(tx *Tx) error {
			key := seqKey(tc.f.Seq)
			stored = bytes.Clone(tx.btx.Bucket(bucketFrames).Get(key[:]))
			return nil
		})
		shared := SharedForm(&tc.f, stored)
		if stored[0] != tc.stored || shared[0] != tc.shared || EncodeFrame(&tc.f)[0] != tc.shared {
			t.Fatalf("frame %d: stored %q, shared %q, want forms %q and %q", tc.f.Seq, stored[0], shared[0], tc.stored, tc.shared)
		}
		for _, b := range [][]byte{stored, shared} {
			got, err := DecodeFrame(b)
			if err != nil || got.Hash != tc.f.Hash || !bytes.Equal(got.Attrs, tc.f.Attrs) || !got.HashMatches() {
				t.Fatalf("frame %d read back from %q: %+v %v", tc.f.Seq, b[0], got, err)
			}
		}
	}
}

// TestFrameListsReadBack: a list of shared frames, JSON and packed, reads
// back as those frames in order; one frame is its own value; DecodeFrame
// refuses a list, and a damaged list is refused as corrupt.
func TestFrameListsReadBack(t *testing.T) {
	db := openTest(t, nil)
	fs, err := db.AppendFrames(context.Background(), []FrameInput{
		{Kind: KindConsumed, AuditID: "au_list", Time: t0, Attrs: map[string]any{"step_id": "s1"}},
		{Kind: KindDecision, AuditID: "au_list", Time: t0, Attrs: bigAttrs()},
	})
	if err != nil {
		t.Fatal(err)
	}
	shared := [][]byte{EncodeFrame(&fs[0]), EncodeFrame(&fs[1])}
	if shared[0][0] != '{' || shared[1][0] != packDeflate {
		t.Fatalf("forms %q and %q, want JSON and DEFLATE", shared[0][0], shared[1][0])
	}
	if one := EncodeFrameList(shared[:1]); !bytes.Equal(one, shared[0]) {
		t.Fatalf("a list of one frame is %q, want the frame itself", one)
	}
	list := EncodeFrameList(shared)
	got, err := DecodeFrameList(list)
	if err != nil || len(got) != 2 {
		t.Fatalf("DecodeFrameList: %d frames, %v", len(got), err)
	}
	for i := range got {
		if got[i].Seq != fs[i].Seq || got[i].Hash != fs[i].Hash || !got[i].HashMatches() {
			t.Fatalf("frame %d read back as %+v, want %+v", i, got[i], fs[i])
		}
	}
	if got, err := DecodeFrameList(shared[1]); err != nil || len(got) != 1 || got[0].Hash != fs[1].Hash {
		t.Fatalf("a single frame read as a list: %+v %v", got, err)
	}
	if _, err := DecodeFrame(list); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("DecodeFrame of a list: %v, want ErrCorrupt", err)
	}
	cases := map[string][]byte{
		"tag only":        {listTag},
		"one frame":       append(binary.AppendUvarint([]byte{listTag}, uint64(len(shared[0]))), shared[0]...),
		"length past end": list[:len(list)-1],
		"bad length":      {listTag, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"trailing byte":   append(bytes.Clone(list), 0x05),
		"damaged frame":   append(append(binary.AppendUvarint([]byte{listTag}, 2), "{}"...), list[1:]...),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeFrameList(b); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("DecodeFrameList: %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestPackDictionaryIsFrozen: the 0x02 frames already written read back
// only with these bytes; a new dictionary needs a new marker.
func TestPackDictionaryIsFrozen(t *testing.T) {
	const want = "a7f36014c648a128b499ab79e1e22e50ccc8bda35449e9311b60a51e1ad168fb"
	if got := fmt.Sprintf("%x", sha256.Sum256(packDict1Text)); got != want || packDict1 == nil {
		t.Fatalf("packdict1.txt is sha256 %s (dictionary %v), want %s: restore it", got, packDict1 != nil, want)
	}
}

// TestPackOnlyWhatShrinks: attrs below the threshold, or that compress
// poorly, are stored as JSON.
func TestPackOnlyWhatShrinks(t *testing.T) {
	// Random bytes, which mustJSON writes as base64: six bits of entropy per
	// byte, so no packing can take a quarter off.
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
			s2, deflate := packAttrs(tc.attrs) != nil, deflateAttrs(tc.attrs) != nil
			if s2 != tc.packed || deflate != tc.packed {
				t.Fatalf("packed %v (s2) and %v (deflate), want %v (%d bytes)", s2, deflate, tc.packed, len(tc.attrs))
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

// BenchmarkPackAttrs is the packing of a one-step preflight's attrs, as the
// log stores it and as replicas share it.
func BenchmarkPackAttrs(b *testing.B) {
	// Decisions none of whose frames went into packdict1.txt; their test
	// ids did, so these S2 sizes are lower than a live log's.
	for _, name := range []string{"echo_no_session", "refund_model_high_risk"} {
		raw, err := os.ReadFile("../internal/httpapi/testdata/golden/" + name + ".json")
		if err != nil {
			b.Skip(err)
		}
		rec := PreflightRecord{Binding: testBinding("pf_bench", "tool.echo"), Decision: raw, Time: t0,
			Submit: &SubmitAttrs{Attempt: 1, RequestDigest: "sha256:x"}}
		attrs, err := EncodeAttrs(rec.attrs())
		if err != nil {
			b.Fatal(err)
		}
		for _, form := range []struct {
			name string
			pack func([]byte) []byte
		}{{"s2", packAttrs}, {"deflate", deflateAttrs}} {
			b.Run(name+"/"+form.name, func(b *testing.B) {
				b.ReportAllocs()
				var n int
				for b.Loop() {
					n = len(form.pack(attrs))
				}
				b.ReportMetric(float64(len(attrs)), "attrs-bytes")
				b.ReportMetric(float64(n), "packed-bytes")
			})
		}
	}
}
