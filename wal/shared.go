package wal

import (
	"context"
	"encoding/binary"
	"fmt"
)

// A store that keeps the state apart from the log (a shared store such as
// etcd) still writes every frame here, the replica's record of proof, but
// not the state: these write the frames alone.

// AppendPreflight durably appends the autonomy.preflight frame of rec and
// nothing else: no binding index, session count or idempotency record.
func (db *DB) AppendPreflight(ctx context.Context, rec PreflightRecord) (Frame, error) {
	return db.AppendDecision(ctx, FrameInput{Kind: KindPreflight, AuditID: rec.Binding.AuditID, Time: rec.Time, Attrs: rec.attrs()})
}

// ConsumeFrames are the frames of a consume decided elsewhere, for
// AppendFrames: the autonomy.preflight_consumed frame when res spent a
// step, and r.Decision's frame when r.Decision is set. They hold no marker.
func (r *ConsumeRequest) ConsumeFrames(res ConsumeResult) []FrameInput {
	var ins []FrameInput
	if res.Status == Consumed {
		ins = append(ins, r.consumedFrame(res))
	}
	if r.Decision != nil {
		ins = append(ins, r.Decision(res))
	}
	return ins
}

// RepeatFrames are ConsumeFrames for a repeat whose first call left no
// autonomy.preflight_consumed frame in any log (a shared store that lost
// its answer after the marker committed): that consumed frame, then the
// repeat's decision, so the allow the repeat gives has its consume on
// record.
func (r *ConsumeRequest) RepeatFrames(res ConsumeResult) []FrameInput {
	return append([]FrameInput{r.consumedFrame(res)}, r.ConsumeFrames(res)...)
}

// AppendFrames durably appends ins in one commit.
func (db *DB) AppendFrames(ctx context.Context, ins []FrameInput) ([]Frame, error) {
	for i := range ins {
		var err error
		if ins[i], err = db.preEncode(ins[i]); err != nil {
			return nil, err
		}
	}
	var frames []Frame
	err := db.Update(ctx, func(tx *Tx) error {
		frames = frames[:0]
		for _, in := range ins {
			f, err := tx.Append(in)
			if err != nil {
				return err
			}
			frames = append(frames, f)
		}
		return nil
	})
	return frames, err
}

// EncodeFrame returns f as replicas share it: JSON, or DEFLATE-packed
// (0x01) when its attrs are large and shrink (doc.go), which a binary of
// either format version reads back with DecodeFrame.
func EncodeFrame(f *Frame) []byte {
	if p := deflateAttrs(f.Attrs); p != nil {
		return f.encodePacked(packDeflate, p)
	}
	return f.encode()
}

// SharedForm returns f, which the log stored as stored, as replicas share
// it (EncodeFrame): stored itself unless the log packed it in a form only
// format version 2 reads.
func SharedForm(f *Frame, stored []byte) []byte {
	if len(stored) > 0 && stored[0] == packS2Dict1 {
		return EncodeFrame(f)
	}
	return stored
}

// HashMatches reports whether f's hash is the one its contents and
// prev_hash give: a frame copied out of a log was not altered on the way.
func (f *Frame) HashMatches() bool { return f.hashMatches() }

// listTag opens a value that holds several frames as replicas share them
// (EncodeFrameList). A single frame starts with '{' or a packing marker
// (pack.go), never with it, so DecodeFrame refuses a list and
// DecodeFrameList reads either.
const listTag = 0x03

// EncodeFrameList returns the frames of shared, each as EncodeFrame or
// SharedForm gave it, as one value: the frame itself when there is one,
// otherwise listTag and each frame after its length (a uvarint).
func EncodeFrameList(shared [][]byte) []byte {
	if len(shared) == 1 {
		return shared[0]
	}
	n := 1
	for _, b := range shared {
		n += binary.MaxVarintLen64 + len(b)
	}
	out := append(make([]byte, 0, n), listTag)
	for _, b := range shared {
		out = binary.AppendUvarint(out, uint64(len(b)))
		out = append(out, b...)
	}
	return out
}

// DecodeFrameList parses a value EncodeFrameList wrote: one frame, or a
// list of them in the order they were given.
func DecodeFrameList(b []byte) ([]Frame, error) {
	if len(b) == 0 || b[0] != listTag {
		f, err := DecodeFrame(b)
		if err != nil {
			return nil, err
		}
		return []Frame{f}, nil
	}
	var out []Frame
	for rest := b[1:]; len(rest) > 0; {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)-k) {
			return nil, fmt.Errorf("%w: frame list with a bad length", ErrCorrupt)
		}
		f, err := DecodeFrame(rest[k : k+int(n)])
		if err != nil {
			return nil, err
		}
		out = append(out, f)
		rest = rest[k+int(n):]
	}
	if len(out) < 2 {
		return nil, fmt.Errorf("%w: frame list of %d frames", ErrCorrupt, len(out))
	}
	return out, nil
}
