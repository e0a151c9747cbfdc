package etcdstore

import (
	"context"
	"fmt"
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
