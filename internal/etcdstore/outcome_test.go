package etcdstore

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
		OutputMaxBytes: new(int64(512))}); err != nil {
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

// failingStub is the store's KV stub whose next transactions, while
// failures lasts, fail without reaching etcd.
type failingStub struct {
	etcdserverpb.KVClient
	failures atomic.Int32
}

func (f *failingStub) Txn(ctx context.Context, in *etcdserverpb.TxnRequest, opts ...grpc.CallOption) (*etcdserverpb.TxnResponse, error) {
	if f.failures.Add(-1) >= 0 {
		return nil, status.Error(codes.Unavailable, "etcd away")
	}
	return f.KVClient.Txn(ctx, in, opts...)
}

// TestOutcomeCopyFailureIsRetried: an outcome frame whose copy fails is in
// the log, and AppendOutcome says so (the response goes as judged, the
// record saying what the caller got); the copy is sent again until etcd
// takes it, and the other replica's audit join then shows the frame.
func TestOutcomeCopyFailureIsRetried(t *testing.T) {
	ctx := context.Background()
	prefix := newPrefix()
	a := open(t, "replica-a", prefix, t.TempDir())
	defer closeStore(a)
	b := open(t, "replica-b", prefix, t.TempDir())
	defer closeStore(b)
	stub := &failingStub{KVClient: a.kv}
	stub.failures.Store(2)
	a.kv = stub
	f, err := a.AppendOutcome(ctx, wal.OutcomeRecord{AuditID: "au_recopy", Time: time.Now(),
		Attrs: wal.OutcomeAttrs{RequestID: "rq-1", Outcome: wal.OutcomeOK}})
	if err != nil {
		t.Fatalf("an outcome whose copy failed: %v; want it recorded, as the log has it", err)
	}
	if fs := framesAfter(t, a, f.Seq-1); len(fs) != 1 || fs[0].Kind != wal.KindOutcome {
		t.Fatalf("replica-a's log after the outcome: %+v", fs)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if has, err := b.HasOutcome(ctx, "au_recopy", "rq-1"); err == nil && has {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("replica-b's audit join still lacks the outcome whose copy failed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	checkClean(t, a)
}
