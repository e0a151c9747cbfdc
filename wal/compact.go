package wal

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"
)

// bucketRetired counts, per repair session, how many of the session's
// autonomy.preflight frames compaction has already removed. It is created by
// the first compaction that needs it.
var bucketRetired = []byte("retired")

const defaultCompactChunk = 256

// Why compaction stopped where it did (CompactReport.StopReason).
const (
	// StopEnd: every frame was old enough and went.
	StopEnd = "end"
	// StopRetention: the first kept frame is not older than the cut-off.
	StopRetention = "retention"
	// StopLiveBinding: the first kept frame is a preflight whose binding had
	// not expired by the cut-off; it and everything after it stay, so its
	// consumed markers keep denying replays.
	StopLiveBinding = "live_binding"
)

// CompactReport says what one Compact removed.
type CompactReport struct {
	// Before is the cut-off: only frames older than it were candidates.
	Before time.Time `json:"before"`
	// Frames is how many frames were removed; FirstSeq..LastSeq is their
	// range (both 0 when none were).
	Frames   int    `json:"frames_removed"`
	FirstSeq uint64 `json:"first_seq_removed,omitempty"`
	LastSeq  uint64 `json:"last_seq_removed,omitempty"`
	// KeptFrom is the first seq left in the log, 0 when the log is empty.
	KeptFrom uint64 `json:"kept_from_seq"`
	// StopReason is StopEnd, StopRetention or StopLiveBinding.
	StopReason string `json:"stop_reason"`
	// Preflights, ConsumedMarkers, Sessions and IdempotencyKeys count the
	// index records removed with the frames.
	Preflights      int `json:"preflights_removed"`
	ConsumedMarkers int `json:"consumed_markers_removed"`
	Sessions        int `json:"sessions_removed"`
	IdempotencyKeys int `json:"idempotency_keys_removed"`
	// Transactions is how many commits the compaction took.
	Transactions int `json:"transactions"`
}

// Compact removes the oldest frames of the log, those written before
// before, with the index records that only they gave meaning to: their
// audit index entries, the preflights index entry and consumed markers of a
// removed autonomy.preflight frame, the idempotency records naming a removed
// preflight, and a repair session's attempt count once every preflight frame
// of the session is gone.
//
// It removes only a prefix of the log, so the hash chain stays verifiable
// from the "base" meta record (the newest removed frame's seq and hash). The
// prefix ends at the first frame that must stay: one not older than before,
// or an autonomy.preflight frame whose binding expires after before. So a
// preflight and its consumed markers outlive the binding they guard, and a
// replay of a live preflight id is still denied after any compaction.
//
// The work runs through Update in transactions of at most
// Options.CompactChunk frames, so concurrent checks wait for one short
// commit at most; a run that finds nothing to remove commits nothing.
// Compact is idempotent: running it again with the same cut-off removes
// nothing more.
func (db *DB) Compact(ctx context.Context, before time.Time) (CompactReport, error) {
	rep := CompactReport{Before: before.UTC()}
	// Compacting a log that failed verification could remove the frames
	// that show it (trust.go).
	if err := db.Trusted(); err != nil {
		return rep, err
	}
	limit := db.opts.CompactChunk
	if limit <= 0 {
		limit = defaultCompactChunk
	}
	// Most runs find nothing to remove; finding that out needs no commit.
	var probe compactChunk
	if err := db.View(func(tx *Tx) error { return tx.compactFrames(before, 0, &probe) }); err != nil {
		return rep, fmt.Errorf("compact wal: %w", err)
	}
	if probe.stop != "" {
		rep.StopReason, rep.KeptFrom = probe.stop, probe.keptFrom
		return rep, nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		var c compactChunk
		err := db.Update(ctx, func(tx *Tx) error {
			c = compactChunk{} // the function may run more than once
			return tx.compactFrames(before, limit, &c)
		})
		if err != nil {
			return rep, fmt.Errorf("compact wal: %w", err)
		}
		rep.Transactions++
		rep.add(&c)
		if c.stop != "" {
			rep.StopReason, rep.KeptFrom = c.stop, c.keptFrom
			break
		}
	}
	if rep.Preflights == 0 {
		return rep, nil
	}
	// Idempotency records name their preflight but are keyed by the
	// caller's key, so the orphans are found by a sweep, again in chunks.
	var from []byte
	for {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		var removed int
		var next []byte
		err := db.Update(ctx, func(tx *Tx) error {
			var err error
			removed, next, err = tx.sweepIdempotency(from, limit)
			return err
		})
		if err != nil {
			return rep, fmt.Errorf("compact wal idempotency records: %w", err)
		}
		rep.Transactions++
		rep.IdempotencyKeys += removed
		if next == nil {
			return rep, nil
		}
		from = next
	}
}

// compactChunk is what one compaction transaction did.
type compactChunk struct {
	frames, preflights, consumed, sessions int
	firstSeq, lastSeq                      uint64
	// stop is set when this chunk reached the first frame that stays (or
	// the end of the log); keptFrom is that frame's seq.
	stop     string
	keptFrom uint64
}

func (r *CompactReport) add(c *compactChunk) {
	if c.frames > 0 {
		if r.FirstSeq == 0 {
			r.FirstSeq = c.firstSeq
		}
		r.LastSeq = c.lastSeq
	}
	r.Frames += c.frames
	r.Preflights += c.preflights
	r.ConsumedMarkers += c.consumed
	r.Sessions += c.sessions
}

// compactFrames removes up to limit frames from the front of the log. With
// limit 0 it only looks: c.stop is set when the first frame must stay (or
// the log is empty), so there is nothing to remove.
func (tx *Tx) compactFrames(before time.Time, limit int, c *compactChunk) error {
	type removal struct {
		f     Frame
		attrs PreflightAttrs
	}
	var gone []removal
	cur := tx.btx.Bucket(bucketFrames).Cursor()
	k, v := cur.First()
	for ; k != nil; k, v = cur.Next() {
		f, err := DecodeFrame(v)
		if err != nil {
			return fmt.Errorf("frame under key %x: %w", k, err)
		}
		ts, _ := time.Parse(TimestampFormat, f.Timestamp) // DecodeFrame checked it
		if !ts.Before(before) {
			c.stop, c.keptFrom = StopRetention, f.Seq
			break
		}
		var a PreflightAttrs
		if f.Kind == KindPreflight {
			if a, err = f.Preflight(); err != nil {
				return err
			}
			if a.ExpiresAt.After(before) {
				c.stop, c.keptFrom = StopLiveBinding, f.Seq
				break
			}
		}
		if len(gone) == limit {
			break // this frame may go too, in the next transaction
		}
		gone = append(gone, removal{f: f, attrs: a})
	}
	if k == nil {
		c.stop = StopEnd
	}
	if len(gone) == 0 {
		return nil
	}

	frames := tx.btx.Bucket(bucketFrames)
	audit := tx.btx.Bucket(bucketAudit)
	preflights := tx.btx.Bucket(bucketPreflights)
	sessions := map[string]uint32{}
	for _, g := range gone {
		key := seqKey(g.f.Seq)
		if err := frames.Delete(key[:]); err != nil {
			return err
		}
		if g.f.AuditID != "" {
			if err := audit.Delete(auditKey(g.f.AuditID, g.f.Seq)); err != nil {
				return err
			}
		}
		if g.f.Kind != KindPreflight || g.attrs.PreflightID == "" {
			continue
		}
		// The index may name a later frame if an id was ever recorded twice;
		// only an entry pointing at this frame goes.
		if seq, ok := indexSeq(preflights.Get([]byte(g.attrs.PreflightID))); ok && seq == g.f.Seq {
			if err := preflights.Delete([]byte(g.attrs.PreflightID)); err != nil {
				return err
			}
			c.preflights++
			n, err := tx.deleteMarkers(g.f.AuditID, g.attrs.PreflightID)
			if err != nil {
				return err
			}
			if err := tx.deleteApprovals(g.attrs.PreflightID); err != nil {
				return err
			}
			c.consumed += n
		}
		// The key the frame's repair session was counted under: frames of
		// preflights without a session never released an attempt count.
		if g.attrs.SubmitAttrs != nil && g.attrs.SessionKey != "" {
			sessions[g.attrs.SessionKey]++
		}
	}
	n, err := tx.retireSessions(sessions)
	if err != nil {
		return err
	}
	c.sessions = n

	last := gone[len(gone)-1].f
	b, err := json.Marshal(chainPoint{Seq: last.Seq, Hash: last.Hash})
	if err != nil {
		return err
	}
	if err := tx.btx.Bucket(bucketMeta).Put(keyBase, b); err != nil {
		return err
	}
	c.frames, c.firstSeq, c.lastSeq = len(gone), gone[0].f.Seq, last.Seq
	return nil
}

// retireSessions adds removed preflight frames to each session's retired
// count and deletes a session's attempt count (and its retired count) once
// all of its preflight frames are gone. Each recorded attempt wrote exactly
// one preflight frame, so the two counts meeting means none is left.
func (tx *Tx) retireSessions(removed map[string]uint32) (int, error) {
	if len(removed) == 0 {
		return 0, nil
	}
	retired, err := tx.btx.CreateBucketIfNotExists(bucketRetired)
	if err != nil {
		return 0, err
	}
	sessions := tx.btx.Bucket(bucketSessions)
	deleted := 0
	for key, n := range removed {
		k := []byte(key)
		attempts := sessions.Get(k)
		total := sessionCount(retired.Get(k)) + n
		if attempts == nil || total >= sessionCount(attempts) {
			if attempts != nil {
				if err := sessions.Delete(k); err != nil {
					return 0, err
				}
				deleted++
			}
			if err := retired.Delete(k); err != nil {
				return 0, err
			}
			continue
		}
		var v [4]byte
		binary.BigEndian.PutUint32(v[:], total)
		if err := retired.Put(k, v[:]); err != nil {
			return 0, err
		}
	}
	return deleted, nil
}

// sweepIdempotency deletes, among up to limit idempotency records from key
// from on, those whose preflight is no longer indexed. next is where the
// following sweep starts, nil when the bucket is done.
func (tx *Tx) sweepIdempotency(from []byte, limit int) (removed int, next []byte, err error) {
	b := tx.btx.Bucket(bucketIdempotency)
	preflights := tx.btx.Bucket(bucketPreflights)
	var orphans [][]byte
	c := b.Cursor()
	var k, v []byte
	if from == nil {
		k, v = c.First()
	} else {
		k, v = c.Seek(from)
	}
	for seen := 0; k != nil && seen < limit; k, v = c.Next() {
		seen++
		var rec IdempotencyRecord
		if err := json.Unmarshal(v, &rec); err != nil {
			return 0, nil, fmt.Errorf("%w: idempotency record: %v", ErrCorrupt, err)
		}
		if rec.PreflightID != "" && preflights.Get([]byte(rec.PreflightID)) == nil {
			orphans = append(orphans, bytes.Clone(k))
		}
	}
	if k != nil {
		next = bytes.Clone(k)
	}
	for _, o := range orphans {
		if err := b.Delete(o); err != nil {
			return 0, nil, err
		}
	}
	return len(orphans), next, nil
}
