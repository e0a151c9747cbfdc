package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// TestPendingApprovalsAcrossReplicas: the pending count is the store's,
// whichever replica recorded or decided the approvals, and leaves out the
// decided and the expired.
func TestPendingApprovalsAcrossReplicas(t *testing.T) {
	prefix := newPrefix()
	a := open(t, "replica-a", prefix, t.TempDir())
	defer closeStore(a)
	b := open(t, "replica-b", prefix, t.TempDir())
	defer closeStore(b)
	ctx := context.Background()
	now := time.Now().Round(0)
	bindings := make([]preflight.Binding, 3)
	for i, s := range []*Store{a, b, b} {
		bindings[i] = preflight.Binding{PreflightID: fmt.Sprintf("pf_pending_%d", i), AuditID: fmt.Sprintf("au_pending_%d", i),
			Outcome: preflight.OutcomePass, ActorID: "user:a", ExpiresAt: now.Add(time.Hour),
			Steps: []preflight.BoundStep{{ID: "s1", Kind: "refund.create", ArgsDigest: "sha256:x",
				Approval: &preflight.StepApproval{Authorities: []string{"role:approver"}, ExpiresAt: now.Add(time.Duration(10*(i+1)) * time.Minute)}}}}
		if _, err := s.RecordPreflight(ctx, wal.PreflightRecord{Binding: bindings[i], Decision: []byte(`{}`), Time: now}); err != nil {
			t.Fatal(err)
		}
	}
	want := func(at time.Time, n int) {
		t.Helper()
		for _, s := range []*Store{a, b} {
			got, err := s.PendingApprovals(ctx, at)
			if err != nil || got != n {
				t.Fatalf("%s: pending at %v = %d, %v; want %d", s.Replica(), at.Sub(now), got, err, n)
			}
		}
	}
	want(now, 3)
	if _, err := a.DecideApproval(ctx, wal.ApprovalInput{PreflightID: bindings[2].PreflightID, StepID: "s1",
		ApprovalDecision: wal.ApprovalDecision{Decision: "approve", Approver: "tok", Roles: []string{"role:approver"},
			Subject: "user:b", DecidedAt: now}}); err != nil {
		t.Fatal(err)
	}
	want(now, 2)
	want(now.Add(15*time.Minute), 1) // the first expired
}

// TestApprovalDecisionAndFrameStandTogether: a decision and the copy of
// its autonomy.approval frame are one transaction (one revision), and the
// frame is in the deciding replica's log and in every replica's audit
// join. A decision etcd took whose answer was lost fails, and the dropper,
// finding the decision taken, takes its frame up from the copy: no
// approval stands without its frame.
func TestApprovalDecisionAndFrameStandTogether(t *testing.T) {
	prefix := newPrefix()
	a := open(t, "replica-a", prefix, t.TempDir())
	defer closeStore(a)
	b := open(t, "replica-b", prefix, t.TempDir())
	defer closeStore(b)
	ctx := context.Background()
	now := time.Now().Round(0)
	record := func(id string) preflight.Binding {
		bd := preflight.Binding{PreflightID: id, AuditID: "au_" + id, Outcome: preflight.OutcomePass, ActorID: "user:a",
			ExpiresAt: now.Add(time.Hour), Steps: []preflight.BoundStep{{ID: "s1", Kind: "refund.create", ArgsDigest: "sha256:x",
				Approval: &preflight.StepApproval{Authorities: []string{"role:approver"}, ExpiresAt: now.Add(time.Hour)}}}}
		if _, err := a.RecordPreflight(ctx, wal.PreflightRecord{Binding: bd, Decision: []byte(`{}`), Time: now}); err != nil {
			t.Fatal(err)
		}
		return bd
	}
	decide := func(bd preflight.Binding) error {
		_, err := a.DecideApproval(ctx, wal.ApprovalInput{PreflightID: bd.PreflightID, StepID: "s1",
			ApprovalDecision: wal.ApprovalDecision{Decision: "approve", Approver: "tok", Roles: []string{"role:approver"},
				Subject: "user:b", DecidedAt: now}})
		return err
	}
	// stands checks that bd's approval is approved on b, with its frame
	// after head in a's log and in b's audit join, and returns the
	// revisions of the approval and of the frame's copy.
	stands := func(bd preflight.Binding, head uint64) (int64, int64) {
		t.Helper()
		if ap, err := b.Approval(ctx, bd.PreflightID, "s1"); err != nil || ap.State != wal.ApprovalApproved {
			t.Fatalf("approval on replica-b: %+v, %v; want approved", ap, err)
		}
		if fs := framesAfter(t, a, head); len(fs) != 1 || fs[0].Kind != wal.KindApproval || fs[0].Seq != head+1 {
			t.Fatalf("replica-a's frames after the decision: %+v; want its approval frame at %d", fs, head+1)
		}
		join, err := b.AuditFramesOf(ctx, bd.AuditID, []string{wal.KindApproval})
		if err != nil || !slices.ContainsFunc(join, func(f wal.Frame) bool { return f.Kind == wal.KindApproval }) {
			t.Fatalf("replica-b's audit join: %d frames, %v; want the approval frame", len(join), err)
		}
		ap, err := a.cli.Get(ctx, a.p.approval(bd.PreflightID, "s1"))
		if err != nil {
			t.Fatal(err)
		}
		cp, err := a.cli.Get(ctx, a.p.frame(bd.AuditID, "replica-a", head+1))
		if err != nil || len(cp.Kvs) != 1 {
			t.Fatalf("the frame's copy: %v, %v", cp.Kvs, err)
		}
		return ap.Kvs[0].ModRevision, cp.Kvs[0].ModRevision
	}

	one := record("pf_ap_together")
	head, _ := a.log.Head()
	if err := decide(one); err != nil {
		t.Fatal(err)
	}
	if ap, cp := stands(one, head); ap != cp {
		t.Fatalf("the decision at revision %d, its frame's copy at %d: want one transaction", ap, cp)
	}

	two := record("pf_ap_lost")
	head, _ = a.log.Head()
	lk := &lostAnswerKV{KV: a.cli.KV}
	lk.armed.Store(true)
	a.cli.KV = lk // the decision's transaction commits, its answer is lost
	if err := decide(two); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a decision whose answer was lost: %v, want ErrUnavailable", err)
	}
	waitReleased(t, a, 10*time.Second, nil)
	stands(two, head)
	checkClean(t, a)
}
