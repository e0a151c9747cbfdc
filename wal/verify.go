package wal

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
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

// OK reports whether the chain holds.
func (r VerifyReport) OK() bool { return r.BadSeq == 0 }

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
		}
		return nil
	})
	return rep, err
}
