package wal

import (
	"bufio"
	"bytes"
	"context"
	"slices"
	"testing"
)

func TestExportFilters(t *testing.T) {
	l := writeCompactLog(t, nil)
	s := l.seqs
	tests := map[string]struct {
		filter ExportFilter
		want   []uint64
	}{
		"everything":          {want: []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
		"since 31 days ago":   {filter: ExportFilter{Since: l.now.Add(-31 * day)}, want: []uint64{s["D"], s["D.c"], s["D.d"], s["E"], s["E.d"]}},
		"preflights only":     {filter: ExportFilter{Kinds: []string{KindPreflight}}, want: []uint64{s["A"], s["B"], s["C"], s["D"], s["E"]}},
		"two kinds":           {filter: ExportFilter{Kinds: []string{KindConsumed, KindPreflight}, Since: l.now.Add(-2 * day)}, want: []uint64{s["E"]}},
		"resume after seq":    {filter: ExportFilter{AfterSeq: 9}, want: []uint64{10, 11}},
		"after the last seq":  {filter: ExportFilter{AfterSeq: 11}},
		"kind nobody writes":  {filter: ExportFilter{Kinds: []string{"autonomy.other"}}},
		"since in the future": {filter: ExportFilter{Since: l.now}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			n, err := l.db.Export(context.Background(), &out, tc.filter)
			if err != nil {
				t.Fatal(err)
			}
			got := exportedSeqs(t, out.Bytes())
			if n != len(got) || !slices.Equal(got, tc.want) {
				t.Fatalf("exported %d frames %v, want %v", n, got, tc.want)
			}
		})
	}
}

func TestExportCrossesReadChunks(t *testing.T) {
	db := openTest(t, nil)
	total := exportChunk*2 + 7
	if err := db.Update(context.Background(), func(tx *Tx) error {
		for i := range total {
			if _, err := tx.Append(FrameInput{Kind: KindDecision, AuditID: "au_bulk", Time: t0, Attrs: map[string]any{"i": i}}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	n, err := db.Export(context.Background(), &out, ExportFilter{})
	if err != nil {
		t.Fatal(err)
	}
	got := exportedSeqs(t, out.Bytes())
	if n != total || len(got) != total || got[0] != 1 || got[total-1] != uint64(total) {
		t.Fatalf("exported %d frames (%d lines), want %d", n, len(got), total)
	}
}

// exportedSeqs decodes JSON Lines output, checking every line is a whole
// frame whose chain hash still matches its contents.
func exportedSeqs(t *testing.T, out []byte) []uint64 {
	t.Helper()
	var seqs []uint64
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f, err := DecodeFrame(sc.Bytes())
		if err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if f.computeHash() != f.Hash {
			t.Fatalf("exported frame %d does not hash to its hash", f.Seq)
		}
		seqs = append(seqs, f.Seq)
	}
	return seqs
}

// TestExportUpToADamagedFrame: a frame that does not decode ends the export
// with an error naming it, after the frames before it were written.
func TestExportUpToADamagedFrame(t *testing.T) {
	l := writeCompactLog(t, nil)
	key := seqKey(5)
	if err := l.db.Update(context.Background(), func(tx *Tx) error {
		return tx.btx.Bucket(bucketFrames).Put(key[:], []byte(`{"seq":5,,`))
	}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	n, err := l.db.Export(context.Background(), &out, ExportFilter{})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("0000000000000005")) {
		t.Fatalf("export over a damaged frame: %v, want an error naming its key", err)
	}
	if got := exportedSeqs(t, out.Bytes()); n != 4 || !slices.Equal(got, []uint64{1, 2, 3, 4}) {
		t.Fatalf("exported %d frames %v before the damaged one, want 1 to 4", n, got)
	}
}
