package etcdstore

import (
	"bytes"
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
	for _, a := range wal.PendingApprovalsOf(rec) {
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
// and the copy of its autonomy.approval frame are one transaction,
// conditioned on the approval being unchanged since it was read pending:
// of concurrent decisions on any replicas exactly one wins, and a
// decision never stands without its frame. The frame's seq and hash are
// fixed before the transaction is sent, under the log's lead (which an
// approval waits for: wal.DB.Lead), and the log commits the frame once
// etcd has the decision. As for a lone consume (consume.go): a local
// commit that fails then leaves the frame to be taken up from its copy;
// a transaction whose outcome is unknown holds the log until the dropper
// has read the approval back, taking the frame up when the decision was
// taken and deleting its copy when it was not.
func (s *Store) DecideApproval(ctx context.Context, in wal.ApprovalInput) (wal.Approval, error) {
	if err := s.owned(ctx); err != nil {
		return wal.Approval{}, err
	}
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
		decided, again, err := s.decideOnce(ctx, a, rev, &in)
		if !again {
			return decided, err
		}
		// decided (or expired) meanwhile: read it again
	}
}

// decideOnce sends one decision on approval a, read at revision rev; again
// reports that the approval changed since, and nothing was written.
func (s *Store) decideOnce(ctx context.Context, a wal.Approval, rev int64, in *wal.ApprovalInput) (decided wal.Approval, again bool, err error) {
	lctx, cancel := s.opCtx(ctx)
	lead, err := s.log.Lead(lctx)
	cancel()
	if err != nil {
		return a, false, fmt.Errorf("%w: the log's lead for an approval's frame: %w", ErrUnavailable, err)
	}
	key := s.p.approval(in.PreflightID, in.StepID)
	// taken is set before the log's commit, the only caller of the stage's
	// lost after the transaction: a decision etcd took has its frame taken
	// up, never its copy deleted.
	taken := false
	req, cw, err := s.stageCopies(lead, []wal.FrameInput{a.DecisionFrame(in)}, &taken)
	if err != nil {
		return a, false, err
	}
	decided = a.DecidedBy(in, req.frames[0].Seq)
	value, _ := json.Marshal(&decided)
	pending, _ := json.Marshal(&a)
	req.taken = func(ctx context.Context) (bool, error) {
		// The transaction may still be on its way: putting the approval
		// as it was read moves its revision, so a late one fails its
		// compare, and what the key then holds is the answer.
		octx, cancel := s.opCtx(ctx)
		defer cancel()
		resp, err := s.cli.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, string(pending), clientv3.WithIgnoreLease())).Else(clientv3.OpGet(key)).Commit()
		if err = s.seen(octx, err); err != nil || resp.Succeeded {
			return false, err
		}
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		return len(kvs) == 1 && bytes.Equal(kvs[0].Value, value), nil
	}
	var resp *clientv3.TxnResponse
	err = s.withLease(ctx, func(lease clientv3.LeaseID) error {
		// The approval keeps its lease: it goes with its binding.
		ops := []clientv3.Op{clientv3.OpPut(key, string(value), clientv3.WithIgnoreLease())}
		for i := range cw.keys {
			ops = append(ops, clientv3.OpPut(string(cw.keys[i]), string(cw.values[i]), clientv3.WithLease(lease)))
		}
		octx, cancel := s.opCtx(ctx)
		defer cancel()
		var err error
		resp, err = s.cli.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(ops...).Commit()
		return s.seen(octx, err)
	})
	req.end(err)
	switch {
	case err != nil:
		lead.Lose()
		s.wakeDropper()
		return a, false, err
	case !resp.Succeeded:
		lead.Release()
		return a, true, nil
	}
	taken = true
	if err := lead.Commit(); err != nil {
		// Also a commit that reached the disk and then found the file
		// gone: the log holds only when the frame is not in it.
		s.logger.Error("etcd: the log's commit of an approval's frame failed; it is taken up from its copy if the log lacks it", "err", err)
		s.wakeDropper()
	}
	return decided, false, nil
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
