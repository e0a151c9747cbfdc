package etcdstore

import (
	"context"
	"slices"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/contractrefine/autonomy/wal"
)

// copyFrames writes copies of frames this replica logged, in one request,
// so every replica's audit join has them.
func (s *Store) copyFrames(ctx context.Context, frames []wal.Frame) error {
	if len(frames) == 0 {
		return nil
	}
	return s.withLease(ctx, func(lease clientv3.LeaseID) error {
		ops := make([]clientv3.Op, len(frames))
		for i := range frames {
			f := &frames[i]
			ops[i] = clientv3.OpPut(s.p.frame(f.AuditID, s.o.Replica, f.Seq), string(wal.EncodeFrame(f)), clientv3.WithLease(lease))
		}
		octx, cancel := s.opCtx(ctx)
		defer cancel()
		_, err := s.cli.Txn(octx).Then(ops...).Commit()
		return s.seen(octx, err)
	})
}

// AppendDecision appends a frame to the replica's log and its copy to
// etcd; it returns once both are durable.
func (s *Store) AppendDecision(ctx context.Context, in wal.FrameInput) (wal.Frame, error) {
	f, err := s.log.AppendDecision(ctx, in)
	if err != nil {
		return f, err
	}
	return f, s.copyFrames(ctx, []wal.Frame{f})
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
