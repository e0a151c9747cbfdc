package wal

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
)

// VerifyReport is the result of Verify.
type VerifyReport struct {
	// Frames is how many frames were checked.
	Frames int `json:"frames"`
	// FirstSeq and LastSeq bound the frames present.
	FirstSeq uint64 `json:"first_seq"`
	LastSeq  uint64 `json:"last_seq"`
	// BadSeq is the first seq where the chain breaks, 0 when it holds.
	BadSeq uint64 `json:"bad_seq,omitempty"`
	// Problem says what is wrong at BadSeq.
	Problem string `json:"problem,omitempty"`
}

// OK reports whether the chain holds and every index record agrees with it.
func (r VerifyReport) OK() bool { return r.BadSeq == 0 && r.Problem == "" }

// Verify walks every frame in seq order and checks the hash chain: each
// frame decodes, its seq follows the previous one, its prev_hash is the
// previous frame's hash and its hash is right. It stops at the first break.
// The error is for failures to read the log, not for a broken chain.
func (db *DB) Verify(ctx context.Context) (VerifyReport, error) {
	var rep VerifyReport
	err := db.View(func(tx *Tx) error {
		var prev chainPoint
		if v := tx.btx.Bucket(bucketMeta).Get(keyBase); v != nil {
			if err := json.Unmarshal(v, &prev); err != nil {
				return fmt.Errorf("%w: base: %v", ErrCorrupt, err)
			}
		}
		c := tx.btx.Bucket(bucketFrames).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			seq := uint64(0)
			if len(k) == 8 {
				seq = binary.BigEndian.Uint64(k)
			}
			if rep.FirstSeq == 0 {
				rep.FirstSeq = seq
			}
			rep.LastSeq = seq
			bad := func(problem string) error {
				rep.BadSeq, rep.Problem = seq, problem
				return nil
			}
			f, err := DecodeFrame(v)
			switch {
			case len(k) != 8:
				return bad("malformed key")
			case err != nil:
				return bad(err.Error())
			case f.Seq != seq:
				return bad(fmt.Sprintf("frame says seq %d under key %d", f.Seq, seq))
			case seq != prev.Seq+1:
				return bad(fmt.Sprintf("seq %d follows %d", seq, prev.Seq))
			case f.PrevHash != prev.Hash:
				return bad("prev_hash does not match the previous frame's hash")
			case !f.hashMatches():
				return bad("hash does not match the frame's contents")
			}
			rep.Frames++
			prev = chainPoint{Seq: f.Seq, Hash: f.Hash}
		}
		var head chainPoint
		if v := tx.btx.Bucket(bucketMeta).Get(keyHead); v != nil {
			if err := json.Unmarshal(v, &head); err != nil {
				return fmt.Errorf("%w: head: %v", ErrCorrupt, err)
			}
		}
		if head.Seq != prev.Seq || head.Hash != prev.Hash {
			rep.BadSeq, rep.Problem = prev.Seq+1, fmt.Sprintf("head records seq %d but the log ends at %d", head.Seq, prev.Seq)
			return nil
		}
		return tx.verifyBindings(ctx, &rep)
	})
	return rep, err
}

// verifyBindings checks every compact binding record in the preflights
// index against the hash-chained frame it names. The record is what the gate
// reads, so an edited record (a later expiry, another kind) must not pass
// for a log that verifies.
func (tx *Tx) verifyBindings(ctx context.Context, rep *VerifyReport) error {
	c := tx.btx.Bucket(bucketPreflights).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		seq, ok := indexSeq(v)
		if !ok {
			rep.Problem = fmt.Sprintf("preflights index entry %q is malformed", k)
			return nil
		}
		if len(v) == 8 {
			continue // written before compact records: Binding reads the frame itself
		}
		bad := func(problem string) error {
			rep.BadSeq, rep.Problem = seq, fmt.Sprintf("binding index of %s: %s", k, problem)
			return nil
		}
		rec, err := decodeBindingRecord(string(k), v[8:])
		if err != nil {
			return bad(err.Error())
		}
		a, f, err := tx.preflightFrame(seq)
		if err != nil {
			return bad("its frame cannot be read: " + err.Error())
		}
		if f.Kind != KindPreflight || a.PreflightID != string(k) || f.AuditID != rec.AuditID ||
			a.Outcome != rec.Outcome || a.ActorID != rec.ActorID || a.Tenant != rec.Tenant ||
			!a.ExpiresAt.Equal(rec.ExpiresAt) || !slices.Equal(a.Steps, rec.Steps) {
			return bad("differs from its autonomy.preflight frame")
		}
	}
	return nil
}
