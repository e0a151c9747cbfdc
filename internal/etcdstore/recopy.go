package etcdstore

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/contractrefine/autonomy/wal"
)

// A decision or outcome frame whose copy failed is sent again in the
// background while the replica runs (recopy); a replica that stops before
// that would leave the frame in its own log only, missing from the other
// replicas' audit joins for good. So once the log is settled at open, the
// replica looks at its newest decision and outcome frames, up to
// recopyWindow of them and younger than record_ttl (less the check's
// margin), and sends again the copies etcd lacks. Only these two kinds:
// they are records of what a caller was told, with no state of their own
// in etcd. A preflight, consumed or approval frame without its copy had
// its etcd write fail, and its caller was refused: such a frame must stay
// out of the other replicas' joins, as check-store reports it.

// recopyWindow bounds how many of the log's newest frames are looked at.
const recopyWindow = 1 << 16

// recopyKinds are the kinds whose copies are sent again at open.
var recopyKinds = []string{wal.KindDecision, wal.KindOutcome}

// recopyAfterOpen runs recopyTail up to the log's head as it was released
// (upTo), in the background, retrying while etcd cannot answer; the log
// goes on appending meanwhile. The frames past upTo are this process's:
// their copies are on their way or sent again by recopy, and a copy
// still on its way must not be taken for a missing one (the decision it
// carries in its consume's copy would be copied twice, under two keys).
func (s *Store) recopyAfterOpen(upTo uint64) {
	go func() {
		wait := 50 * time.Millisecond
		for try := 0; ; try++ {
			if s.log.Trusted() != nil {
				return
			}
			err := s.recopyTail(s.bg, upTo)
			if err == nil {
				return
			}
			if try == 0 {
				s.logger.Warn("etcd: cannot yet copy the frames whose copy failed before the last stop; retrying", "err", err)
			}
			select {
			case <-time.After(wait):
			case <-s.bg.Done():
				return
			}
			wait = min(2*wait, time.Second)
		}
	}()
}

// errPastUpTo ends recopyTail's walk of the log at its bound.
var errPastUpTo = errors.New("etcdstore: past the frames to check")

// recopyTail sends again the copies etcd lacks of the newest decision and
// outcome frames of this replica's log, up to seq upTo.
func (s *Store) recopyTail(ctx context.Context, upTo uint64) error {
	var after uint64
	if upTo > recopyWindow {
		after = upTo - recopyWindow
	}
	since := s.now().Add(-s.o.RecordTTL + min(checkMargin, s.o.RecordTTL/2))
	var batch, missing []wal.Frame
	lacking := func() error {
		if len(batch) == 0 {
			return nil
		}
		lost, err := s.uncopied(ctx, batch)
		missing = append(missing, lost...)
		batch = batch[:0]
		return err
	}
	err := s.log.Frames(ctx, wal.ExportFilter{AfterSeq: after, Since: since, Kinds: recopyKinds}, func(f *wal.Frame) error {
		switch {
		case f.Seq > upTo:
			return errPastUpTo
		case frameReplica(f) != s.o.Replica:
			return nil
		}
		if batch = append(batch, *f); len(batch) == maxTxnOps {
			return lacking()
		}
		return nil
	})
	if err == nil || errors.Is(err, errPastUpTo) {
		err = lacking()
	}
	if err != nil || len(missing) == 0 {
		return err
	}
	// One copy request per frame: each names the head before it as its
	// base, which is below the log's head, so no crash settling ever
	// takes its index for the copies of a lost commit.
	reqs := make([]*copyRequest, len(missing))
	for i := range missing {
		reqs[i] = s.startCopy(missing[i].Seq-1, missing[i].PrevHash, missing[i:i+1], nil)
	}
	for _, r := range reqs {
		if err := s.copied(ctx, r); err != nil {
			return err
		}
	}
	s.logger.Info("etcd: frames whose copy had failed before the last stop are copied", "frames", len(missing),
		"first_seq", missing[0].Seq, "last_seq", missing[len(missing)-1].Seq)
	return nil
}

// uncopied returns the frames of fs whose copy etcd lacks. A frame's
// copy is under its own seq's key, or, when it follows frames of its
// audit id in one copy (copyRuns), in the value under that copy's first
// key, at most maxRun-1 seqs before its own. So each frame costs a count
// of its own key, and one that has none a read of the keys of its audit
// id and replica in those seqs: a bounded read, however many copies the
// audit id holds.
func (s *Store) uncopied(ctx context.Context, fs []wal.Frame) ([]wal.Frame, error) {
	ops := make([]clientv3.Op, len(fs))
	for i := range fs {
		ops[i] = clientv3.OpGet(s.p.frame(fs[i].AuditID, s.o.Replica, fs[i].Seq), clientv3.WithCountOnly())
	}
	resp, err := s.thenTxn(ctx, ops...)
	if err != nil {
		return nil, err
	}
	var misses []wal.Frame
	for i, r := range resp.Responses {
		if r.GetResponseRange().GetCount() == 0 {
			misses = append(misses, fs[i])
		}
	}
	if len(misses) == 0 {
		return nil, nil
	}
	ops = ops[:0]
	for i := range misses {
		f := &misses[i]
		from := f.Seq - min(f.Seq-1, maxRun-1)
		ops = append(ops, clientv3.OpGet(s.p.frame(f.AuditID, s.o.Replica, from),
			clientv3.WithRange(s.p.frame(f.AuditID, s.o.Replica, f.Seq))))
	}
	if resp, err = s.thenTxn(ctx, ops...); err != nil {
		return nil, err
	}
	var lost []wal.Frame
	for i, r := range resp.Responses {
		if !holds(r.GetResponseRange().GetKvs(), &misses[i]) {
			lost = append(lost, misses[i])
		}
	}
	return lost, nil
}

// holds reports whether a copy among kvs holds frame f.
func holds(kvs []*mvccpb.KeyValue, f *wal.Frame) bool {
	for _, kv := range kvs {
		fs, _ := wal.DecodeFrameList(kv.Value)
		for i := range fs {
			if fs[i].Seq == f.Seq && fs[i].Hash == f.Hash {
				return true
			}
		}
	}
	return false
}
