package wal

import (
	"context"
)

// Enqueue queues one frame for the next commit and returns without waiting
// for it to be durable. It is for frames no answer depends on: the gate's
// decision frames for denies, which change no state (see "Frames that
// change no state" in the package doc). The frame joins the commit loop's
// queue in order, so it shares the next commit with whatever durable writes
// are waiting; Close commits every queued frame before it returns, and Flush
// waits for the frames queued before it.
//
// It returns ErrClosed after Close, ErrFileGone when the log file was
// removed or replaced, and the error of the most recent commit when that
// commit failed; then nothing was queued, and a caller that must report
// write failures writes the frame with AppendDecision instead.
func (db *DB) Enqueue(in FrameInput) error {
	if p := db.lastErr.Load(); p != nil {
		return *p
	}
	// A removed or replaced file is found before queueing, as a waiting
	// write would find it, so the caller can still report it.
	if err := db.checkFile(); err != nil {
		return err
	}
	in, err := preEncode(in)
	if err != nil {
		return err
	}
	w := &write{fn: func(tx *Tx) error {
		_, err := tx.Append(in)
		return err
	}}
	db.mu.RLock()
	defer db.mu.RUnlock()
	if db.closed {
		return ErrClosed
	}
	db.queued.Add(1)
	db.queue <- w
	return nil
}

// Flush returns once every frame queued by Enqueue before the call has been
// committed (or has failed). Readers of the audit trail call it, so an
// answer's deny frame is visible to the next read; it costs nothing when
// nothing is queued.
func (db *DB) Flush(ctx context.Context) error {
	if db.queued.Load() == 0 {
		return nil
	}
	// The queue is first in, first out and the loop commits in order, so
	// once this empty write is answered everything queued before it is.
	return db.Update(ctx, func(*Tx) error { return nil })
}
