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

// AppendConsume durably appends, in one commit, the frames of a consume
// decided elsewhere: the autonomy.preflight_consumed frame when res spent a
// step, and r.Decision's frame when r.Decision is set. No marker is
// written.
func (db *DB) AppendConsume(ctx context.Context, r ConsumeRequest, res ConsumeResult) ([]Frame, error) {
	return db.AppendStaged(ctx, r.ConsumeFrames(res), nil)
}

// ConsumeFrames are the frames AppendConsume appends for res.
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

// AppendStaged durably appends ins in one commit, telling staged the
// frames once their seqs and hashes are final and before the commit goes
// to the disk (UpdateStaged); nil staged is told nothing. When staged was
// told and AppendStaged then fails, the frames it was told are not in the
// log.
func (db *DB) AppendStaged(ctx context.Context, ins []FrameInput, staged func([]Frame)) ([]Frame, error) {
	for i := range ins {
		var err error
		if ins[i], err = db.preEncode(ins[i]); err != nil {
			return nil, err
		}
	}
	var frames []Frame
	var tell func()
	if staged != nil {
		tell = func() { staged(frames) }
	}
	err := db.UpdateStaged(ctx, func(tx *Tx) error {
		frames = frames[:0]
		for _, in := range ins {
			f, err := tx.Append(in)
			if err != nil {
				return err
			}
			frames = append(frames, f)
		}
		return nil
	}, tell)
	return frames, err
}

// EncodeFrame returns f as the log stores it: JSON, or packed when its
// attrs are large and shrink (doc.go). DecodeFrame reads either back.
func EncodeFrame(f *Frame) []byte {
	if p := packAttrs(f.Attrs); p != nil {
		return f.encodePacked(p)
	}
	return f.encode()
}

// HashMatches reports whether f's hash is the one its contents and
// prev_hash give: a frame copied out of a log was not altered on the way.
func (f *Frame) HashMatches() bool { return f.hashMatches() }
