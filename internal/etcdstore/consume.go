package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/contractrefine/autonomy/wal"
)

// marker is P c/<id>/<step>.
type marker struct {
	RequestID  string `json:"request_id"`
	ArgsDigest string `json:"args_digest,omitempty"`
	At         string `json:"at"`
	Replica    string `json:"replica"`
}

// repeats reports whether r repeats the call that wrote m.
func (m *marker) repeats(r *wal.ConsumeRequest) bool {
	return r.RequestID != "" && m.RequestID == r.RequestID && m.ArgsDigest == r.CallDigest
}

// seenState is a binding's existence and markers as one read saw them.
type seenState struct {
	bound   bool
	markers map[int]marker
}

// plan decides what consuming r would do given st, as wal's plan does on
// the bbolt file.
func plan(r *wal.ConsumeRequest, st *seenState) wal.ConsumeResult {
	if !st.bound {
		return wal.ConsumeResult{Status: wal.Gone, StepIndex: -1}
	}
	free, matched := -1, false
	var spent []wal.SpentStep
	for i := range r.Binding.Steps {
		step := &r.Binding.Steps[i]
		if !r.Admits(i, step) {
			continue
		}
		matched = true
		m, ok := st.markers[i]
		if !ok {
			if free < 0 {
				free = i
			}
			continue
		}
		if m.repeats(r) {
			return wal.ConsumeResult{Status: wal.Repeated, StepID: step.ID, StepIndex: i}
		}
		spent = append(spent, wal.SpentStep{Index: i, RequestID: m.RequestID})
	}
	switch {
	case free >= 0:
		return wal.ConsumeResult{Status: wal.Consumed, StepID: r.Binding.Steps[free].ID, StepIndex: free}
	case !matched:
		return wal.ConsumeResult{Status: wal.Mismatch, StepIndex: -1}
	}
	return wal.ConsumeResult{Status: wal.Replay, StepIndex: -1, Spent: spent}
}

// readOps read a binding's existence and markers.
func (s *Store) readOps(id string) []clientv3.Op {
	return []clientv3.Op{
		clientv3.OpGet(s.p.binding(id), clientv3.WithCountOnly()),
		clientv3.OpGet(s.p.markers(id), clientv3.WithPrefix()),
	}
}

// decodeSeen reads what readOps returned.
func (s *Store) decodeSeen(id string, rs []*etcdserverpb.ResponseOp) (*seenState, error) {
	if len(rs) != 2 {
		return nil, fmt.Errorf("%w: %d answers to a consume's reads", ErrUnavailable, len(rs))
	}
	st := &seenState{bound: rs[0].GetResponseRange().GetCount() > 0, markers: map[int]marker{}}
	pfx := s.p.markers(id)
	for _, kv := range rs[1].GetResponseRange().GetKvs() {
		i, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), pfx))
		if err != nil {
			return nil, fmt.Errorf("%w: marker key %q", wal.ErrCorrupt, kv.Key)
		}
		var m marker
		if err := json.Unmarshal(kv.Value, &m); err != nil {
			return nil, fmt.Errorf("%w: marker %q: %v", wal.ErrCorrupt, kv.Key, err)
		}
		st.markers[i] = m
	}
	return st, nil
}

// Peek reports what Consume would do now, in one read.
func (s *Store) Peek(ctx context.Context, r wal.ConsumeRequest) (wal.ConsumeResult, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(octx).Then(s.readOps(r.Binding.PreflightID)...).Commit()
	if err = s.seen(octx, err); err != nil {
		return wal.ConsumeResult{}, err
	}
	st, err := s.decodeSeen(r.Binding.PreflightID, resp.Responses)
	if err != nil {
		return wal.ConsumeResult{}, err
	}
	return plan(&r, st), nil
}

// Consume spends one unconsumed step of r.Kind: one transaction on the
// first matching step's marker, and on failure one more per step that the
// answer shows free (doc.go, "Consume-once"). The frames follow the
// marker: the replica's log and, sent while its commit goes to the disk,
// their copies in etcd.
func (s *Store) Consume(ctx context.Context, r wal.ConsumeRequest) (wal.ConsumeResult, error) {
	res, err := s.spend(ctx, &r)
	if err != nil {
		return res, err
	}
	_, err = s.logAndCopy(ctx, r.ConsumeFrames(res))
	return res, err
}

// spend decides the consume in etcd.
func (s *Store) spend(ctx context.Context, r *wal.ConsumeRequest) (wal.ConsumeResult, error) {
	id := r.Binding.PreflightID
	try := -1
	for i := range r.Binding.Steps {
		if r.Admits(i, &r.Binding.Steps[i]) {
			try = i
			break
		}
	}
	var res wal.ConsumeResult
	// Each failed try shows one more step spent, so the loop ends.
	for range len(r.Binding.Steps) + 1 {
		var resp *clientv3.TxnResponse
		var st *seenState
		if try < 0 {
			// No step of the kind: only the binding's existence decides
			// between Gone and Mismatch.
			octx, cancel := s.opCtx(ctx)
			out, err := s.cli.Txn(octx).Then(s.readOps(id)...).Commit()
			err = s.seen(octx, err)
			cancel()
			if err != nil {
				return res, err
			}
			if st, err = s.decodeSeen(id, out.Responses); err != nil {
				return res, err
			}
			return plan(r, st), nil
		}
		m, _ := json.Marshal(marker{RequestID: r.RequestID, ArgsDigest: r.CallDigest,
			At: r.Time.UTC().Format(wal.TimestampFormat), Replica: s.o.Replica})
		key := s.p.marker(id, try)
		err := s.withLease(ctx, func(lease clientv3.LeaseID) error {
			octx, cancel := s.opCtx(ctx)
			defer cancel()
			var err error
			resp, err = s.cli.Txn(octx).
				If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
					clientv3.Compare(clientv3.CreateRevision(s.p.binding(id)), ">", 0)).
				Then(clientv3.OpPut(key, string(m), clientv3.WithLease(lease))).
				Else(s.readOps(id)...).
				Commit()
			return s.seen(octx, err)
		})
		if err != nil {
			return res, err
		}
		if resp.Succeeded {
			return wal.ConsumeResult{Status: wal.Consumed, StepID: r.Binding.Steps[try].ID, StepIndex: try}, nil
		}
		if st, err = s.decodeSeen(id, resp.Responses); err != nil {
			return res, err
		}
		res = plan(r, st)
		if res.Status != wal.Consumed {
			return res, nil
		}
		try = res.StepIndex
	}
	return wal.ConsumeResult{Status: wal.Replay, StepIndex: -1}, nil
}
