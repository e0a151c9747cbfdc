package wal

import (
	"context"
	"fmt"
)

// Staged appends. A store that copies frames elsewhere (etcd) can send the
// copy while the log's own commit goes to the disk instead of after it:
// AppendStaged tells it the frames once their seqs and hashes are final,
// before bbolt writes and fsyncs the file. Two things then keep a copy from
// naming a seq the log gives another frame:
//
//   - A commit that fails after its frames were told holds the log: every
//     write fails with ErrHeld (Probe included) until the owner, having
//     deleted the copies, calls Release. The commit loop sets the hold
//     itself, before it answers any write of the failed commit, so no
//     later commit can reuse the seqs in between.
//   - A process killed between the copy and the fsync leaves copies of
//     seqs past the log's head. The owner, when it opens, holds the log
//     (Hold), reads them back, and takes up those that continue the chain
//     (Adopt) or deletes the others before it calls Release.

// Staging is told of one AppendStaged call's frames, in the commit loop.
// Neither function may block.
type Staging struct {
	// Sent is called once every write of the commit has run and before
	// the commit goes to the disk, with the chain point the commit appends
	// to (the log's head before it: baseSeq 0 and baseHash "" for an empty
	// log), this call's frames, which the commit then makes durable
	// unless it fails, and each frame as the log stores it (EncodeFrame's
	// bytes, not to be modified), so a copy need not encode it again.
	Sent func(baseSeq uint64, baseHash string, frames []Frame, stored [][]byte)
	// Lost, when set, is called when that commit then failed: the log is
	// held (ErrHeld) from then until Release.
	Lost func()
}

// stage is a write's Staging and the frames its function appended.
type stage struct {
	Staging
	frames []Frame
	stored [][]byte
}

// AppendStaged durably appends ins in one commit, as AppendFrames does,
// and tells st of the frames before the commit goes to the disk (see
// Staging). When it returns an error after st.Sent was called, st.Lost was
// called too and the log is held.
func (db *DB) AppendStaged(ctx context.Context, ins []FrameInput, st Staging) ([]Frame, error) {
	for i := range ins {
		var err error
		if ins[i], err = db.preEncode(ins[i]); err != nil {
			return nil, err
		}
	}
	sg := &stage{Staging: st}
	err := db.enqueue(ctx, &write{stage: sg, fn: func(tx *Tx) error {
		sg.frames, sg.stored = sg.frames[:0], sg.stored[:0]
		for _, in := range ins {
			f, stored, err := tx.append(in)
			if err != nil {
				return err
			}
			sg.frames = append(sg.frames, f)
			sg.stored = append(sg.stored, stored)
		}
		return nil
	}})
	if err != nil {
		return nil, err
	}
	return sg.frames, nil
}

// sent tells every staged write of batch its frames and reports whether
// there was one.
func (db *DB) sent(batch []*write, base chainPoint) bool {
	told := false
	for _, w := range batch {
		if w.stage != nil && w.stage.Sent != nil && len(w.stage.frames) > 0 {
			w.stage.Sent(base.Seq, base.Hash, w.stage.frames, w.stage.stored)
			told = true
		}
	}
	return told
}

// lost holds the log after a commit whose frames were sent failed, and
// tells the staged writes of batch.
func (db *DB) lost(batch []*write) {
	db.held.Store(true)
	db.log.Error("wal: a commit whose frames were sent elsewhere failed; writes held until they are withdrawn")
	for _, w := range batch {
		if w.stage != nil && w.stage.Lost != nil && len(w.stage.frames) > 0 {
			w.stage.Lost()
		}
	}
}

// refuseHeld answers ErrHeld to the writes of batch a hold refuses and
// returns the others.
func (db *DB) refuseHeld(batch []*write) []*write {
	if !db.held.Load() {
		return batch
	}
	kept := batch[:0]
	for _, w := range batch {
		if w.adopt {
			kept = append(kept, w)
		} else {
			db.answer(w, ErrHeld)
		}
	}
	return kept
}

// Refuses reports why the log would refuse a write now (not yet
// verified or failed verification, held), or nil; it writes nothing. A
// store that must not spend shared state it cannot then record asks
// first.
func (db *DB) Refuses() error {
	if err := db.Trusted(); err != nil {
		return err
	}
	if db.held.Load() {
		return ErrHeld
	}
	return nil
}

// Hold makes every write fail with ErrHeld, except Adopt's, until Release.
func (db *DB) Hold() { db.held.Store(true) }

// Release ends a hold (Hold, or a failed commit's whose frames were sent).
func (db *DB) Release() { db.held.Store(false) }

// Adopt durably appends frames written elsewhere as they are: each must
// continue the log (seq one past its head, prev_hash its head's hash) and
// hash to its hash, or nothing is appended. It is let through a hold: the
// owner of a held log takes up the copies a crash left with it.
func (db *DB) Adopt(ctx context.Context, frames []Frame) error {
	if len(frames) == 0 {
		return nil
	}
	return db.enqueue(ctx, &write{adopt: true, fn: func(tx *Tx) error {
		for i := range frames {
			if err := tx.adopt(&frames[i]); err != nil {
				return err
			}
		}
		return nil
	}})
}

// adopt appends f as it is, once it continues the chain.
func (tx *Tx) adopt(f *Frame) error {
	if err := tx.continues(f); err != nil {
		return fmt.Errorf("wal: adopt: %w", err)
	}
	if !f.hashMatches() {
		return fmt.Errorf("%w: adopt: frame %d does not hash to its hash", ErrCorrupt, f.Seq)
	}
	if err := f.checkAttrs(); err != nil {
		return err
	}
	return tx.put(f, EncodeFrame(f))
}
