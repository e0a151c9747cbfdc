package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

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
// the others on that key ride with it, and at most maxTxnOps keys.
func TestSplitAttempts(t *testing.T) {
	var pending []*attempt
	for i := range maxTxnOps + 10 {
		pending = append(pending, &attempt{key: fmt.Sprintf("k%d", i), bytes: 100})
		if i%2 == 0 {
			pending = append(pending, &attempt{key: "same", bytes: 100})
		}
	}
	batch, rest := splitAttempts(pending)
	keys := map[string]bool{}
	for _, a := range batch {
		if a.leader == nil {
			if keys[a.key] {
				t.Fatalf("key %s has two leaders in one batch", a.key)
			}
			keys[a.key] = true
		} else if a.leader.key != a.key || a.leader.leader != nil {
			t.Fatalf("attempt on %s rides with one on %s", a.key, a.leader.key)
		}
	}
	if len(keys) != maxTxnOps {
		t.Errorf("batch has %d keys, want %d", len(keys), maxTxnOps)
	}
	if len(batch)+len(rest) != len(pending) {
		t.Errorf("split %d into %d and %d", len(pending), len(batch), len(rest))
	}
	for _, a := range rest {
		if keys[a.key] {
			t.Errorf("attempt on %s left behind though its key is in the batch", a.key)
		}
	}
}
