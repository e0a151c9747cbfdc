package etcdstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// TestOutcomeAcrossReplicaStores: a replica that did not record a
// preflight, nor let its call through, judges the call's response from
// what the other wrote: the output contract from the binding, the decision
// from its copy; the outcome it records is seen by both.
func TestOutcomeAcrossReplicaStores(t *testing.T) {
	ctx := context.Background()
	prefix := newPrefix()
	a := open(t, "replica-a", prefix, t.TempDir())
	defer closeStore(a)
	b := open(t, "replica-b", prefix, t.TempDir())
	defer closeStore(b)
	now := time.Now()
	bind := preflight.Binding{PreflightID: "pf_outcome", AuditID: "au_outcome", Outcome: preflight.OutcomePass,
		ActorID: "user:a", ExpiresAt: now.Add(time.Hour),
		Steps: []preflight.BoundStep{{ID: "s1", Kind: "ledger.debit.v1", ArgsDigest: "sha256:x"}}}
	if _, err := a.RecordPreflight(ctx, wal.PreflightRecord{Binding: bind, Decision: []byte(`{}`), Time: now,
		OutputMaxBytes: 512}); err != nil {
		t.Fatal(err)
	}
	if n, err := b.OutputMaxBytes(ctx, "pf_outcome"); err != nil || n != 512 {
		t.Fatalf("output contract read on B: %d, %v; want 512", n, err)
	}
	if _, err := b.OutputMaxBytes(ctx, "pf_never"); !errors.Is(err, wal.ErrNotFound) {
		t.Fatalf("output contract of an unknown preflight: %v, want ErrNotFound", err)
	}
	allow := &wal.DecisionAttrs{Outcome: "allow", Enforced: true, RequestID: "rq-1", PreflightID: "pf_outcome",
		StepID: "s1", ToolKind: "ledger.debit.v1", Mode: "enforce", Status: 200}
	if _, err := a.AppendDecision(ctx, wal.FrameInput{Kind: wal.KindDecision, AuditID: "au_outcome", Time: now, Attrs: allow}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CallDecision(ctx, "au_outcome", "rq-other"); !errors.Is(err, wal.ErrNotFound) {
		t.Fatalf("decision of another request id: %v, want ErrNotFound", err)
	}
	f, err := b.CallDecision(ctx, "au_outcome", "rq-1")
	if err != nil || frameReplica(&f) != "replica-a" {
		t.Fatalf("decision read on B: %+v, %v; want A's frame", f, err)
	}
	if has, err := a.HasOutcome(ctx, "au_outcome", "rq-1"); err != nil || has {
		t.Fatalf("outcome before any: %v, %v", has, err)
	}
	if _, err := b.AppendOutcome(ctx, wal.OutcomeRecord{AuditID: "au_outcome", Time: now,
		Attrs: wal.OutcomeAttrs{RequestID: "rq-1", Outcome: wal.OutcomeOK}}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Store{a, b} {
		if has, err := s.HasOutcome(ctx, "au_outcome", "rq-1"); err != nil || !has {
			t.Fatalf("outcome on %s after B recorded it: %v, %v", s.Replica(), has, err)
		}
	}
}
