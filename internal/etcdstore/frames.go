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
	for i := range frames {
		req.bytes += copyBytes(&frames[i])
	}
	s.copyMu.Lock()
	s.pending = append(s.pending, req)
	s.copyMu.Unlock()
	s.wakeCopier()
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		// The copy may still commit; the caller answers 503 either way.
		return fmt.Errorf("%w: %v", ErrUnavailable, ctx.Err())
	case <-s.bg.Done():
		// Closed: a copier that has returned answers nothing queued
		// after it drained.
		return fmt.Errorf("%w: store closed", ErrUnavailable)
	}
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

// maxCopyOps and maxCopyBytes bound one copy transaction: etcd refuses a
// transaction of more than --max-txn-ops puts (128 by default) or a
// request of more than --max-request-bytes (1.5 MiB by default), and one
// refused transaction would fail every call it carries.
const (
	maxCopyOps   = 128
	maxCopyBytes = 1 << 20
)

// copiers is how many copy transactions may be in flight at once: while
// one commits, the next gathers the copies that arrive meanwhile.
const copiers = 2

// copyRequest is one call's frames waiting for their copy transaction.
type copyRequest struct {
	frames []wal.Frame
	bytes  int // copyBytes of the frames
	done   chan error
}

// wakeCopier tells a free copier that copies wait.
func (s *Store) wakeCopier() {
	select {
	case s.copyWake <- struct{}{}:
	default:
	}
}

// takeCopies removes from the queue the requests one transaction takes:
// the oldest, then the next while their frames fit in maxCopyOps and
// maxCopyBytes (a request alone may have more; it then has a transaction
// of its own), and their count of frames.
func (s *Store) takeCopies() ([]*copyRequest, int) {
	s.copyMu.Lock()
	defer s.copyMu.Unlock()
	n, size, k := 0, 0, 0
	for k < len(s.pending) {
		r := s.pending[k]
		if k > 0 && (n+len(r.frames) > maxCopyOps || size+r.bytes > maxCopyBytes) {
			break
		}
		n, size = n+len(r.frames), size+r.bytes
		k++
	}
	batch := slices.Clone(s.pending[:k])
	s.pending = slices.Delete(s.pending, 0, k)
	if len(s.pending) > 0 {
		s.wakeCopier()
	}
	return batch, n
}

// copier writes the copies waiting when it is free, up to maxCopyOps
// frames, in one transaction (group commit); every request of it gets
// that transaction's error. It runs until the store is closed; requests
// still queued then get ErrUnavailable.
func (s *Store) copier() {
	for {
		select {
		case <-s.copyWake:
		case <-s.bg.Done():
			for {
				batch, _ := s.takeCopies()
				if len(batch) == 0 {
					return
				}
				for _, r := range batch {
					r.done <- fmt.Errorf("%w: store closed", ErrUnavailable)
				}
			}
		}
		for {
			batch, n := s.takeCopies()
			if len(batch) == 0 {
				break
			}
			err := s.writeCopies(batch, n)
			for _, r := range batch {
				r.done <- err
			}
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
