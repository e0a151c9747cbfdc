package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// countingKV is the client's KV counting the requests sent through it: one
// per Get, Put, Delete, Do, or Txn (the store commits every Txn it makes
// once).
type countingKV struct {
	clientv3.KV
	n atomic.Int64
}

func (c *countingKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	c.n.Add(1)
	return c.KV.Get(ctx, key, opts...)
}

func (c *countingKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	c.n.Add(1)
	return c.KV.Put(ctx, key, val, opts...)
}

func (c *countingKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	c.n.Add(1)
	return c.KV.Delete(ctx, key, opts...)
}

func (c *countingKV) Do(ctx context.Context, op clientv3.Op) (clientv3.OpResponse, error) {
	c.n.Add(1)
	return c.KV.Do(ctx, op)
}

func (c *countingKV) Txn(ctx context.Context) clientv3.Txn {
	c.n.Add(1)
	return c.KV.Txn(ctx)
}

// countingStub is the store's KV stub (pbtxn.go), which sends the
// transactions the store builds in etcd's own types, counting them into n.
type countingStub struct {
	etcdserverpb.KVClient
	n *atomic.Int64
}

func (c countingStub) Txn(ctx context.Context, in *etcdserverpb.TxnRequest, opts ...grpc.CallOption) (*etcdserverpb.TxnResponse, error) {
	c.n.Add(1)
	return c.KVClient.Txn(ctx, in, opts...)
}

// countRequests makes the store count every etcd request it sends in the
// returned countingKV.
func countRequests(s *Store) *countingKV {
	kv := &countingKV{KV: s.cli.KV}
	s.cli.KV = kv
	s.kv = countingStub{KVClient: s.kv, n: &kv.n}
	return kv
}

// holdSenders makes b's senders busy, as batches in flight would, so that
// the requests of concurrent calls wait in its queue whatever the
// machine's load; the returned release frees them once ready(queue) holds
// (or fails the test after a minute), and a sender takes what waits.
func holdSenders[T any](t *testing.T, b *batcher[T]) (release func(ready func(pending []T) bool)) {
	t.Helper()
	b.mu.Lock()
	held := b.senders - b.sending
	b.sending += held
	b.mu.Unlock()
	return func(ready func([]T) bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			b.mu.Lock()
			ok := ready(b.pending)
			if ok {
				b.sending -= held
			}
			n := len(b.pending)
			b.mu.Unlock()
			if ok {
				b.signal()
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d requests queued after a minute", n)
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// queued is a ready condition of holdSenders: n requests wait.
func queued[T any](n int) func([]T) bool {
	return func(pending []T) bool { return len(pending) >= n }
}

// TestRequestsPerCall counts the etcd requests of each call on the hot
// path (docs/PERFORMANCE.md states them): a preflight is one transaction;
// a lone consume that takes its step is one transaction, its frames'
// copies with its marker; one whose step is taken is its transaction, then
// one write of its frames' copies; a peek is one read; the binding of a
// preflight this replica recorded is none. The bucket's lease is granted
// before counting: one grant per bucket (record_ttl/24) and replica.
func TestRequestsPerCall(t *testing.T) {
	s := open(t, "replica-a", newPrefix(), t.TempDir())
	defer closeStore(s)
	kv := countRequests(s)
	ctx := context.Background()
	newB := func(n string) preflight.Binding {
		return preflight.Binding{PreflightID: "pf_requests_" + n, AuditID: "au_requests_" + n, Outcome: preflight.OutcomePass,
			ActorID: "user:a", ExpiresAt: time.Now().Add(time.Hour),
			Steps: []preflight.BoundStep{{ID: "s1", Kind: "refund.create", ArgsDigest: "sha256:" + n}}}
	}
	record := func(b preflight.Binding) {
		if _, err := s.RecordPreflight(ctx, wal.PreflightRecord{Binding: b, Decision: []byte(`{}`), Time: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	record(newB("warm")) // grants the bucket's lease

	count := func(what string, want int64, call func() error) {
		t.Helper()
		before := kv.n.Load()
		if err := call(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := kv.n.Load() - before; got != want {
			t.Errorf("%s: %d etcd requests, want %d", what, got, want)
		} else {
			t.Logf("%s: %d etcd requests", what, got)
		}
	}
	b := newB("one")
	count("preflight", 1, func() error { record(b); return nil })
	// A preflight of a repair session, as the service makes it: the lock
	// that takes a free session reads its counters, and the record
	// releases it.
	session := func(n string) func() error {
		return func() error {
			key := `["user:a","sess-requests","sha256:plan"]`
			unlock, err := s.LockSession(ctx, key)
			if err != nil {
				return err
			}
			defer unlock()
			sess, err := s.Session(ctx, key)
			if err != nil {
				return err
			}
			sb := newB(n)
			_, err = s.RecordPreflight(ctx, wal.PreflightRecord{Binding: sb, Decision: []byte(`{}`), Time: time.Now(),
				SessionKey: key, SessionAttempt: sess.Attempts + 1})
			return err
		}
	}
	count("preflight of a new session, locked", 2, session("sess1"))
	count("preflight of a counted session, locked", 2, session("sess2"))
	if sess, err := s.Session(ctx, `["user:a","sess-requests","sha256:plan"]`); err != nil || sess.Attempts != 2 {
		t.Errorf("session after two locked preflights: %+v, %v; want 2 attempts", sess, err)
	}
	// A preflight with an idempotency key, as the service makes it: the
	// claim reads the key's record, and the record releases the claim.
	count("preflight with a new idempotency key, claimed", 2, func() error {
		release, err := s.ClaimIdempotency(ctx, "idem-requests")
		if err != nil {
			return err
		}
		defer release()
		if _, err := s.Idempotency(ctx, "idem-requests"); !errors.Is(err, wal.ErrNotFound) {
			return fmt.Errorf("idempotency record before the record: %v, want not found", err)
		}
		ib := newB("idem")
		_, err = s.RecordPreflight(ctx, wal.PreflightRecord{Binding: ib, Decision: []byte(`{}`), Time: time.Now(),
			Idempotency: &wal.IdempotencyRecord{Key: "idem-requests", RequestDigest: "sha256:req", PreflightID: ib.PreflightID}})
		return err
	})
	if r, err := s.Idempotency(ctx, "idem-requests"); err != nil || r.PreflightID != "pf_requests_idem" {
		t.Errorf("idempotency record after the record: %+v, %v", r, err)
	}
	release, err := s.ClaimIdempotency(ctx, "idem-requests")
	if err != nil {
		t.Fatalf("the claim after a record that released it: %v", err)
	}
	release()
	consume := func(requestID string, want wal.ConsumeStatus) func() error {
		return func() error {
			res, err := s.Consume(ctx, wal.ConsumeRequest{Binding: &b, Kind: "refund.create", ArgsDigest: "sha256:one",
				RequestID: requestID, CallDigest: "sha256:call", Time: time.Now(),
				Decision: func(r wal.ConsumeResult) wal.FrameInput {
					return wal.FrameInput{Kind: wal.KindDecision, AuditID: b.AuditID, Time: time.Now(),
						Attrs: map[string]any{"outcome": r.Status.String()}}
				}})
			if err == nil && res.Status != want {
				t.Errorf("consume %s: %v, want %v", requestID, res.Status, want)
			}
			return err
		}
	}
	count("binding this replica recorded", 0, func() error { _, err := s.Binding(ctx, b.PreflightID); return err })
	count("peek", 1, func() error {
		_, err := s.Peek(ctx, wal.ConsumeRequest{Binding: &b, Kind: "refund.create", RequestID: "r1", Time: time.Now()})
		return err
	})
	count("consume", 1, consume("r1", wal.Consumed))
	// The failing transaction, the read of the audit id's consumed frames
	// (a repeat logs the consumed frame its call left unlogged), the copy.
	count("consume repeated (same request id)", 3, consume("r1", wal.Repeated))
	count("consume replay", 2, consume("r2", wal.Replay))
}

// TestConcurrentCopiesShareTransactions: the frame copies of concurrent
// calls go to etcd in shared transactions, and every call's copy is there
// when it returns.
func TestConcurrentCopiesShareTransactions(t *testing.T) {
	s := open(t, "replica-a", newPrefix(), t.TempDir())
	defer closeStore(s)
	ctx := context.Background()
	if _, err := s.AppendDecision(ctx, wal.FrameInput{Kind: wal.KindDecision, AuditID: "au_copies_warm", Time: time.Now(),
		Attrs: map[string]any{"outcome": "deny"}}); err != nil {
		t.Fatal(err) // grants the bucket's lease
	}
	kv := countRequests(s)
	release := holdSenders(t, s.txns)
	const calls = 64
	errs := make(chan error, calls)
	for i := range calls {
		go func() {
			f, err := s.AppendDecision(ctx, wal.FrameInput{Kind: wal.KindDecision, AuditID: fmt.Sprintf("au_copies_%02d", i),
				Time: time.Now(), Attrs: map[string]any{"outcome": "deny"}})
			if err == nil {
				var got []wal.Frame
				if got, err = s.AuditFrames(ctx, f.AuditID); err == nil && (len(got) != 1 || got[0].Hash != f.Hash) {
					err = fmt.Errorf("audit %s: %d frames", f.AuditID, len(got))
				}
			}
			errs <- err
		}()
	}
	release(func(pending []part) bool {
		frames := 0
		for _, p := range pending {
			if p.c != nil {
				frames += len(p.c.frames)
			}
		}
		return frames >= calls
	})
	for range calls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Each call read its audit join once (a Get); the copies took the rest.
	if txns := kv.n.Load() - calls; txns >= calls {
		t.Errorf("%d calls made %d copy transactions, want fewer (shared)", calls, txns)
	} else {
		t.Logf("%d concurrent calls: %d copy transactions", calls, txns)
	}
}

// TestConcurrentConsumesShareTransactions: the marker transactions of
// concurrent consumes on distinct ids go to etcd in shared transactions,
// and a lone consume sends one, at once. A transaction full of them is
// one etcd takes (--max-txn-ops).
func TestConcurrentConsumesShareTransactions(t *testing.T) {
	s := open(t, "replica-a", newPrefix(), t.TempDir())
	defer closeStore(s)
	ctx := context.Background()
	// More than maxTxnOps, so that a transaction may be full.
	const calls = 300
	bs := make([]preflight.Binding, calls+1)
	for i := range bs {
		bs[i] = preflight.Binding{PreflightID: fmt.Sprintf("pf_share_%03d", i), AuditID: fmt.Sprintf("au_share_%03d", i),
			Outcome: preflight.OutcomePass, ActorID: "user:a", ExpiresAt: time.Now().Add(time.Hour),
			Steps: []preflight.BoundStep{{ID: "s1", Kind: "refund.create", ArgsDigest: "sha256:a"}}}
		if _, err := s.RecordPreflight(ctx, wal.PreflightRecord{Binding: bs[i], Decision: []byte(`{}`), Time: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	kv := countRequests(s)
	spend := func(b *preflight.Binding) error {
		res, err := s.spend(ctx, &wal.ConsumeRequest{Binding: b, Kind: "refund.create", ArgsDigest: "sha256:a",
			RequestID: "r-" + b.PreflightID, Time: time.Now()})
		if err == nil && res.Status != wal.Consumed {
			err = fmt.Errorf("consume %s: %v, want consumed", b.PreflightID, res.Status)
		}
		return err
	}
	if err := spend(&bs[calls]); err != nil {
		t.Fatal(err)
	}
	if n := kv.n.Load(); n != 1 {
		t.Errorf("a lone consume sent %d etcd requests, want 1", n)
	}
	kv.n.Store(0)
	release := holdSenders(t, s.txns)
	errs := make(chan error, calls)
	for i := range calls {
		go func() { errs <- spend(&bs[i]) }()
	}
	release(queued[part](calls))
	for range calls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := kv.n.Load(); n >= calls {
		t.Errorf("%d concurrent consumes sent %d marker transactions, want fewer (shared)", calls, n)
	} else {
		t.Logf("%d concurrent consumes: %d marker transactions", calls, n)
	}
}

// TestConcurrentPeeksShareReads: the peeks of concurrent calls share
// read transactions, each answered for its own binding.
func TestConcurrentPeeksShareReads(t *testing.T) {
	s := open(t, "replica-a", newPrefix(), t.TempDir())
	defer closeStore(s)
	ctx := context.Background()
	const calls = 64
	bs := make([]preflight.Binding, calls)
	for i := range bs {
		bs[i] = recordSteps(t, s, fmt.Sprintf("pf_peek_%02d", i), 1)
		if i%2 == 1 {
			if _, err := s.spend(ctx, &wal.ConsumeRequest{Binding: &bs[i], Kind: "refund.create", ArgsDigest: "sha256:a",
				RequestID: "r-first", Time: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	kv := countRequests(s)
	release := holdSenders(t, s.peeks)
	errs := make(chan error, calls)
	for i := range calls {
		go func() {
			res, err := s.Peek(ctx, wal.ConsumeRequest{Binding: &bs[i], Kind: "refund.create", ArgsDigest: "sha256:a",
				RequestID: "r-peek", Time: time.Now()})
			want := wal.Consumed
			if i%2 == 1 {
				want = wal.Replay
			}
			if err == nil && res.Status != want {
				err = fmt.Errorf("peek %s: %v, want %v", bs[i].PreflightID, res.Status, want)
			}
			errs <- err
		}()
	}
	release(queued[*peekRequest](calls))
	for range calls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := kv.n.Load(); n >= calls {
		t.Errorf("%d concurrent peeks sent %d reads, want fewer (shared)", calls, n)
	} else {
		t.Logf("%d concurrent peeks: %d reads", calls, n)
	}
}

// TestConcurrentPreflightsShareTransactions: the records of concurrent
// preflights go to etcd in shared transactions, each decided on its own:
// every session is counted once, and a preflight whose session moved since
// its guard was read is refused without failing the others.
func TestConcurrentPreflightsShareTransactions(t *testing.T) {
	s := open(t, "replica-a", newPrefix(), t.TempDir())
	defer closeStore(s)
	ctx := context.Background()
	warm := preflight.Binding{PreflightID: "pf_records_warm", AuditID: "au_records_warm", Outcome: preflight.OutcomePass,
		ActorID: "user:a", ExpiresAt: time.Now().Add(time.Hour), Steps: []preflight.BoundStep{{ID: "s1", Kind: "refund.create"}}}
	if _, err := s.RecordPreflight(ctx, wal.PreflightRecord{Binding: warm, Decision: []byte(`{}`), Time: time.Now()}); err != nil {
		t.Fatal(err) // grants the bucket's lease
	}
	kv := countRequests(s)
	// The writes' transactions, each as the number of writes it carried.
	var sizes []int
	var sizesMu sync.Mutex
	send := s.writes.send
	s.writes.send = func(ctx context.Context, batch []*condWrite) {
		sizesMu.Lock()
		sizes = append(sizes, len(batch))
		sizesMu.Unlock()
		send(ctx, batch)
	}
	release := holdSenders(t, s.writes)
	const calls = 64
	errs := make(chan error, calls)
	for i := range calls {
		go func() {
			b := warm
			b.PreflightID, b.AuditID = fmt.Sprintf("pf_records_%02d", i), fmt.Sprintf("au_records_%02d", i)
			// Every other call records the same session, unlocked: one of
			// them at a time may count it.
			key := fmt.Sprintf("sess-records-%02d", i)
			if i%2 == 1 {
				key = "sess-records-shared"
			}
			_, err := s.RecordPreflight(ctx, wal.PreflightRecord{Binding: b, Decision: []byte(`{}`), Time: time.Now(),
				SessionKey: key, SessionAttempt: 1})
			if i%2 == 1 && errors.Is(err, wal.ErrConflict) {
				err = nil
			}
			errs <- err
		}()
	}
	// Every call has read its guard when its write waits.
	release(queued[*condWrite](calls))
	for range calls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// The first transaction carries the writes of the distinct sessions
	// and one of the shared session's (a transaction writes a key once);
	// each other write of the shared session goes alone, and is refused.
	sizesMu.Lock()
	if want := calls/2 + 1; len(sizes) != calls/2 || slices.Max(sizes) != want {
		t.Errorf("%d concurrent preflights' writes went in transactions of %v; want %d, one of %d", calls, sizes, calls/2, want)
	}
	sizesMu.Unlock()
	t.Logf("%d concurrent preflights: %d etcd requests", calls, kv.n.Load())
	for i := 0; i < calls; i += 2 {
		if sess, err := s.Session(ctx, fmt.Sprintf("sess-records-%02d", i)); err != nil || sess.Attempts != 1 {
			t.Errorf("session %d: %+v, %v; want 1 attempt", i, sess, err)
		}
	}
	if sess, err := s.Session(ctx, "sess-records-shared"); err != nil || sess.Attempts != 1 {
		t.Errorf("shared session: %+v, %v; want 1 attempt", sess, err)
	}
}
