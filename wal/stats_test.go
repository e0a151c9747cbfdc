package wal

import (
	"context"
	"maps"
	"testing"
	"time"
)

func TestStatsCountsTheLog(t *testing.T) {
	l := writeCompactLog(t, nil)
	st, err := l.db.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	wantKinds := map[string]int{KindPreflight: 5, KindConsumed: 2, KindDecision: 4}
	if st.Frames != 11 || st.FirstSeq != 1 || st.LastSeq != 11 || st.BaseSeq != 0 || !maps.Equal(st.ByKind, wantKinds) {
		t.Fatalf("frames: %+v", st)
	}
	if st.FirstTime != l.now.Add(-40*day).Format(TimestampFormat) || st.LastTime != l.now.Add(-day+time.Minute).Format(TimestampFormat) {
		t.Fatalf("time range %s .. %s", st.FirstTime, st.LastTime)
	}
	if st.Bindings != 5 || st.ConsumedMarkers != 2 || st.Sessions != 3 || st.IdempotencyKeys != 4 {
		t.Fatalf("index counts: %+v", st)
	}
	if st.FileBytes <= 0 || st.FrameBytes <= 0 || st.AvgFrameBytes != float64(st.FrameBytes)/11 ||
		st.FileBytesPerFrame != float64(st.FileBytes)/11 {
		t.Fatalf("sizes: %+v", st)
	}
	if _, err := l.db.Compact(context.Background(), l.now.Add(-30*day)); err != nil {
		t.Fatal(err)
	}
	st, err = l.db.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Frames != 5 || st.FirstSeq != 7 || st.BaseSeq != 6 || st.Bindings != 2 || st.Sessions != 2 {
		t.Fatalf("after compaction: %+v", st)
	}
}

func TestStatsOfEmptyLog(t *testing.T) {
	db := openTest(t, nil)
	st, err := db.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Frames != 0 || st.FirstSeq != 0 || st.AvgFrameBytes != 0 || st.FileBytes <= 0 || st.Path != db.Path() {
		t.Fatalf("empty log stats: %+v", st)
	}
}
