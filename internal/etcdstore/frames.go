package etcdstore

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/contractrefine/autonomy/wal"
)

// copyFrames writes copies of frames this replica logged, so every
// replica's audit join has them, and returns once they are committed. The
// copies of concurrent calls share transactions (copier): one call alone
// waits for one round trip, as with a transaction of its own.
func (s *Store) copyFrames(ctx context.Context, frames []wal.Frame) error {
	if len(frames) == 0 {
		return nil
	}
	req := &copyRequest{frames: frames, done: make(chan error, 1)}
	select {
	case s.copies <- req:
	case <-ctx.Done():
		return fmt.Errorf("%w: %v", ErrUnavailable, ctx.Err())
	case <-s.bg.Done():
		return fmt.Errorf("%w: store closed", ErrUnavailable)
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		// The copy may still commit; the caller answers 503 either way.
		return fmt.Errorf("%w: %v", ErrUnavailable, ctx.Err())
	}
}

// maxCopyOps bounds the puts of one copy transaction: etcd refuses a
// transaction of more than --max-txn-ops (128 by default).
const maxCopyOps = 128

// copiers is how many copy transactions may be in flight at once: while
// one commits, the next gathers the copies that arrive meanwhile.
const copiers = 2

// copyRequest is one call's frames waiting for their copy transaction.
type copyRequest struct {
	frames []wal.Frame
	done   chan error
}

// copier gathers the copy requests waiting when it is free, up to
// maxCopyOps frames, and writes them in one transaction (group commit);
// every request of it gets that transaction's error. It runs until the
// store is closed.
func (s *Store) copier() {
	var next *copyRequest
	for {
		batch := make([]*copyRequest, 0, 8)
		if next != nil {
			batch, next = append(batch, next), nil
		} else {
			select {
			case r := <-s.copies:
				batch = append(batch, r)
			case <-s.bg.Done():
				return
			}
		}
		n := len(batch[0].frames)
	gather:
		for n < maxCopyOps {
			select {
			case r := <-s.copies:
				if n+len(r.frames) > maxCopyOps {
					next = r
					break gather
				}
				batch = append(batch, r)
				n += len(r.frames)
			default:
				break gather
			}
		}
		err := s.writeCopies(batch, n)
		for _, r := range batch {
			r.done <- err
		}
	}
}

// writeCopies puts the frames of batch, n of them, in one transaction.
func (s *Store) writeCopies(batch []*copyRequest, n int) error {
	return s.withLease(s.bg, func(lease clientv3.LeaseID) error {
		ops := make([]clientv3.Op, 0, n)
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
