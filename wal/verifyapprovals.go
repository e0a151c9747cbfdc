package wal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// An approval record is what lets a step that waits for a person run, so
// it is checked against the hash-chained frames both ways, as the consumed
// markers are: each autonomy.approval frame of a preflight still recorded
// is the decision its record names (checkApprovalFrame, during the walk),
// and each record says what the verified binding record says of its step
// and, once decided, what the autonomy.approval frame it names says
// (verifyApprovals). A record edited to approved, widened to more
// authorities or a later expiry, or deleted does not pass for a log that
// verifies. A replica on etcd keeps its approvals in etcd and its local
// log no binding records, so there is nothing local to check.

// checkApprovalFrame returns what is wrong with the record of the
// approval frame f, "" when nothing is or its preflight is no longer
// recorded here.
func (tx *Tx) checkApprovalFrame(f Frame) string {
	a, err := f.Approval()
	if err != nil || a.PreflightID == "" {
		return fmt.Sprintf("approval frame attrs do not name a preflight: %s", f.Attrs)
	}
	if _, err := tx.binding(a.PreflightID); errors.Is(err, ErrNotFound) {
		return ""
	}
	rec, err := tx.approval(a.PreflightID, a.StepID)
	switch {
	case errors.Is(err, ErrNotFound):
		return fmt.Sprintf("step %s of %s was decided (this frame) but has no approval record", a.StepID, a.PreflightID)
	case err != nil:
		return err.Error()
	case rec.Decided == nil || rec.Decided.Seq != f.Seq:
		return fmt.Sprintf("the approval record of step %s of %s does not name this decision", a.StepID, a.PreflightID)
	}
	return ""
}

// verifyApprovals checks every approval record against the binding record
// of its preflight and the decision frame it names.
func (tx *Tx) verifyApprovals(ctx context.Context, rep *VerifyReport) error {
	bucket := tx.btx.Bucket(bucketApprovals)
	if bucket == nil {
		return nil
	}
	c := bucket.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		var a Approval
		if json.Unmarshal(v, &a) != nil || !bytes.Equal(k, approvalKey(a.PreflightID, a.StepID)) {
			rep.Problem = fmt.Sprintf("approval record %q is malformed", k)
			return nil
		}
		seq, _ := indexSeq(tx.btx.Bucket(bucketPreflights).Get([]byte(a.PreflightID)))
		if a.Decided != nil {
			seq = a.Decided.Seq
		}
		if problem := tx.approvalProblem(&a); problem != "" {
			rep.BadSeq, rep.Problem = seq, fmt.Sprintf("approval record of %s step %s: %s", a.PreflightID, a.StepID, problem)
			return nil
		}
	}
	return nil
}

// approvalProblem is what is wrong with approval record a, "" when nothing.
func (tx *Tx) approvalProblem(a *Approval) string {
	b, err := tx.binding(a.PreflightID)
	switch {
	case errors.Is(err, ErrNotFound):
		return "names a preflight the log does not record"
	case err != nil:
		return "its binding cannot be read: " + err.Error()
	}
	s := b.Step(a.StepID)
	if s == nil || s.Approval == nil {
		return "names a step that waits for no approval"
	}
	if a.AuditID != b.AuditID || a.Tenant != b.Tenant || a.ActorID != b.ActorID || a.ToolKind != s.Kind ||
		a.ArgsDigest != s.ArgsDigest || !slices.Equal(a.Authorities, s.Approval.Authorities) ||
		!a.ExpiresAt.Equal(s.Approval.ExpiresAt) {
		return "differs from the step its binding records"
	}
	// The preflight frame states when the approval was asked for and, in
	// frames written since it records it, the envelope's actor who may not
	// approve it (separation of duties).
	seq, _ := indexSeq(tx.btx.Bucket(bucketPreflights).Get([]byte(a.PreflightID)))
	pa, pf, err := tx.preflightFrame(seq)
	if err != nil {
		return "its preflight frame cannot be read: " + err.Error()
	}
	if !sameTime(pf.Timestamp, a.RequestedAt) || (pa.ActorRef != "" && pa.ActorRef != a.ActorRef) {
		return "differs from its autonomy.preflight frame"
	}
	switch a.State {
	case ApprovalPending:
		if a.Decided != nil {
			return "pending, yet names a decision"
		}
		return ""
	case ApprovalApproved, ApprovalRejected:
	default:
		return fmt.Sprintf("state %q is neither pending, approved nor rejected", a.State)
	}
	d := a.Decided
	if d == nil || (d.Decision == DecisionApprove) != (a.State == ApprovalApproved) ||
		(d.Decision != DecisionApprove && d.Decision != DecisionReject) {
		return "its state and its decision differ"
	}
	f, err := tx.Frame(d.Seq)
	if err != nil {
		return "names no frame in the log"
	}
	fa, err := f.Approval()
	if err != nil || f.Kind != KindApproval || f.AuditID != a.AuditID || fa.PreflightID != a.PreflightID ||
		fa.StepID != a.StepID || fa.Decision != d.Decision || fa.ArgsDigest != a.ArgsDigest ||
		fa.ToolKind != a.ToolKind || fa.Approver != d.Approver || !slices.Equal(fa.Roles, d.Roles) ||
		fa.Comment != d.Comment || fa.Subject != d.Subject || !sameTime(f.Timestamp, d.DecidedAt) {
		return "differs from the autonomy.approval frame it names"
	}
	return ""
}

// sameTime reports whether a frame's timestamp is the instant t.
func sameTime(timestamp string, t time.Time) bool {
	ft, err := time.Parse(TimestampFormat, timestamp)
	return err == nil && ft.Equal(t)
}
