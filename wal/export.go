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
	written := 0
	var buf bytes.Buffer
	err := db.frames(ctx, filter, func(chunk []Frame) error {
		buf.Reset()
		for i := range chunk {
			b, err := encodeFrame(&chunk[i])
			if err != nil {
				return err
			}
			buf.Write(b)
			buf.WriteByte('\n')
		}
		if _, err := w.Write(buf.Bytes()); err != nil {
			return err
		}
		written += len(chunk)
		return nil
	})
	if err != nil {
		return written, fmt.Errorf("wal export: %w", err)
	}
	return written, nil
}

// Frames calls fn with each frame filter selects, in seq order; the frames
// are read in bounded read transactions and fn runs outside them.
func (db *DB) Frames(ctx context.Context, filter ExportFilter, fn func(*Frame) error) error {
	return db.frames(ctx, filter, func(chunk []Frame) error {
		for i := range chunk {
			if err := fn(&chunk[i]); err != nil {
				return err
			}
		}
		return nil
	})
}

// frames calls fn with the selected frames of each read transaction of up
// to exportChunk frames. A frame that does not decode ends the walk with
// its error, after fn has had the frames before it: on a damaged log those
// are what an operator can still take out.
func (db *DB) frames(ctx context.Context, filter ExportFilter, fn func([]Frame) error) error {
	next := filter.AfterSeq + 1
	var chunk []Frame
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		chunk = chunk[:0]
		done := false
		var bad error
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
					bad = fmt.Errorf("frame under key %x: %w", k, err)
					return nil
				}
				next = f.Seq + 1
				if filter.keeps(&f) {
					chunk = append(chunk, f)
				}
				k, v = c.Next()
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(chunk) > 0 {
			if err := fn(chunk); err != nil {
				return err
			}
		}
		if bad != nil {
			return bad
		}
		if done {
			return nil
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
