package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/contractrefine/autonomy/wal"
)

// A frame's copy is sent before the replica's own commit of the frame is
// on its disk (logAndCopy), so etcd may hold copies of seqs the log never
// got: when that commit failed (lose, dropper) or the process died before
// it ended (settleCrashCopies). Until they are settled the log is held
// (wal.ErrHeld): its next frame would take one of their seqs.

// copyIndex is the value of P r/<replica>/<seq>, put by every copy
// transaction under the lease of its copies: seq is the transaction's
// last, Frames the keys of the copies it carries, and BaseSeq and
// BaseHash the log's head before the newest commit among them. A copy a
// crash left belongs to the one commit that was going to the disk, whose
// base is the log's head when the process comes back. Instance names the
// log that wrote it (presence.go): two logs of one replica name can share
// a base (every empty log starts at the same one), not an instance.
type copyIndex struct {
	BaseSeq  uint64   `json:"base_seq"`
	BaseHash string   `json:"base_hash"`
	Frames   []string `json:"frames"`
	Instance string   `json:"instance,omitempty"`
}

// lose records, in the log's commit loop, that req's frames did not
// become durable: the log is held until the dropper has deleted them.
func (s *Store) lose(req *copyRequest) {
	s.dropMu.Lock()
	s.lost = append(s.lost, req)
	s.dropMu.Unlock()
}

// takeUpLost records, in the log's commit loop, that an answered lone
// consume's frames did not become durable in the log: the log is held
// until the dropper has taken them up from their copies.
func (s *Store) takeUpLost() {
	s.dropMu.Lock()
	s.takeUp = true
	s.dropMu.Unlock()
}

// wakeDropper tells the dropper that lost copies wait. It is called by
// the caller of a failed commit once it has its answer, so every lose of
// that commit came before.
func (s *Store) wakeDropper() {
	select {
	case s.dropWake <- struct{}{}:
	default:
	}
}

// dropper deletes the copies of failed local commits, retrying until etcd
// takes the delete, or takes up those of an answered lone consume
// (settleCrashCopies: they are the copies past the log's head), retrying
// until the log has them, then releases the log. It runs until the store
// is closed; a log still held then is settled when a store opens it again.
func (s *Store) dropper() {
	for {
		select {
		case <-s.dropWake:
		case <-s.bg.Done():
			return
		}
		s.dropMu.Lock()
		lost, takeUp := s.lost, s.takeUp
		s.lost, s.takeUp = nil, false
		s.dropMu.Unlock()
		if len(lost) == 0 && !takeUp {
			continue
		}
		// The copies of unanswered commits go first, so that what is
		// taken up past the head is only what was answered; the log is
		// released once both are settled.
		// A lost lone consume's transaction may still be applied: the fence
		// moves first, so it cannot be once the copies are deleted.
		for _, r := range lost {
			if r.fenced {
				if err := s.retry("move the fence of lone consumes", func() error { return s.moveFence(s.bg) }); err != nil {
					return
				}
				break
			}
		}
		var keys []string
		indexes := 0
		for _, r := range lost {
			// A copy still on its way would land after the delete.
			select {
			case <-r.done:
			case <-s.bg.Done():
				return
			}
			if r.taken != nil {
				var yes bool
				if err := s.retry("learn whether etcd took an approval's decision", func() (err error) {
					yes, err = r.taken(s.bg)
					return err
				}); err != nil {
					return
				}
				if yes {
					takeUp = true
					continue
				}
			}
			keys = append(s.copyKeys(keys, r.frames), r.index)
			indexes++
		}
		if len(keys) > 0 {
			if err := s.retry("delete the copies of a failed local commit", func() error { return s.deleteKeys(keys) }); err != nil {
				return
			}
			s.logger.Info("etcd: the copies of a failed local commit are deleted", "copies", len(keys)-indexes)
		}
		// A log that is not trusted writes nothing, and its owner must
		// act: the copies stay in etcd for it.
		if takeUp && s.log.Trusted() == nil {
			if err := s.retry("take up the copies of an answered consume", func() error { return s.settleCrashCopies(s.bg) }); err != nil {
				return
			}
			s.logger.Info("etcd: an answered consume's frames are taken up from their copies")
		}
		s.log.Release()
		s.logger.Info("etcd: the log appends again")
		s.appendHeldRefusals()
	}
}

// deleteKeys deletes keys, up to maxTxnOps in one transaction.
func (s *Store) deleteKeys(keys []string) error {
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	for chunk := range slices.Chunk(keys, maxTxnOps) {
		ops := make([]clientv3.Op, 0, len(chunk))
		for _, k := range chunk {
			if k != "" {
				ops = append(ops, clientv3.OpDelete(k))
			}
		}
		if _, err := s.thenTxn(s.bg, ops...); err != nil {
			return err
		}
	}
	return nil
}

// retry runs fn until it succeeds, waiting longer after each failure (up
// to a second: the log appends nothing meanwhile, so it should append
// again soon after etcd answers), and logs the first failure. It fails
// only once the store is closed.
func (s *Store) retry(what string, fn func() error) error {
	wait := 50 * time.Millisecond
	for try := 0; ; try++ {
		err := fn()
		if err == nil {
			return nil
		}
		if try == 0 {
			s.logger.Error("etcd: cannot "+what+"; appending nothing until it can", "err", err)
		}
		select {
		case <-time.After(wait):
		case <-s.bg.Done():
			return fmt.Errorf("%w: store closed", ErrUnavailable)
		}
		wait = min(2*wait, time.Second)
	}
}

// settleOnOpen holds the log and settles the copies a crash left past its
// head (settleCrashCopies), then releases it, in the background, retrying
// until etcd answers. Until then the log appends nothing (wal.ErrHeld).
// When the log is verified already, Open waits for the settling at most
// half the request timeout (and a second): a healthy etcd answers within
// it, so the log is released before Open returns, and one that does not
// answer leaves the replica to listen, unready, rather than wait it out.
func (s *Store) settleOnOpen() {
	s.log.Hold()
	settle := func() error {
		if err := s.log.Trusted(); err != nil {
			return err
		}
		// A lone consume the last process sent may still be applied: the
		// fence moves before the copies past the head are settled.
		if err := s.moveFence(s.bg); err != nil {
			return err
		}
		return s.settleCrashCopies(s.bg)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-s.log.Verified():
		case <-s.bg.Done():
			return
		}
		if s.log.Trusted() != nil {
			return // the log writes nothing anyway
		}
		if s.retry("settle the frame copies past the log's head", settle) == nil {
			head, _ := s.log.Head()
			s.log.Release()
			s.recopyAfterOpen(head)
			s.appendHeldRefusals()
		}
	}()
	select {
	case <-s.log.Verified():
		select {
		case <-done:
		case <-time.After(min(s.o.RequestTimeout/2, time.Second)):
		}
	default:
	}
}

// settleCrashCopies reads the copy indexes of this replica past the log's
// head. Those whose base is the head name the copies of the commit that
// was going to the disk when the process died: the copies that continue
// the chain exactly (seq head+1, head+2, …, each prev_hash the previous
// hash, each hash its contents') are appended to the log as they are
// (wal.DB.Adopt); the others, after a gap, are deleted with those indexes.
// Indexes of another base or another instance were not written by this
// log (another data directory under the same replica name): they are left
// alone and logged, and `autonomy wal check-store` reports their copies.
func (s *Store) settleCrashCopies(ctx context.Context) error {
	head, hash := s.log.Head()
	indexes, frameKeys, foreign, err := s.crashCopies(ctx, head, hash, 0)
	if err != nil || len(indexes)+foreign == 0 {
		return err
	}
	if len(indexes) == 0 {
		// Nothing this log sent: another data directory's under the same
		// replica name (a second process with this id, or a replica that
		// was given a fresh data directory), not a crash's.
		s.logger.Warn("etcd: frame copies another log wrote under this replica_id are past this log's head; left alone (autonomy wal check-store reports them)",
			"head", head, "left_alone", foreign)
		return nil
	}
	copies, runs, err := s.getFrames(ctx, frameKeys)
	if err != nil {
		return err
	}
	adopt := wholeRuns(head, s.continuing(head, hash, copies), runs)
	if err := s.log.Adopt(ctx, adopt); err != nil {
		return fmt.Errorf("etcdstore: take up the frame copies past the log's head: %w", err)
	}
	var drop []string
	for _, k := range frameKeys {
		if seq, _ := keySeq(k); seq > head+uint64(len(adopt)) {
			drop = append(drop, k)
		}
	}
	if err := s.deleteKeys(append(drop, indexes...)); err != nil {
		return err
	}
	s.logger.Warn("etcd: frame copies a crash left past the log's head", "head", head,
		"adopted", len(adopt), "dropped", len(drop), "left_alone", foreign)
	return nil
}

// crashCopies reads the copy indexes of this replica past the log's head
// (at revision rev, unless 0): the keys of those whose base is the head,
// the keys of the copies past the head they name, and how many indexes
// have another base.
func (s *Store) crashCopies(ctx context.Context, head uint64, hash string, rev int64) (indexes, frameKeys []string, foreign int, err error) {
	opts := []clientv3.OpOption{clientv3.WithRange(clientv3.GetPrefixRangeEnd(s.p.copyIndexes(s.o.Replica)))}
	if rev != 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	octx, cancel := s.opCtx(ctx)
	resp, err := s.cli.Get(octx, s.p.copyIndex(s.o.Replica, head+1), opts...)
	err = s.seen(octx, err)
	cancel()
	if err != nil {
		return nil, nil, 0, err
	}
	for _, kv := range resp.Kvs {
		var idx copyIndex
		if json.Unmarshal(kv.Value, &idx) != nil || idx.BaseSeq != head || idx.BaseHash != hash ||
			(idx.Instance != "" && s.instance != "" && idx.Instance != s.instance) {
			foreign++
			continue
		}
		indexes = append(indexes, string(kv.Key))
		for _, k := range idx.Frames {
			if seq, ok := keySeq(k); ok && seq > head {
				frameKeys = append(frameKeys, k)
			}
		}
	}
	return indexes, frameKeys, foreign, nil
}

// continuing is the longest run of copies that continues the log at head:
// seq head+1 and on, each linked to the one before and hashing to its
// hash, written by this replica.
func (s *Store) continuing(head uint64, hash string, copies map[uint64]wal.Frame) []wal.Frame {
	var run []wal.Frame
	for seq := head + 1; ; seq++ {
		f, ok := copies[seq]
		if !ok || f.PrevHash != hash || !f.HashMatches() || frameReplica(&f) != s.o.Replica {
			return run
		}
		run = append(run, f)
		hash = f.Hash
	}
}

// wholeRuns cuts adopt, the frames that continue the log at head, back
// to whole copies: the frames of a copy that continue the chain only in
// part (a damaged copy) are not taken up, nor any after them, and the
// copy is dropped with the others past them. runs maps each copy's first
// seq to its last (getFrames); copies never overlap.
func wholeRuns(head uint64, adopt []wal.Frame, runs map[uint64]uint64) []wal.Frame {
	end := head + uint64(len(adopt))
	for first, last := range runs {
		if first <= end && last > end {
			end = first - 1
		}
	}
	return adopt[:end-head]
}

// getFrames reads the frames of the copies under keys, by seq, and the
// seqs each copy holds, first to last; a key gone, holding what does not
// decode or whose first frame is not its seq's is left out.
func (s *Store) getFrames(ctx context.Context, keys []string) (map[uint64]wal.Frame, map[uint64]uint64, error) {
	out, runs := map[uint64]wal.Frame{}, map[uint64]uint64{}
	for chunk := range slices.Chunk(keys, maxTxnOps) {
		ops := make([]clientv3.Op, len(chunk))
		for i, k := range chunk {
			ops[i] = clientv3.OpGet(k)
		}
		resp, err := s.thenTxn(ctx, ops...)
		if err != nil {
			return nil, nil, err
		}
		for i, r := range resp.Responses {
			kvs := r.GetResponseRange().GetKvs()
			if len(kvs) == 0 {
				continue
			}
			fs, err := wal.DecodeFrameList(kvs[0].Value)
			if seq, _ := keySeq(chunk[i]); err == nil && fs[0].Seq == seq {
				for _, f := range fs {
					out[f.Seq] = f
					runs[seq] = max(runs[seq], f.Seq)
				}
			}
		}
	}
	return out, runs, nil
}

// keySeq is the seq a frame copy's or copy index's key ends with.
func keySeq(key string) (uint64, bool) {
	i := strings.LastIndexByte(key, '/')
	seq, err := strconv.ParseUint(key[i+1:], 16, 64)
	return seq, err == nil
}
