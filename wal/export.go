package wal

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// ExportFilter selects the frames Export writes. The zero value selects all.
type ExportFilter struct {
	// Since keeps frames whose timestamp is at or after it.
	Since time.Time
	// AfterSeq keeps frames with a greater seq, so a shipper can resume
	// where its previous export ended.
	AfterSeq uint64
	// Kinds keeps frames of these kinds; empty keeps every kind.
	Kinds []string
}

// exportChunk bounds how many frames one read transaction visits, so a long
// export never pins old pages of the file for its whole run.
const exportChunk = 1024

// Export writes the selected frames to w as JSON Lines, one frame per line
// in seq order, in the frame's own JSON shape (the shape GET /v1/audit
// returns), and reports how many it wrote. Frames are read in bounded read
// transactions and written outside them.
func (db *DB) Export(ctx context.Context, w io.Writer, filter ExportFilter) (int, error) {
	next := filter.AfterSeq + 1
	written := 0
	var buf bytes.Buffer
	for {
		if err := ctx.Err(); err != nil {
			return written, err
		}
		buf.Reset()
		n, done := 0, false
		err := db.View(func(tx *Tx) error {
			c := tx.btx.Bucket(bucketFrames).Cursor()
			start := seqKey(next)
			k, v := c.Seek(start[:])
			for visited := 0; visited < exportChunk; visited++ {
				if k == nil {
					done = true
					return nil
				}
				f, err := DecodeFrame(v)
				if err != nil {
					return fmt.Errorf("frame under key %x: %w", k, err)
				}
				next = f.Seq + 1
				if filter.keeps(&f) {
					b, err := encodeFrame(&f)
					if err != nil {
						return err
					}
					buf.Write(b)
					buf.WriteByte('\n')
					n++
				}
				k, v = c.Next()
			}
			return nil
		})
		if err != nil {
			return written, fmt.Errorf("wal export: %w", err)
		}
		if _, err := w.Write(buf.Bytes()); err != nil {
			return written, fmt.Errorf("wal export: %w", err)
		}
		written += n
		if done {
			return written, nil
		}
	}
}

func (filter *ExportFilter) keeps(f *Frame) bool {
	if len(filter.Kinds) > 0 && !slices.Contains(filter.Kinds, f.Kind) {
		return false
	}
	if !filter.Since.IsZero() {
		ts, err := time.Parse(TimestampFormat, f.Timestamp)
		if err != nil || ts.Before(filter.Since) {
			return false
		}
	}
	return true
}
