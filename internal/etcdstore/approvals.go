package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/contractrefine/autonomy/wal"
)

// approvalPage is how many approvals one read of a listing brings.
const approvalPage = 256

func (p keys) approvals() string { return string(p) + "ap/" }

// approval is P ap/<preflight_id> 0x00 <step_id>: the same order as the
// bbolt bucket's keys, so the cursors of ListApprovals are the same.
func (p keys) approval(preflightID, stepID string) string {
	return p.approvals() + wal.ApprovalKey(preflightID, stepID)
}

func decodeApproval(key []byte, v []byte) (wal.Approval, error) {
	var a wal.Approval
	if err := json.Unmarshal(v, &a); err != nil {
		return a, fmt.Errorf("%w: approval %q: %v", wal.ErrCorrupt, key, err)
	}
	return a, nil
}

// pendingApprovalOps are the puts of a preflight's pending approvals.
func (s *Store) pendingApprovalOps(rec *wal.PreflightRecord, l clientv3.OpOption) []clientv3.Op {
	var ops []clientv3.Op
	for _, a := range wal.PendingApprovalsOf(&rec.Binding, rec.Time) {
		v, _ := json.Marshal(&a)
		ops = append(ops, clientv3.OpPut(s.p.approval(a.PreflightID, a.StepID), string(v), l))
	}
	return ops
}

// Approval returns the approval of one step of a preflight.
func (s *Store) Approval(ctx context.Context, preflightID, stepID string) (wal.Approval, error) {
	a, _, err := s.readApproval(ctx, preflightID, stepID)
	return a, err
}

func (s *Store) readApproval(ctx context.Context, preflightID, stepID string) (wal.Approval, int64, error) {
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Get(octx, s.p.approval(preflightID, stepID))
	if err = s.seen(octx, err); err != nil {
		return wal.Approval{}, 0, err
	}
	if len(resp.Kvs) == 0 {
		return wal.Approval{}, 0, wal.ErrNotFound
	}
	a, err := decodeApproval(resp.Kvs[0].Key, resp.Kvs[0].Value)
	return a, resp.Kvs[0].ModRevision, err
}

// DecideApproval records a decision on a pending approval. The decision
// is one transaction conditioned on the approval being unchanged since it
// was read pending: of concurrent decisions on any replicas exactly one
// wins. The winner then writes the autonomy.approval frame to its log and
// the approval again with the frame's seq, with the frame's copy; a
// failure there returns an error, the decision standing (a second
// decision gets wal.ErrApprovalDecided).
func (s *Store) DecideApproval(ctx context.Context, in wal.ApprovalInput) (wal.Approval, error) {
	if in.Replica == "" {
		in.Replica = s.o.Replica
	}
	for {
		a, rev, err := s.readApproval(ctx, in.PreflightID, in.StepID)
		if err != nil {
			return a, err
		}
		if err := a.CanDecide(&in); err != nil {
			return a, err
		}
		key := s.p.approval(in.PreflightID, in.StepID)
		decided := a.DecidedBy(&in, 0)
		v, _ := json.Marshal(&decided)
		octx, cancel := s.opCtx(ctx)
		// The approval keeps its lease: it goes with its binding.
		resp, err := s.cli.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, string(v), clientv3.WithIgnoreLease())).Commit()
		err = s.seen(octx, err)
		cancel()
		if err != nil {
			return a, err
		}
		if !resp.Succeeded {
			continue // decided (or expired) meanwhile: read it again
		}
		f, err := s.log.AppendDecision(ctx, a.DecisionFrame(&in))
		if err != nil {
			return decided, err
		}
		decided = a.DecidedBy(&in, f.Seq)
		v, _ = json.Marshal(&decided)
		err = s.withLease(ctx, func(lease clientv3.LeaseID) error {
			octx, cancel := s.opCtx(ctx)
			defer cancel()
			_, err := s.cli.Txn(octx).Then(
				clientv3.OpPut(key, string(v), clientv3.WithIgnoreLease()),
				clientv3.OpPut(s.p.frame(f.AuditID, s.o.Replica, f.Seq), string(wal.EncodeFrame(&f)), clientv3.WithLease(lease)),
			).Commit()
			return s.seen(octx, err)
		})
		return decided, err
	}
}

// ListApprovals returns up to q.Limit approvals q.Match keeps, newest
// preflight first, and the cursor of the next page.
func (s *Store) ListApprovals(ctx context.Context, q wal.ApprovalQuery) ([]wal.Approval, string, error) {
	if q.Limit <= 0 {
		q.Limit = 50
	}
	pfx := s.p.approvals()
	end := clientv3.GetPrefixRangeEnd(pfx)
	if q.After != "" {
		end = pfx + q.After
	}
	var out []wal.Approval
	for {
		octx, cancel := s.opCtx(ctx)
		resp, err := s.cli.Get(octx, pfx, clientv3.WithRange(end), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend),
			clientv3.WithLimit(approvalPage))
		err = s.seen(octx, err)
		cancel()
		if err != nil {
			return nil, "", err
		}
		for _, kv := range resp.Kvs {
			a, err := decodeApproval(kv.Key, kv.Value)
			if err != nil {
				return nil, "", err
			}
			if q.Match != nil && !q.Match(&a) {
				continue
			}
			if len(out) == q.Limit {
				last := &out[len(out)-1]
				return out, wal.ApprovalKey(last.PreflightID, last.StepID), nil
			}
			out = append(out, a)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, "", nil
		}
		end = string(resp.Kvs[len(resp.Kvs)-1].Key)
	}
}

// PendingApprovals counts the approvals of every replica that wait for a
// decision and have not expired at now (autonomy_approvals_pending): one
// read of the approvals per page of approvalPage.
func (s *Store) PendingApprovals(ctx context.Context, now time.Time) (int, error) {
	n := 0
	_, _, err := s.ListApprovals(ctx, wal.ApprovalQuery{Match: func(a *wal.Approval) bool {
		if a.StateAt(now) == wal.ApprovalPending {
			n++
		}
		return false
	}})
	return n, err
}
