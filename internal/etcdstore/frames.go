package etcdstore

import (
	"context"
	"slices"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/contractrefine/autonomy/wal"
)

// copyFrames writes copies of frames this replica logged, so every
// replica's audit join has them, and returns once they are committed. The
// copies of concurrent calls share transactions (batcher): one call alone
// waits for one round trip, as with a transaction of its own.
func (s *Store) copyFrames(ctx context.Context, frames []wal.Frame) error {
	if len(frames) == 0 {
		return nil
	}
	req := &copyRequest{frames: frames, done: make(chan error, 1)}
	for i := range frames {
		req.bytes += copyBytes(&frames[i])
	}
	s.copies.add(req)
	err, waitErr := await(ctx, s.copies, req.done)
	if waitErr != nil {
		// The copy may still commit; the caller answers 503 either way.
		return waitErr
	}
	return err
}

// logAndCopy appends ins to the replica's log, then copies them to etcd,
// and returns once both are durable. The copy follows the local commit:
// a copy sent before the frames are on the replica's disk would, should
// the replica die in between, name a seq its log never had and that it
// then reuses for another frame (doc.go, "Frames").
func (s *Store) logAndCopy(ctx context.Context, ins []wal.FrameInput) ([]wal.Frame, error) {
	frames, err := s.log.AppendFrames(ctx, ins)
	if err != nil {
		return nil, err
	}
	return frames, s.copyFrames(ctx, frames)
}

// copyBytes bounds the bytes a frame's copy adds to a transaction: its
// attrs as stored unpacked, and room for its key and the other fields.
func copyBytes(f *wal.Frame) int { return len(f.Attrs) + len(f.AuditID) + 512 }

// copyRequest is one call's frames waiting for their copy transaction.
type copyRequest struct {
	frames []wal.Frame
	bytes  int // copyBytes of the frames
	done   chan error
}

// startCopier starts the batcher of the copies: a transaction takes the
// oldest call's frames, then the next calls' while they fit in maxTxnOps
// puts and maxTxnBytes.
func (s *Store) startCopier() *batcher[*copyRequest] {
	return startBatcher(s.bg,
		func(p []*copyRequest) ([]*copyRequest, []*copyRequest) {
			return splitPrefix(p, func(r *copyRequest) (int, int) { return len(r.frames), r.bytes })
		},
		func(batch []*copyRequest) {
			err := s.writeCopies(batch)
			for _, r := range batch {
				r.done <- err
			}
		},
		func(r *copyRequest, err error) { r.done <- err })
}

// writeCopies puts the frames of batch in one transaction.
func (s *Store) writeCopies(batch []*copyRequest) error {
	return s.withLease(s.bg, func(lease clientv3.LeaseID) error {
		var ops []clientv3.Op
		for _, r := range batch {
			for i := range r.frames {
				f := &r.frames[i]
				ops = append(ops, clientv3.OpPut(s.p.frame(f.AuditID, s.o.Replica, f.Seq), string(wal.EncodeFrame(f)), clientv3.WithLease(lease)))
			}
		}
		octx, cancel := s.opCtx(s.bg)
		defer cancel()
		_, err := s.cli.Txn(octx).Then(ops...).Commit()
		return s.seen(octx, err)
	})
}

// AppendDecision appends a frame to the replica's log and its copy to
// etcd; it returns once both are durable.
func (s *Store) AppendDecision(ctx context.Context, in wal.FrameInput) (wal.Frame, error) {
	fs, err := s.logAndCopy(ctx, []wal.FrameInput{in})
	if err != nil || len(fs) != 1 {
		return wal.Frame{}, err
	}
	return fs[0], nil
}

// AuditFrames returns the autonomy.preflight and autonomy.decision frames
// of auditID that any replica wrote: the copies in etcd, and this
// replica's own frames whose copies expired. They are sorted by timestamp,
// then replica, then seq, so every replica gives the same list.
func (s *Store) AuditFrames(ctx context.Context, auditID string) ([]wal.Frame, error) {
	return s.AuditFramesOf(ctx, auditID, nil)
}

// AuditFramesOf is AuditFrames for the given kinds; nil kinds are
// wal.DefaultAuditKinds.
func (s *Store) AuditFramesOf(ctx context.Context, auditID string, kinds []string) ([]wal.Frame, error) {
	if kinds == nil {
		kinds = wal.DefaultAuditKinds
	}
	return s.auditFrames(ctx, auditID, func(f *wal.Frame) bool { return slices.Contains(kinds, f.Kind) }, kinds)
}

type replicaFrame struct {
	f       wal.Frame
	replica string
	at      time.Time
}

func (s *Store) auditFrames(ctx context.Context, auditID string, keep func(*wal.Frame) bool, kinds []string) ([]wal.Frame, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(octx, s.p.frames(auditID), clientv3.WithPrefix())
	if err = s.seen(octx, err); err != nil {
		return nil, err
	}
	var all []replicaFrame
	own := map[uint64]bool{}
	for _, kv := range resp.Kvs {
		f, err := wal.DecodeFrame(kv.Value)
		if err != nil {
			return nil, err
		}
		rep := frameReplica(&f)
		if rep == s.o.Replica {
			own[f.Seq] = true
		}
		if keep(&f) {
			all = append(all, replicaFrame{f: f, replica: rep})
		}
	}
	local, err := s.log.AuditFramesOf(ctx, auditID, kinds)
	if err != nil {
		return nil, err
	}
	for _, f := range local {
		if !own[f.Seq] && keep(&f) {
			all = append(all, replicaFrame{f: f, replica: s.o.Replica})
		}
	}
	for i := range all {
		all[i].at, _ = time.Parse(wal.TimestampFormat, all[i].f.Timestamp)
	}
	sort.SliceStable(all, func(i, j int) bool {
		a, b := &all[i], &all[j]
		if !a.at.Equal(b.at) {
			return a.at.Before(b.at)
		}
		if a.replica != b.replica {
			return a.replica < b.replica
		}
		return a.f.Seq < b.f.Seq
	})
	out := make([]wal.Frame, len(all))
	for i := range all {
		out[i] = all[i].f
	}
	return out, nil
}

// frameReplica is the replica a frame names.
func frameReplica(f *wal.Frame) string {
	var r string
	f.Attr(wal.AttrReplica, &r)
	return r
}
