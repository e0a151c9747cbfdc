package binding_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// failShapes are the requests the fail-closed tests send: one per path
// through the gate that reaches the store.
func failShapes(pf preflight.Binding) map[string]*binding.Request {
	return map[string]*binding.Request{
		"valid preflight":        toolCall("tool.echo", nil, withID(pf.PreflightID, "req-x")),
		"unknown preflight":      toolCall("tool.echo", nil, withID("pf_AAAAAAAAAAAAAAAAAAAAAA", "req-x")),
		"no header, free kind":   toolCall("tool.echo", nil, map[string]string{binding.HeaderRequestID: "req-x"}),
		"no header, needs one":   toolCall("tool.shell", nil, map[string]string{binding.HeaderRequestID: "req-x"}),
		"policy deny":            toolCall("tool.blocked", nil, map[string]string{binding.HeaderRequestID: "req-x"}),
		"wrong kind for the id":  toolCall("tool.shell", nil, withID(pf.PreflightID, "req-x")),
		"not gated":              {Method: http.MethodGet, Path: "/v1/tool", Headers: map[string]string{}},
		"gated, body unreadable": {Method: http.MethodPost, Path: "/v1/tool", Headers: map[string]string{}, BodyErr: errors.New("cut")},
	}
}

// wantUnavailable fails unless d is the fail-closed answer.
func wantUnavailable(t *testing.T, d binding.Decision) {
	t.Helper()
	if d.Allowed || d.Status != http.StatusServiceUnavailable || d.Reason != preflight.ReasonVerifierUnavailable {
		t.Fatalf("decision %+v, want 503 %s", d, preflight.ReasonVerifierUnavailable)
	}
	if body := denyBody(t, d.DenyBody())["error"]; body["code"] != "verifier_unavailable" {
		t.Fatalf("deny body %s", d.DenyBody())
	}
}

// TestStoreGoneFailsClosed: with the bbolt file closed, removed or replaced
// under the running gate, no request in any mode is allowed: each gets 503
// contract: verifier_unavailable, since none can be recorded.
func TestStoreGoneFailsClosed(t *testing.T) {
	b := loadTestBundle(t)
	faults := map[string]func(t *testing.T, db *wal.DB){
		"closed": func(t *testing.T, db *wal.DB) { db.Close() },
		"file removed": func(t *testing.T, db *wal.DB) {
			if err := os.Remove(db.Path()); err != nil {
				t.Fatal(err)
			}
		},
		"file replaced": func(t *testing.T, db *wal.DB) {
			raw, err := os.ReadFile(db.Path())
			if err != nil {
				t.Fatal(err)
			}
			tmp := filepath.Join(filepath.Dir(db.Path()), "copy.db")
			if err := os.WriteFile(tmp, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, db.Path()); err != nil {
				t.Fatal(err)
			}
		},
	}
	for fault, breakIt := range faults {
		for _, mode := range modes {
			for shape := range failShapes(preflight.Binding{}) {
				t.Run(fmt.Sprintf("%s/%s/%s", fault, mode, shape), func(t *testing.T) {
					e := newEnv(t, b, mode)
					pf := e.record(preflight.OutcomePass, actorID, step1("s1"))
					// Warm the cache, so the binding is known without the file.
					e.check(toolCall("tool.probe", nil, withID(pf.PreflightID, "warm")))
					breakIt(t, e.db)
					wantUnavailable(t, e.check(failShapes(pf)[shape]))
				})
			}
		}
	}
}

// faultyStore is the real WAL with one method failing.
type faultyStore struct {
	*wal.DB
	fail   string
	called atomic.Bool
}

var errInjected = errors.New("injected store fault")

func (s *faultyStore) Binding(ctx context.Context, id string) (preflight.Binding, error) {
	if s.fail == "Binding" {
		s.called.Store(true)
		return preflight.Binding{}, errInjected
	}
	return s.DB.Binding(ctx, id)
}

func (s *faultyStore) Decision(ctx context.Context, id string) ([]byte, error) {
	if s.fail == "Decision" {
		s.called.Store(true)
		return nil, errInjected
	}
	return s.DB.Decision(ctx, id)
}

func (s *faultyStore) Peek(ctx context.Context, r wal.ConsumeRequest) (wal.ConsumeResult, error) {
	if s.fail == "Peek" {
		s.called.Store(true)
		return wal.ConsumeResult{}, errInjected
	}
	return s.DB.Peek(ctx, r)
}

func (s *faultyStore) Consume(ctx context.Context, r wal.ConsumeRequest) (wal.ConsumeResult, error) {
	if s.fail == "Consume" {
		s.called.Store(true)
		return wal.ConsumeResult{}, errInjected
	}
	return s.DB.Consume(ctx, r)
}

func (s *faultyStore) AppendDecision(ctx context.Context, in wal.FrameInput) (wal.Frame, error) {
	if s.fail == "AppendDecision" {
		s.called.Store(true)
		return wal.Frame{}, errInjected
	}
	return s.DB.AppendDecision(ctx, in)
}

// TestNoErrorPathAllows fails each store method in turn, in every mode, for
// every request shape: whenever the failing method was reached the answer
// is 503 verifier_unavailable, and a request that did not reach it gets the
// answer a healthy store gives.
func TestNoErrorPathAllows(t *testing.T) {
	b := loadTestBundle(t)
	reached := map[string]int{}
	for _, method := range []string{"Binding", "Decision", "Peek", "Consume", "AppendDecision"} {
		for _, mode := range modes {
			for shape := range failShapes(preflight.Binding{}) {
				t.Run(fmt.Sprintf("%s/%s/%s", method, mode, shape), func(t *testing.T) {
					healthy := newEnv(t, b, mode)
					hpf := healthy.record(preflight.OutcomePass, actorID, step1("s1"))
					want := healthy.check(failShapes(hpf)[shape])

					store := &faultyStore{}
					e := newEnv(t, b, mode, func(o *binding.Options) { store.DB = o.Store.(*wal.DB); o.Store, o.Log = store, store })
					pf := e.record(preflight.OutcomePass, actorID, step1("s1"))
					store.fail = method
					d := e.check(failShapes(pf)[shape])
					if store.called.Load() {
						reached[method]++
						wantUnavailable(t, d)
						if method == "AppendDecision" {
							return
						}
						// The log still takes writes: the refusal is on record.
						f := e.decisionFrames(d.AuditID)
						if len(f) != 1 || f[0].Status != http.StatusServiceUnavailable || f[0].Outcome != "deny" ||
							f[0].Reason != preflight.ReasonVerifierUnavailable || f[0].PreflightID != d.PreflightID {
							t.Fatalf("decision frames %+v for %+v", f, d)
						}
						return
					}
					if d.Allowed != want.Allowed || d.Status != want.Status || d.Reason != want.Reason {
						t.Fatalf("store fault not reached, yet %+v differs from the healthy %+v", d, want)
					}
				})
			}
		}
	}
	for _, method := range []string{"Binding", "Decision", "Peek", "Consume", "AppendDecision"} {
		if reached[method] == 0 {
			t.Errorf("no request reached a failing %s", method)
		}
	}
}

// panicPolicy is the real bundle whose evaluation panics.
type panicPolicy struct{ binding.Policy }

func (panicPolicy) Allow(context.Context, map[string]any) (bool, string, error) { panic("policy bug") }

// TestPanicsAndMissingPolicyFailClosed: a panic inside the decision and a
// gate with no policy loaded deny with 503 in every mode.
func TestPanicsAndMissingPolicyFailClosed(t *testing.T) {
	b := loadTestBundle(t)
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnv(t, b, mode)
			pf := e.record(preflight.OutcomePass, actorID, step1("s1"))
			e.setPolicy(panicPolicy{b})
			wantUnavailable(t, e.check(toolCall("tool.echo", nil, withID(pf.PreflightID, "r1"))))
			e.setPolicy(nil)
			wantUnavailable(t, e.check(toolCall("tool.echo", nil, withID(pf.PreflightID, "r2"))))
			// Neither consumed the step.
			e.setPolicy(b)
			if d := e.check(toolCall("tool.echo", nil, withID(pf.PreflightID, "r3"))); !d.Allowed {
				t.Fatalf("after the faults: %+v", d)
			}
		})
	}
}
