package etcdstore

import (
	"context"
	"time"

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

// recopyAfterOpen runs recopyTail in the background, retrying while etcd
// cannot answer; the log goes on appending meanwhile.
func (s *Store) recopyAfterOpen() {
	go func() {
		wait := 50 * time.Millisecond
		for try := 0; ; try++ {
			if s.log.Trusted() != nil {
				return
			}
			err := s.recopyTail(s.bg)
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

// recopyTail sends again the copies etcd lacks of the newest decision and
// outcome frames of this replica's log.
func (s *Store) recopyTail(ctx context.Context) error {
	head, _ := s.log.Head()
	var after uint64
	if head > recopyWindow {
		after = head - recopyWindow
	}
	since := s.now().Add(-s.o.RecordTTL + min(checkMargin, s.o.RecordTTL/2))
	var batch, missing []wal.Frame
	lacking := func() error {
		if len(batch) == 0 {
			return nil
		}
		have, err := s.copiedSeqs(ctx, batch)
		if err != nil {
			return err
		}
		for _, f := range batch {
			if !have[f.Seq] {
				missing = append(missing, f)
			}
		}
		batch = batch[:0]
		return nil
	}
	err := s.log.Frames(ctx, wal.ExportFilter{AfterSeq: after, Since: since, Kinds: recopyKinds}, func(f *wal.Frame) error {
		if frameReplica(f) != s.o.Replica {
			return nil
		}
		if batch = append(batch, *f); len(batch) == maxTxnOps {
			return lacking()
		}
		return nil
	})
	if err == nil {
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

// copiedSeqs reads this replica's copies under the audit ids of fs, in one
// transaction, and returns the seqs they hold: a copy may hold several
// frames (copyRuns), so a frame's copy is not always under its own seq's
// key. A copy that does not decode counts for its key's seq.
func (s *Store) copiedSeqs(ctx context.Context, fs []wal.Frame) (map[uint64]bool, error) {
	var ops []clientv3.Op
	seen := map[string]bool{}
	for i := range fs {
		if id := fs[i].AuditID; !seen[id] {
			seen[id] = true
			ops = append(ops, clientv3.OpGet(s.p.replicaFrames(id, s.o.Replica), clientv3.WithPrefix()))
		}
	}
	resp, err := s.thenTxn(ctx, ops...)
	if err != nil {
		return nil, err
	}
	have := map[uint64]bool{}
	for _, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().GetKvs() {
			if seq, ok := keySeq(string(kv.Key)); ok {
				have[seq] = true
			}
			copied, _ := wal.DecodeFrameList(kv.Value)
			for _, f := range copied {
				have[f.Seq] = true
			}
		}
	}
	return have, nil
}
