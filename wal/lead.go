package wal

import (
	"context"
	"fmt"
	"slices"
)

// A writer's lead. A store that sends a commit's frames elsewhere in the
// same request as another write of its own (etcd: a consume's marker and
// the copies of its frames in one transaction) needs their seqs and
// hashes before it sends, which only the writer leading the log can know:
// while it leads, nothing else commits. TryLead takes the lead when no
// commit runs or waits; its holder fixes its frames (Stage: exactly the
// frames and bytes its commit then stores), sends them, and then commits
// them (Commit), lets go without writing (Release), or, when it cannot
// know whether they were taken elsewhere, holds the log (Lose) as a failed
// staged commit does (staged.go), until its owner has withdrawn them and
// calls Release. Writes that arrive meanwhile queue for the commit loop,
// waiting as long as the holder leads: only a writer alone should take it.

// Lead is the log's lead, held by one writer until Commit, Release or
// Lose, exactly one of which it calls.
type Lead struct {
	db   *DB
	head chainPoint // the log's head: what the staged frames follow
	last chainPoint // the head once they are committed
	w    *write     // the staged frames' write; its stage has no Sent
}

// TryLead takes the log's lead when no commit runs or waits and the log
// takes writes; otherwise it returns false and the caller writes as
// usual (which tells it why the log refuses, if it does).
func (db *DB) TryLead() (*Lead, bool) {
	if db.Trusted() != nil || db.held.Load() {
		return nil, false
	}
	db.mu.RLock()
	defer db.mu.RUnlock()
	if db.closed {
		return nil, false
	}
	select {
	case db.slots <- struct{}{}:
	default:
		return nil, false
	}
	if db.beforeLead != nil {
		db.beforeLead()
	}
	db.wmu.Lock()
	lone := !db.leading
	db.leading = true
	db.wmu.Unlock()
	if !lone {
		<-db.slots
		return nil, false
	}
	lead, err := db.newLead()
	return lead, err == nil
}

// newLead is the lead of the writer that has just taken it (a slot, and
// leading set for it). A commit that failed after the writer's first look
// at the hold set the hold before it let go of the lead: a lead taken now
// would stage at the seqs whose copies are being withdrawn, so it is given
// back and the writer told ErrHeld.
func (db *DB) newLead() (*Lead, error) {
	lead := &Lead{db: db, head: db.head, last: db.head, w: &write{stage: &stage{}, done: make(chan error, 1)}}
	if db.held.Load() {
		lead.Release()
		return nil, ErrHeld
	}
	return lead, nil
}

// Lead is TryLead for a writer that may wait: when a commit runs or writes
// wait, it queues for the lead, which the one leading hands it before the
// next batch, and waits until ctx ends. A writer that cannot send its
// frames with another write of its own at a busy time (an approval's
// decision and its frame's copy in one transaction) takes it so.
func (db *DB) Lead(ctx context.Context) (*Lead, error) {
	if lead, ok := db.TryLead(); ok {
		return lead, nil
	}
	if err := db.Trusted(); err != nil {
		return nil, err
	}
	if db.held.Load() {
		return nil, ErrHeld
	}
	db.mu.RLock()
	if db.closed {
		db.mu.RUnlock()
		return nil, ErrClosed
	}
	select {
	case db.slots <- struct{}{}:
	case <-ctx.Done():
		db.mu.RUnlock()
		return nil, ctx.Err()
	}
	db.wmu.Lock()
	if !db.leading { // it was let go meanwhile
		db.leading = true
		db.wmu.Unlock()
		db.mu.RUnlock()
		return db.newLead()
	}
	ch := make(chan struct{})
	db.leadWants = append(db.leadWants, ch)
	db.wmu.Unlock()
	db.mu.RUnlock()
	select {
	case <-ch:
		return db.newLead()
	case <-ctx.Done():
	}
	db.wmu.Lock()
	if i := slices.Index(db.leadWants, ch); i >= 0 {
		db.leadWants = slices.Delete(db.leadWants, i, i+1)
		db.wmu.Unlock()
		<-db.slots
		return nil, ctx.Err()
	}
	db.wmu.Unlock()
	<-ch // handed over meanwhile: give it back
	if lead, err := db.newLead(); err == nil {
		lead.Release()
	}
	return nil, ctx.Err()
}

// handOff gives the lead to the oldest writer waiting in Lead, if any, and
// reports whether it did: leading stays set, for that writer now. wmu is
// held.
func (db *DB) handOff() bool {
	if len(db.leadWants) == 0 {
		return false
	}
	ch := db.leadWants[0]
	db.leadWants = slices.Delete(db.leadWants, 0, 1)
	close(ch)
	return true
}

// Head is the seq and hash of the log's newest frame, which the staged
// frames follow.
func (l *Lead) Head() (seq uint64, hash string) { return l.head.Seq, l.head.Hash }

// Stage fixes the frames ins append after the head, and each frame as the
// log then stores it (EncodeFrame's bytes, not to be modified), exactly as
// AppendStaged's commit would make them. lost, when set, is called when
// they are lost (Lose, or Commit failing); the log is held from then
// until Release.
func (l *Lead) Stage(ins []FrameInput, lost func()) ([]Frame, [][]byte, error) {
	sg := &stage{Staging: Staging{Lost: lost}}
	at := l.head
	for _, in := range ins {
		in, err := l.db.preEncode(in)
		if err != nil {
			return nil, nil, err
		}
		f, stored, err := chainFrame(in, at, l.db.replica)
		if err != nil {
			return nil, nil, err
		}
		sg.frames = append(sg.frames, f)
		sg.stored = append(sg.stored, stored)
		at = chainPoint{Seq: f.Seq, Hash: f.Hash}
	}
	l.w.stage, l.last = sg, at
	return sg.frames, sg.stored, nil
}

// Commit durably appends the staged frames as they were fixed, in one
// commit of the commit loop's, and lets go of the lead. When it fails
// with the frames not in the log, the log is held and the stage's lost
// was called before any other write commits.
func (l *Lead) Commit() error {
	db := l.db
	defer db.release()
	sg := l.w.stage
	l.w.fn = func(tx *Tx) error {
		for i := range sg.frames {
			if err := tx.putNext(&sg.frames[i], sg.stored[i]); err != nil {
				return err
			}
		}
		return nil
	}
	db.commit([]*write{l.w})
	err := <-l.w.done
	if err != nil && db.head != l.last {
		db.lost([]*write{l.w})
	}
	return err
}

// Release lets go of the lead without writing.
func (l *Lead) Release() {
	<-l.db.slots
	l.db.release()
}

// Lose holds the log, tells the stage's lost, and lets go of the lead:
// the staged frames may be elsewhere and the log will not have them.
// Without staged frames it is Release.
func (l *Lead) Lose() {
	if len(l.w.stage.frames) > 0 {
		l.db.lost([]*write{l.w})
	}
	l.Release()
}

// putNext stores f, fixed before the commit with its stored bytes, as the
// log's new head.
func (tx *Tx) putNext(f *Frame, stored []byte) error {
	if err := tx.continues(f); err != nil {
		return fmt.Errorf("wal: staged: %w", err)
	}
	return tx.put(f, stored)
}

// continues reports whether f comes right after the transaction's head.
func (tx *Tx) continues(f *Frame) error {
	if !tx.writing {
		return fmt.Errorf("write in a read-only transaction")
	}
	if f.Seq != tx.head.Seq+1 || f.PrevHash != tx.head.Hash {
		return fmt.Errorf("frame %d does not continue the log at seq %d", f.Seq, tx.head.Seq)
	}
	return nil
}
