package wal

import "context"

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
