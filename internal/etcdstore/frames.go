package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sort"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/contractrefine/autonomy/wal"
)

// copyFrames writes copies of frames this replica logged, so every
// replica's audit join has them, and returns once they are committed. The
// copies of concurrent calls share transactions (txns.go): one call alone
// waits for one round trip, as with a transaction of its own.
func (s *Store) copyFrames(ctx context.Context, frames []wal.Frame) error {
	if len(frames) == 0 {
		return nil
	}
	req := s.startCopy(frames[0].Seq-1, frames[0].PrevHash, frames, nil)
	err := s.copied(ctx, req)
	if err != nil {
		s.recopy(req)
	}
	return err
}

// recopy sends again, in the background, the copies of req once its
// transaction has ended in an error, retrying until etcd takes them or
// the store closes. Its frames are in the log (their commit succeeded),
// so without their copies the other replicas' audit joins would lack them
// for good; a copy sent twice puts the same bytes. A replica that stops
// first leaves them to `autonomy wal check-store` (frame_without_copy).
func (s *Store) recopy(req *copyRequest) {
	go func() {
		select {
		case <-req.done:
		case <-s.bg.Done():
			return
		}
		if req.err == nil {
			return // the copy was on its way, and landed
		}
		if s.retry("copy frames whose copy failed", func() error {
			r := s.startCopy(req.baseSeq, req.baseHash, req.frames, req.stored)
			select {
			case <-r.done:
				return r.err
			case <-s.bg.Done():
				return s.bg.Err()
			}
		}) == nil {
			s.logger.Info("etcd: frames whose copy had failed are copied", "frames", len(req.frames), "first_seq", req.frames[0].Seq)
		}
	}()
}

// logAndCopy appends ins to the replica's log and copies them to etcd,
// and returns once both are durable. The copy is sent as soon as the
// frames' seqs and hashes are final, before the log's commit goes to the
// disk (wal.DB.AppendStaged), so its round trip overlaps the fsync. A
// local commit that fails after that holds the log until the copies are
// deleted (dropper); copies a crash left are settled when the store opens
// (doc.go, "Frames").
func (s *Store) logAndCopy(ctx context.Context, ins []wal.FrameInput) ([]wal.Frame, error) {
	frames, req, err := s.logSent(ctx, ins)
	if err != nil || req == nil {
		return frames, err
	}
	if err := s.copied(ctx, req); err != nil {
		s.recopy(req) // the frames are in the log: their copies must follow
		return frames, err
	}
	return frames, nil
}

// logSent appends ins to the replica's log, their copy sent as soon as
// their seqs and hashes are final, and returns once the log has them,
// with the copy's request (nil when nothing was appended).
func (s *Store) logSent(ctx context.Context, ins []wal.FrameInput) ([]wal.Frame, *copyRequest, error) {
	if err := s.owned(ctx); err != nil {
		return nil, nil, err
	}
	var req *copyRequest
	frames, err := s.log.AppendStaged(ctx, ins, wal.Staging{
		Sent: func(baseSeq uint64, baseHash string, fs []wal.Frame, stored [][]byte) {
			req = s.startCopy(baseSeq, baseHash, fs, stored)
			if s.afterSent != nil {
				s.afterSent()
			}
		},
		Lost: func() { s.lose(req) },
	})
	switch {
	case errors.Is(err, wal.ErrHeld):
		return nil, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	case err != nil:
		if req != nil {
			s.wakeDropper()
		}
		return nil, nil, err
	}
	return frames, req, nil
}

// AppendRefusal appends the frame of a 503 refusal to the log and returns
// once the log has it; its copy to etcd follows in the background (sent
// again until etcd takes it), since the answer it records is a 503
// whatever the copy does: waiting for a copy while etcd is away would hold
// the refusal another request timeout.
//
// A log held until copies are settled takes no frame: the refusal's frame
// waits in memory and is appended once the log is released (refusals.go).
func (s *Store) AppendRefusal(ctx context.Context, in wal.FrameInput) (wal.Frame, error) {
	frames, err := s.logRefusals(ctx, []wal.FrameInput{in})
	if errors.Is(err, wal.ErrHeld) {
		s.holdRefusal(in)
	}
	if err != nil || len(frames) != 1 {
		return wal.Frame{}, err
	}
	return frames[0], nil
}

// logRefusals appends the frames of refusals to the log and returns once
// the log has them; their copy goes on in the background (AppendRefusal).
func (s *Store) logRefusals(ctx context.Context, ins []wal.FrameInput) ([]wal.Frame, error) {
	frames, req, err := s.logSent(ctx, ins)
	if err == nil && req != nil {
		s.recopy(req)
	}
	return frames, err
}

// startCopy queues frames, appended to the log at base, for a copy
// transaction without waiting. stored, when not nil, holds each frame as
// the log stored it, which the copy sends in its shared form
// (wal.SharedForm: the same bytes but for a packed preflight frame).
func (s *Store) startCopy(baseSeq uint64, baseHash string, frames []wal.Frame, stored [][]byte) *copyRequest {
	req := &copyRequest{frames: frames, stored: stored, baseSeq: baseSeq, baseHash: baseHash, done: make(chan struct{})}
	for i := range frames {
		req.bytes += copyBytes(&frames[i])
	}
	s.txns.add(part{c: req})
	return req
}

// copied waits for req's copy transaction.
func (s *Store) copied(ctx context.Context, req *copyRequest) error {
	if _, err := await(ctx, s.txns, req.done); err != nil {
		// The copy may still commit; the caller answers 503 either way.
		return err
	}
	return req.err
}

// copyBytes bounds the bytes a frame's copy adds to a transaction: its
// attrs as stored unpacked, and room for its key and the other fields.
func copyBytes(f *wal.Frame) int { return len(f.Attrs) + len(f.AuditID) + 512 }

// copyRequest is one call's frames waiting for their copy transaction.
type copyRequest struct {
	frames []wal.Frame
	// stored is each frame as the log stored it; nil: encoded when sent.
	stored [][]byte
	bytes  int // copyBytes of the frames
	// baseSeq and baseHash are the log's head before the commit that
	// appended the frames.
	baseSeq  uint64
	baseHash string
	// index is the key of the transaction's copy index, set when it is
	// sent; err is its outcome, set before done is closed.
	index string
	err   error
	done  chan struct{}
	// fenced: the copies went in a lone consume's transaction, which the
	// replica's fence guards (fence.go): the dropper moves the fence
	// before it deletes them.
	fenced bool
	// taken, when set, tells the dropper whether etcd took the write its
	// copies went with, whose outcome the sender did not learn (an
	// approval's decision): its frames are then taken up, not deleted.
	taken func(context.Context) (bool, error)
}

// end tells the request's callers how its copy ended.
func (r *copyRequest) end(err error) {
	r.err = err
	close(r.done)
}

// countFrames is how many frames the requests carry.
func countFrames(rs []*copyRequest) int {
	n := 0
	for _, r := range rs {
		n += len(r.frames)
	}
	return n
}

// copyWrite is the puts of a batch's frame copies and of the copy index
// that names them (copyIndex), encoded once, before the lease is known:
// a retry under a new lease sends the same bytes.
type copyWrite struct {
	keys   [][]byte // the copies' keys, then the index's
	values [][]byte
}

// maxRun bounds the frames one copy holds, so the copy of a frame that
// is not under its own key is under one of the maxRun-1 keys before it
// (uncopied reads no more).
const maxRun = 16

// copyRuns yields the frames of fs that share one copy, as the bounds
// [i, j) of each run: consecutive frames of one audit id (a consume's
// autonomy.preflight_consumed and decision frames), at most maxRun, are
// one value under the first one's key (doc.go), one put where they would
// be one each.
func copyRuns(fs []wal.Frame) iter.Seq2[int, int] {
	return runs(len(fs), func(i int) string { return fs[i].AuditID })
}

// runs yields the runs copyRuns does of n frames whose audit ids auditID
// gives.
func runs(n int, auditID func(int) string) iter.Seq2[int, int] {
	return func(yield func(int, int) bool) {
		for i := 0; i < n; {
			j := i + 1
			for j < n && j-i < maxRun && auditID(j) == auditID(i) {
				j++
			}
			if !yield(i, j) {
				return
			}
			i = j
		}
	}
}

// copyPuts is how many puts the copies of fs take.
func copyPuts(fs []wal.Frame) int {
	return count(copyRuns(fs))
}

// inputRuns is how many puts the copies of the frames ins append take.
func inputRuns(ins []wal.FrameInput) int {
	return count(runs(len(ins), func(i int) string { return ins[i].AuditID }))
}

func count(seq iter.Seq2[int, int]) int {
	n := 0
	for range seq {
		n++
	}
	return n
}

// copyKeys appends the keys of the copies of fs, as encodeCopies names
// them, to keys.
func (s *Store) copyKeys(keys []string, fs []wal.Frame) []string {
	for i := range copyRuns(fs) {
		keys = append(keys, s.p.frame(fs[i].AuditID, s.o.Replica, fs[i].Seq))
	}
	return keys
}

// encodeCopies encodes the copies of batch and their index, and names
// the index in every request of batch. A frame the log stored goes as
// the log's bytes; the frames of one run (copyRuns) go as one value
// (wal.EncodeFrameList).
func (s *Store) encodeCopies(batch []*copyRequest) *copyWrite {
	n := countFrames(batch)
	idx := copyIndex{Frames: make([]string, 0, n), Instance: s.instance}
	w := &copyWrite{keys: make([][]byte, 0, n+1), values: make([][]byte, 0, n+1)}
	var last uint64
	// shared holds one run's frames at a time: EncodeFrameList returns a
	// new value, or the one frame's own bytes, never this slice.
	var shared [][]byte
	for _, r := range batch {
		if r.baseSeq >= idx.BaseSeq {
			idx.BaseSeq, idx.BaseHash = r.baseSeq, r.baseHash
		}
		for i, j := range copyRuns(r.frames) {
			f := &r.frames[i]
			k := s.p.appendFrame(nil, f.AuditID, s.o.Replica, f.Seq)
			w.keys = append(w.keys, k)
			idx.Frames = append(idx.Frames, string(k))
			shared = shared[:0]
			for x := i; x < j; x++ {
				if r.stored != nil {
					shared = append(shared, wal.SharedForm(&r.frames[x], r.stored[x]))
				} else {
					shared = append(shared, wal.EncodeFrame(&r.frames[x]))
				}
			}
			w.values = append(w.values, wal.EncodeFrameList(shared))
			last = max(last, r.frames[j-1].Seq)
		}
	}
	key := s.p.copyIndex(s.o.Replica, last)
	for _, r := range batch {
		r.index = key
	}
	v, _ := json.Marshal(&idx)
	w.keys, w.values = append(w.keys, []byte(key)), append(w.values, v)
	return w
}

// putsIn appends the puts of w under lease, in b, to ops.
func (w *copyWrite) putsIn(b *txnBuf, ops []*etcdserverpb.RequestOp, lease clientv3.LeaseID) []*etcdserverpb.RequestOp {
	for i, k := range w.keys {
		ops = append(ops, b.put(k, w.values[i], lease))
	}
	return ops
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
	// A frame copied twice (a copy sent again under its own key while its
	// first copy, in its consume's list, was on its way) is shown once.
	type written struct {
		replica, hash string
		seq           uint64
	}
	seen := map[written]bool{}
	for _, kv := range resp.Kvs {
		fs, err := wal.DecodeFrameList(kv.Value)
		if err != nil {
			return nil, err
		}
		for i := range fs {
			f := &fs[i]
			rep := frameReplica(f)
			w := written{rep, f.Hash, f.Seq}
			if seen[w] {
				continue
			}
			seen[w] = true
			if rep == s.o.Replica {
				own[f.Seq] = true
			}
			if keep(f) {
				all = append(all, replicaFrame{f: *f, replica: rep})
			}
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
