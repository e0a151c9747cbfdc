package etcdstore

import (
	"context"
	"errors"

	"github.com/contractrefine/autonomy/binding"

	"github.com/contractrefine/autonomy/wal"
)

// The outcome of a gated call on a shared store. The response may reach
// another replica than the preflight or the Check did (Envoy's ext_proc
// stream and the Check are separate calls), so the decision that let the
// call through, the output contract and earlier outcomes are read from
// what every replica wrote, and the outcome frame is copied like the
// decision's: the audit join with include=outcome answers on every replica.

var (
	_ binding.OutcomeStore = (*Store)(nil)

	outcomeKinds = []string{wal.KindOutcome}
)

// CallDecision is wal.DB.CallDecision over the decision frames every
// replica wrote under auditID. This replica's own log answers first: the
// response usually comes back through the replica that let the call
// through, and a retry allowed on another replica (the same request id)
// bound the same step, kind and args.
func (s *Store) CallDecision(ctx context.Context, auditID, requestID string) (wal.Frame, error) {
	if f, err := s.log.CallDecision(ctx, auditID, requestID); !errors.Is(err, wal.ErrNotFound) {
		return f, err
	}
	frames, err := s.AuditFramesOf(ctx, auditID, []string{wal.KindDecision})
	if err != nil {
		return wal.Frame{}, err
	}
	var found *wal.Frame
	for i := range frames {
		a, err := frames[i].Decision()
		if err != nil {
			return wal.Frame{}, err
		}
		if a.LetThrough(requestID) {
			found = &frames[i]
		}
	}
	if found == nil {
		return wal.Frame{}, wal.ErrNotFound
	}
	return *found, nil
}

// OutputMaxBytes returns the outputContract.maxBytes recorded with a
// preflight's binding, wal.NoOutputLimit when it declared none.
func (s *Store) OutputMaxBytes(ctx context.Context, preflightID string) (int64, error) {
	return s.recentOf(ctx, preflightID, nil)
}

// AppendOutcome appends the outcome frame to the replica's log and its
// copy to etcd. It returns once the frame is durable in the log and its
// copy in etcd, or the copy failed: the frame, in the log, then says what
// its caller does with the response (the tool has run; refusing the
// response would make the record wrong), and its copy is sent again in the
// background until etcd takes it (recopy).
func (s *Store) AppendOutcome(ctx context.Context, rec wal.OutcomeRecord) (wal.Frame, error) {
	if err := s.owned(ctx); err != nil {
		return wal.Frame{}, err
	}
	f, err := s.log.AppendOutcome(ctx, rec)
	if err != nil {
		return f, err
	}
	if err := s.copyFrames(ctx, []wal.Frame{f}); err != nil {
		s.logger.Warn("etcd: an outcome frame's copy failed; the response goes as judged, the copy is sent again", "audit_id", f.AuditID, "seq", f.Seq, "err", err)
	}
	return f, nil
}

// HasOutcome reports whether any replica recorded an outcome under auditID
// for requestID's response.
func (s *Store) HasOutcome(ctx context.Context, auditID, requestID string) (bool, error) {
	frames, err := s.AuditFramesOf(ctx, auditID, outcomeKinds)
	if err != nil {
		return false, err
	}
	for i := range frames {
		a, err := frames[i].Outcome()
		if err != nil {
			return false, err
		}
		if a.RequestID == requestID {
			return true, nil
		}
	}
	return false, nil
}
