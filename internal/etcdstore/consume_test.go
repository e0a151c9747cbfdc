package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// spend decides a consume in etcd as Consume does, through the shared
// transactions, and writes no frames.
func (s *Store) spend(ctx context.Context, r *wal.ConsumeRequest) (wal.ConsumeResult, error) {
	res, _, err := s.decide(ctx, r, false)
	return res, err
}

// recordMany records n one-step bindings, of ids name_00, name_01, ….
func recordMany(t *testing.T, s *Store, name string, n int) []preflight.Binding {
	t.Helper()
	bs := make([]preflight.Binding, n)
	for i := range bs {
		bs[i] = recordSteps(t, s, fmt.Sprintf("%s_%02d", name, i), 1)
	}
	return bs
}

// recordSteps records a binding of id with steps steps of one kind and
// args.
func recordSteps(t *testing.T, s *Store, id string, steps int) preflight.Binding {
	t.Helper()
	b := preflight.Binding{PreflightID: id, AuditID: "au_" + id, Outcome: preflight.OutcomePass,
		ActorID: "user:a", ExpiresAt: time.Now().Add(time.Hour)}
	for i := range steps {
		b.Steps = append(b.Steps, preflight.BoundStep{ID: fmt.Sprintf("s%d", i+1), Kind: "refund.create", ArgsDigest: "sha256:a"})
	}
	if _, err := s.RecordPreflight(context.Background(), wal.PreflightRecord{Binding: b, Decision: []byte(`{}`), Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConcurrentConsumesOfOneID: 64 concurrent consumes of one binding,
// whose attempts on one marker key cannot share a transaction (etcd
// refuses a key put twice in one), spend each step exactly once, and the
// rest are replays; no consume fails. A binding of three steps of the
// kind makes the losers of one step go on to the next.
func TestConcurrentConsumesOfOneID(t *testing.T) {
	s := open(t, "replica-a", newPrefix(), t.TempDir())
	defer closeStore(s)
	const calls = 64
	for _, steps := range []int{1, 3} {
		for round := range 4 {
			b := recordSteps(t, s, fmt.Sprintf("pf_one_%d_%d", steps, round), steps)
			var wg sync.WaitGroup
			results := make([]wal.ConsumeResult, calls)
			errs := make([]error, calls)
			start := make(chan struct{})
			for i := range calls {
				wg.Go(func() {
					<-start
					results[i], errs[i] = s.Consume(context.Background(), wal.ConsumeRequest{Binding: &b,
						Kind: "refund.create", ArgsDigest: "sha256:a", RequestID: fmt.Sprintf("req-%d", i),
						CallDigest: "sha256:call", Time: time.Now()})
				})
			}
			close(start)
			wg.Wait()
			spent := map[int]int{}
			for i, r := range results {
				if errs[i] != nil {
					t.Fatalf("%d steps, round %d: consume %d: %v", steps, round, i, errs[i])
				}
				switch r.Status {
				case wal.Consumed:
					spent[r.StepIndex]++
				case wal.Replay:
				default:
					t.Errorf("%d steps, round %d: consume %d: %v", steps, round, i, r.Status)
				}
			}
			if len(spent) != steps {
				t.Errorf("%d steps, round %d: steps consumed %v, want each once", steps, round, spent)
			}
			for i, n := range spent {
				if n != 1 {
					t.Errorf("%d steps, round %d: step %d consumed %d times", steps, round, i, n)
				}
			}
		}
	}
}

// TestConsumeCallerGivingUp: callers whose context is done stop waiting
// (503) without failing the consumes they share transactions with.
func TestConsumeCallerGivingUp(t *testing.T) {
	s := open(t, "replica-a", newPrefix(), t.TempDir())
	defer closeStore(s)
	const calls = 32
	bs := make([]preflight.Binding, calls)
	for i := range bs {
		bs[i] = recordSteps(t, s, fmt.Sprintf("pf_giveup_%02d", i), 1)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	errs := make([]error, calls)
	results := make([]wal.ConsumeResult, calls)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range calls {
		wg.Go(func() {
			ctx := context.Background()
			if i%2 == 1 {
				ctx = done
			}
			<-start
			results[i], errs[i] = s.spend(ctx, &wal.ConsumeRequest{Binding: &bs[i], Kind: "refund.create",
				ArgsDigest: "sha256:a", RequestID: "r", Time: time.Now()})
		})
	}
	close(start)
	wg.Wait()
	for i := 0; i < calls; i += 2 {
		if errs[i] != nil || results[i].Status != wal.Consumed {
			t.Errorf("consume %d beside callers giving up: %v, %v; want consumed", i, results[i].Status, errs[i])
		}
	}
	for i := 1; i < calls; i += 2 {
		if errs[i] != nil && !errors.Is(errs[i], ErrUnavailable) {
			t.Errorf("consume %d of a caller giving up: %v, want ErrUnavailable", i, errs[i])
		}
	}
}

// TestSplitAttempts: one transaction carries one attempt per marker key,
// the others on that key ride with it, and at most maxAttempts keys.
func TestSplitAttempts(t *testing.T) {
	var pending []part
	for i := range maxAttempts + 10 {
		pending = append(pending, part{a: &attempt{key: fmt.Sprintf("k%d", i), bytes: 100}})
		if i%2 == 0 {
			pending = append(pending, part{a: &attempt{key: "same", bytes: 100}})
		}
	}
	batch, rest := splitParts(pending)
	keys := map[string]bool{}
	for _, p := range batch {
		a := p.a
		if a.leader == nil {
			if keys[a.key] {
				t.Fatalf("key %s has two leaders in one batch", a.key)
			}
			keys[a.key] = true
		} else if a.leader.key != a.key || a.leader.leader != nil {
			t.Fatalf("attempt on %s rides with one on %s", a.key, a.leader.key)
		}
	}
	if len(keys) != maxAttempts {
		t.Errorf("batch has %d keys, want %d", len(keys), maxAttempts)
	}
	if len(batch)+len(rest) != len(pending) {
		t.Errorf("split %d into %d and %d", len(pending), len(batch), len(rest))
	}
	for _, p := range rest {
		if keys[p.a.key] {
			t.Errorf("attempt on %s left behind though its key is in the batch", p.a.key)
		}
	}
}

// framesOf is n frames, each run of them under one audit id of its own.
func framesOf(runs ...int) []wal.Frame {
	var fs []wal.Frame
	for i, n := range runs {
		for range n {
			fs = append(fs, wal.Frame{AuditID: fmt.Sprintf("au_%d", i)})
		}
	}
	return fs
}

// TestSplitAttemptsAndCopies: attempts and copies share a transaction
// whose top-level operations (an attempt's sub-transaction, a copy's put,
// the copy index) leave room for the attempts' two levels, and the queue's
// order is kept. The frames of one audit id in a row are one put.
func TestSplitAttemptsAndCopies(t *testing.T) {
	var pending []part
	for i := range 100 {
		if i%3 == 0 {
			pending = append(pending, part{a: &attempt{key: fmt.Sprintf("k%d", i), bytes: 100}})
		} else {
			pending = append(pending, part{c: &copyRequest{frames: framesOf(2, 1), bytes: 1000}})
		}
	}
	batch, rest := splitParts(pending)
	ops, attempts, copies := 0, 0, 0
	for _, p := range batch {
		if p.a != nil {
			attempts++
			ops++
		} else {
			copies++
			ops += 2 // two audit ids
		}
	}
	ops++ // the copy index
	if attempts == 0 || copies == 0 {
		t.Fatalf("batch of %d attempts and %d copies, want both", attempts, copies)
	}
	if ops > maxAttempts {
		t.Errorf("batch of %d top-level operations with attempts, want at most %d", ops, maxAttempts)
	}
	if ops < maxAttempts-2 {
		t.Errorf("batch of %d top-level operations, want it full (%d)", ops, maxAttempts)
	}
	if len(batch)+len(rest) != len(pending) || batch[len(batch)-1] != pending[len(batch)-1] {
		t.Errorf("split %d into %d and %d, not a prefix", len(pending), len(batch), len(rest))
	}
	// A copy alone too large for the bound still goes, alone.
	big := part{c: &copyRequest{frames: framesOf(slices.Repeat([]int{1}, maxTxnOps+1)...)}}
	batch, rest = splitParts([]part{big, pending[0]})
	if len(batch) != 1 || len(rest) != 1 {
		t.Errorf("a copy too large split into %d and %d, want it alone", len(batch), len(rest))
	}
}

// TestConsumesAfterLeaseRevoked: a shared transaction whose bucket lease
// etcd no longer knows is sent again once under a new lease, for every
// consume it carries.
func TestConsumesAfterLeaseRevoked(t *testing.T) {
	s := open(t, "replica-a", newPrefix(), t.TempDir())
	defer closeStore(s)
	ctx := context.Background()
	const calls = 16
	bs := recordMany(t, s, "pf_revoked", calls)
	// The bucket's lease as etcd forgot it: granted, revoked, then made
	// the bucket's.
	g, err := s.cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.cli.Revoke(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.leases.current(ctx, s.now()); err != nil {
		t.Fatal(err)
	}
	s.leases.mu.Lock()
	s.leases.id = g.ID
	s.leases.mu.Unlock()
	errs := make(chan error, calls)
	for i := range calls {
		go func() {
			res, err := s.spend(ctx, &wal.ConsumeRequest{Binding: &bs[i], Kind: "refund.create", ArgsDigest: "sha256:a",
				RequestID: "r", Time: time.Now()})
			if err == nil && res.Status != wal.Consumed {
				err = fmt.Errorf("consume %d: %v, want consumed", i, res.Status)
			}
			errs <- err
		}()
	}
	for range calls {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if l, _ := s.leases.current(ctx, s.now()); l == g.ID {
		t.Errorf("the revoked lease %x is still the bucket's", g.ID)
	}
}

// TestConsumesFailClosed: with etcd unreachable every consume of a shared
// transaction answers ErrUnavailable within the request timeout.
func TestConsumesFailClosed(t *testing.T) {
	log, err := wal.Open(t.TempDir(), &wal.Options{Replica: "replica-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	s, err := Open(Options{Endpoints: []string{deadEndpoint(t)}, Prefix: newPrefix(), Replica: "replica-a", Log: log,
		RequestTimeout: 300 * time.Millisecond, DialTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const calls = 8
	errs := make(chan error, calls)
	for i := range calls {
		go func() {
			b := preflight.Binding{PreflightID: fmt.Sprintf("pf_dead_%d", i),
				Steps: []preflight.BoundStep{{ID: "s1", Kind: "refund.create", ArgsDigest: "sha256:a"}}}
			_, err := s.spend(context.Background(), &wal.ConsumeRequest{Binding: &b, Kind: "refund.create",
				ArgsDigest: "sha256:a", RequestID: "r", Time: time.Now()})
			errs <- err
		}()
	}
	for range calls {
		if err := <-errs; !errors.Is(err, ErrUnavailable) {
			t.Errorf("consume with etcd unreachable: %v, want ErrUnavailable", err)
		}
	}
	if s.Available() {
		t.Error("the store reports etcd available after every request failed")
	}
}

// deadEndpoint is the URL of a loopback port nothing listens on: a
// listener's, closed.
func deadEndpoint(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}
