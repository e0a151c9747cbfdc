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

// KindApproval is the frame a person's decision on a step is recorded as,
// under the preflight's audit id.
const KindApproval = "autonomy.approval"

var bucketApprovals = []byte("approvals")

var (
	// ErrApprovalDecided reports a second decision on an approval.
	ErrApprovalDecided = errors.New("wal: approval already decided")
	// ErrApprovalExpired reports a decision after the approval's expiry.
	ErrApprovalExpired = errors.New("wal: approval expired")
)

// Approval states.
const (
	ApprovalPending  = "pending"
	ApprovalApproved = "approved"
	ApprovalRejected = "rejected"
	// ApprovalExpired is a pending approval past its expiry, as listed;
	// the stored state stays pending.
	ApprovalExpired = "expired"
)

// Decisions an approver may give.
const (
	DecisionApprove = "approve"
	DecisionReject  = "reject"
)

// Approval is one step of a preflight that waits for, or got, a person's
// decision. It is written pending with the preflight and changed once,
// by DecideApproval.
type Approval struct {
	PreflightID string `json:"preflight_id"`
	StepID      string `json:"step_id"`
	AuditID     string `json:"audit_id"`
	Tenant      string `json:"tenant,omitempty"`
	ActorID     string `json:"actor_id"`
	// ActorRef is the envelope's actor.idRef when it differs from
	// ActorID: the person the plan acts for, who may not approve it either.
	ActorRef    string    `json:"actor_ref,omitempty"`
	ToolKind    string    `json:"tool_kind"`
	ArgsDigest  string    `json:"args_digest"`
	Authorities []string  `json:"authorities"`
	RequestedAt time.Time `json:"requested_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	// State is pending, approved or rejected.
	State string `json:"state"`
	// Decided is set once State is not pending.
	Decided *ApprovalDecision `json:"decided,omitempty"`
}

// StateAt is the approval's state as listed at now: a pending approval
// past its expiry is expired.
func (a *Approval) StateAt(now time.Time) string {
	if a.State == ApprovalPending && !now.Before(a.ExpiresAt) {
		return ApprovalExpired
	}
	return a.State
}

// ApprovalDecision is who decided an approval, how and when.
type ApprovalDecision struct {
	// Decision is approve or reject.
	Decision string `json:"decision"`
	// Approver is the name of the approver's token entry.
	Approver  string    `json:"approver"`
	Roles     []string  `json:"roles"`
	Subject   string    `json:"subject,omitempty"`
	Comment   string    `json:"comment,omitempty"`
	DecidedAt time.Time `json:"decided_at"`
	// Seq is the autonomy.approval frame's.
	Seq uint64 `json:"seq"`
}

// ApprovalInput is one decision to record.
type ApprovalInput struct {
	PreflightID, StepID string
	ApprovalDecision
	// Replica, when set, names the writing replica in the frame.
	Replica string
}

// ApprovalQuery selects approvals to list, newest preflight first.
type ApprovalQuery struct {
	// Match, when set, keeps only the approvals it returns true for
	// (tenant scope, the approver's roles, the state).
	Match func(*Approval) bool
	// After is the cursor of the previous page ("" for the first).
	After string
	// Limit is the page size (default 50).
	Limit int
}

func approvalKey(preflightID, stepID string) []byte {
	k := make([]byte, 0, len(preflightID)+1+len(stepID))
	k = append(k, preflightID...)
	k = append(k, 0)
	return append(k, stepID...)
}

// putPendingApprovals writes a pending approval for every step of rec's
// binding that waits for one, in the transaction that records the
// preflight.
func (tx *Tx) putPendingApprovals(rec *PreflightRecord) error {
	b := &rec.Binding
	if b.PreflightID == "" || !b.NeedsApproval() {
		return nil
	}
	bucket, err := tx.btx.CreateBucketIfNotExists(bucketApprovals)
	if err != nil {
		return err
	}
	for _, a := range PendingApprovalsOf(rec) {
		v, err := json.Marshal(&a)
		if err != nil {
			return err
		}
		if err := bucket.Put(approvalKey(b.PreflightID, a.StepID), v); err != nil {
			return err
		}
	}
	return nil
}

// approval reads one approval; ErrNotFound when the step waits for none,
// or its preflight is no longer recorded.
func (tx *Tx) approval(preflightID, stepID string) (Approval, error) {
	var a Approval
	bucket := tx.btx.Bucket(bucketApprovals)
	if bucket == nil {
		return a, ErrNotFound
	}
	v := bucket.Get(approvalKey(preflightID, stepID))
	if v == nil {
		return a, ErrNotFound
	}
	if err := json.Unmarshal(v, &a); err != nil {
		return a, fmt.Errorf("%w: approval of %s step %q: %v", ErrCorrupt, preflightID, stepID, err)
	}
	return a, nil
}

// Approval returns the approval of one step of a preflight, or ErrNotFound.
// An approved one is what lets its step run, so it is compared on every
// read with the binding record and the decision frame it names
// (approvalProblem), as Binding compares its record with its frame: a
// record edited while the service runs fails the read, and the log is
// trusted no more. An approved one read from a log not (yet) trusted is
// that log's error.
func (db *DB) Approval(ctx context.Context, preflightID, stepID string) (Approval, error) {
	var a Approval
	err := db.View(func(tx *Tx) error {
		var err error
		if a, err = tx.approval(preflightID, stepID); err != nil || a.State != ApprovalApproved {
			return err
		}
		if problem := tx.approvalProblem(&a); problem != "" {
			ve := &VerifyError{Problem: fmt.Sprintf("approval record of %s step %s: %s", preflightID, stepID, problem)}
			if a.Decided != nil {
				ve.Seq = a.Decided.Seq
			}
			return ve
		}
		return nil
	})
	if ve := (*VerifyError)(nil); errors.As(err, &ve) {
		db.distrust(ve)
	}
	if err == nil && a.State == ApprovalApproved {
		err = db.Trusted()
	}
	return a, err
}

// DecideApproval records a decision on a pending approval: the
// autonomy.approval frame under the preflight's audit id and the approval's
// new state, in one durable commit. A decided approval gives
// ErrApprovalDecided (and the recorded one), one past its expiry at
// in.DecidedAt ErrApprovalExpired, an unknown one ErrNotFound.
func (db *DB) DecideApproval(ctx context.Context, in ApprovalInput) (Approval, error) {
	var a Approval
	err := db.Update(ctx, func(tx *Tx) error {
		var err error
		a, err = tx.decideApproval(&in)
		return err
	})
	return a, err
}

func (tx *Tx) decideApproval(in *ApprovalInput) (Approval, error) {
	a, err := tx.approval(in.PreflightID, in.StepID)
	if err != nil {
		return a, err
	}
	if err := a.CanDecide(in); err != nil {
		return a, err
	}
	f, err := tx.Append(a.DecisionFrame(in))
	if err != nil {
		return a, err
	}
	a = a.DecidedBy(in, f.Seq)
	v, err := json.Marshal(&a)
	if err != nil {
		return a, err
	}
	return a, tx.btx.Bucket(bucketApprovals).Put(approvalKey(a.PreflightID, a.StepID), v)
}

// CanDecide reports whether in may decide a: ErrApprovalDecided once it
// is decided, ErrApprovalExpired at or after its expiry, an error for a
// decision that is neither approve nor reject.
func (a *Approval) CanDecide(in *ApprovalInput) error {
	switch {
	case a.State != ApprovalPending:
		return ErrApprovalDecided
	case !in.DecidedAt.Before(a.ExpiresAt):
		return ErrApprovalExpired
	case in.Decision != DecisionApprove && in.Decision != DecisionReject:
		return fmt.Errorf("wal: approval decision %q is neither approve nor reject", in.Decision)
	}
	return nil
}

// DecisionFrame is the autonomy.approval frame recording in on a.
func (a *Approval) DecisionFrame(in *ApprovalInput) FrameInput {
	return FrameInput{Kind: KindApproval, AuditID: a.AuditID, Time: in.DecidedAt, Attrs: approvalAttrs(a, in)}
}

// DecidedBy returns a as in decides it, its frame being seq.
func (a Approval) DecidedBy(in *ApprovalInput, seq uint64) Approval {
	d := in.ApprovalDecision
	d.DecidedAt, d.Seq, d.Roles = in.DecidedAt.UTC(), seq, slices.Clone(d.Roles)
	a.Decided = &d
	a.State = ApprovalRejected
	if d.Decision == DecisionApprove {
		a.State = ApprovalApproved
	}
	return a
}

// PendingApprovalsOf are the pending approvals of the steps of rec's
// binding that wait for one, requested at rec.Time.
func PendingApprovalsOf(rec *PreflightRecord) []Approval {
	b, at := &rec.Binding, rec.Time
	var out []Approval
	for _, s := range b.Steps {
		if s.Approval == nil {
			continue
		}
		out = append(out, Approval{PreflightID: b.PreflightID, StepID: s.ID, AuditID: b.AuditID, Tenant: b.Tenant,
			ActorID: b.ActorID, ActorRef: rec.ActorRef, ToolKind: s.Kind, ArgsDigest: s.ArgsDigest, Authorities: s.Approval.Authorities,
			RequestedAt: at.UTC(), ExpiresAt: s.Approval.ExpiresAt.UTC(), State: ApprovalPending})
	}
	return out
}

// ApprovalKey is the key an approval sorts by: the preflight id, a zero
// byte, the step id (the cursor of ListApprovals).
func ApprovalKey(preflightID, stepID string) string { return string(approvalKey(preflightID, stepID)) }

// approvalAttrs are the autonomy.approval frame's attrs of in deciding a.
func approvalAttrs(a *Approval, in *ApprovalInput) *ApprovalAttrs {
	return &ApprovalAttrs{Approver: in.Approver, ArgsDigest: a.ArgsDigest, Comment: in.Comment, Decision: in.Decision,
		PreflightID: a.PreflightID, Replica: in.Replica, Roles: in.Roles, StepID: a.StepID, Subject: in.Subject,
		Tenant: a.Tenant, ToolKind: a.ToolKind}
}

// ListApprovals returns up to q.Limit approvals q.Match keeps, newest
// preflight first (preflight ids sort by their creation time), and the
// cursor of the next page ("" when there is none).
func (db *DB) ListApprovals(ctx context.Context, q ApprovalQuery) ([]Approval, string, error) {
	if q.Limit <= 0 {
		q.Limit = 50
	}
	var out []Approval
	next := ""
	err := db.View(func(tx *Tx) error {
		bucket := tx.btx.Bucket(bucketApprovals)
		if bucket == nil {
			return nil
		}
		c := bucket.Cursor()
		var k, v []byte
		if q.After == "" {
			k, v = c.Last()
		} else {
			after := []byte(q.After)
			k, v = c.Seek(after)
			if k == nil {
				k, v = c.Last()
			}
			for k != nil && bytes.Compare(k, after) >= 0 {
				k, v = c.Prev()
			}
		}
		for ; k != nil; k, v = c.Prev() {
			var a Approval
			if err := json.Unmarshal(v, &a); err != nil {
				return fmt.Errorf("%w: approval %q: %v", ErrCorrupt, k, err)
			}
			if q.Match != nil && !q.Match(&a) {
				continue
			}
			if len(out) == q.Limit {
				next = string(approvalKey(out[len(out)-1].PreflightID, out[len(out)-1].StepID))
				return nil
			}
			out = append(out, a)
		}
		return nil
	})
	return out, next, err
}

// deleteApprovals removes every approval of a preflight id (compaction).
func (tx *Tx) deleteApprovals(preflightID string) error {
	bucket := tx.btx.Bucket(bucketApprovals)
	if bucket == nil {
		return nil
	}
	prefix := append([]byte(preflightID), 0)
	var keys [][]byte
	c := bucket.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := bucket.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// PendingApprovals counts the approvals still pending and not expired at
// now.
func (db *DB) PendingApprovals(now time.Time) (int, error) {
	n := 0
	err := db.View(func(tx *Tx) error {
		bucket := tx.btx.Bucket(bucketApprovals)
		if bucket == nil {
			return nil
		}
		return bucket.ForEach(func(k, v []byte) error {
			var a Approval
			if err := json.Unmarshal(v, &a); err != nil {
				return fmt.Errorf("%w: approval %q: %v", ErrCorrupt, k, err)
			}
			if a.StateAt(now) == ApprovalPending {
				n++
			}
			return nil
		})
	})
	return n, err
}
