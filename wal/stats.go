package wal

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
)

// Stats describes the log's contents and size, for operators.
type Stats struct {
	Path string `json:"path"`
	// FileBytes is the size of the bbolt file. bbolt reuses the pages that
	// compaction frees but never shrinks the file.
	FileBytes int64 `json:"file_bytes"`
	// FormatVersion is the format the file records (doc.go): 1 for a log
	// written before the version key existed. A read-only open leaves an
	// older one as it is; a writable one (serve, wal compact) upgrades it.
	FormatVersion int `json:"format_version"`
	// Frames is how many frames the log holds; FirstSeq..LastSeq and
	// FirstTime..LastTime bound them (zero when it holds none).
	Frames    int    `json:"frames"`
	FirstSeq  uint64 `json:"first_seq"`
	LastSeq   uint64 `json:"last_seq"`
	FirstTime string `json:"first_time,omitempty"`
	LastTime  string `json:"last_time,omitempty"`
	// BaseSeq is the newest frame compaction removed, 0 when none was.
	BaseSeq uint64 `json:"base_seq"`
	// ByKind counts frames by kind.
	ByKind map[string]int `json:"by_kind"`
	// Bindings is how many preflight ids are indexed.
	Bindings        int `json:"bindings"`
	ConsumedMarkers int `json:"consumed_markers"`
	Sessions        int `json:"sessions"`
	IdempotencyKeys int `json:"idempotency_keys"`
	// FrameBytes is the total size of the encoded frames; AvgFrameBytes is
	// FrameBytes per frame and FileBytesPerFrame the file size per frame
	// (what one more frame costs on disk, page overhead included).
	FrameBytes        int64   `json:"frame_bytes"`
	AvgFrameBytes     float64 `json:"avg_frame_bytes"`
	FileBytesPerFrame float64 `json:"file_bytes_per_frame"`
}

// Stats walks the log and counts what it holds. It reads every frame, in
// one read transaction.
func (db *DB) Stats(ctx context.Context) (Stats, error) {
	st := Stats{Path: db.path, ByKind: map[string]int{}}
	err := db.View(func(tx *Tx) error {
		st.FormatVersion = 1
		if v, err := strconv.Atoi(string(tx.btx.Bucket(bucketMeta).Get(keyVersion))); err == nil {
			st.FormatVersion = v
		}
		if v := tx.btx.Bucket(bucketMeta).Get(keyBase); v != nil {
			var base chainPoint
			if err := json.Unmarshal(v, &base); err != nil {
				return fmt.Errorf("%w: base: %v", ErrCorrupt, err)
			}
			st.BaseSeq = base.Seq
		}
		c := tx.btx.Bucket(bucketFrames).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if st.Frames%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			var f struct {
				Kind      string `json:"kind"`
				Timestamp string `json:"timestamp"`
			}
			if err := json.Unmarshal(frameHead(v), &f); err != nil {
				return fmt.Errorf("%w: frame under key %x: %v", ErrCorrupt, k, err)
			}
			seq := uint64(0)
			if len(k) == 8 {
				seq = binary.BigEndian.Uint64(k)
			}
			if st.Frames == 0 {
				st.FirstSeq, st.FirstTime = seq, f.Timestamp
			}
			st.LastSeq, st.LastTime = seq, f.Timestamp
			st.Frames++
			st.ByKind[f.Kind]++
			st.FrameBytes += int64(len(v))
		}
		st.Bindings = tx.btx.Bucket(bucketPreflights).Stats().KeyN
		var err error
		if st.ConsumedMarkers, err = tx.markerCount(ctx); err != nil {
			return err
		}
		st.Sessions = tx.btx.Bucket(bucketSessions).Stats().KeyN
		st.IdempotencyKeys = tx.btx.Bucket(bucketIdempotency).Stats().KeyN
		return nil
	})
	if err != nil {
		return st, fmt.Errorf("wal stats: %w", err)
	}
	if fi, err := os.Stat(db.path); err == nil {
		st.FileBytes = fi.Size()
	}
	if st.Frames > 0 {
		st.AvgFrameBytes = float64(st.FrameBytes) / float64(st.Frames)
		st.FileBytesPerFrame = float64(st.FileBytes) / float64(st.Frames)
	}
	return st, nil
}
