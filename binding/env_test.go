package binding_test

// The test environment of the gate's tests: a real bbolt WAL in a temporary
// directory, real OPA through internal/bundle on a test bundle written to
// disk, an injected clock and deterministic audit ids.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/internal/bundle"
	"github.com/contractrefine/autonomy/internal/bundle/bundletest"
	"github.com/contractrefine/autonomy/internal/ids"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

var t0 = time.Date(2026, 6, 23, 14, 29, 0, 0, time.UTC)

const (
	actorID     = "user:example"
	bindingLife = 5 * time.Minute
)

// testPolicy is the operator policy of the tests. Ordinary kinds are
// allowed when they are capabilities; a few kinds exercise each way a
// policy can say no or fail.
const testPolicy = `package autonomy

import rego.v1

special := {"tool.blocked", "tool.undefined", "tool.divzero", "tool.nonbool", "tool.conflict", "tool.probe"}

allow if input.action.kind == ""

allow if {
	not special[input.action.kind]
	data.autonomy.capabilities[input.action.kind]
}

# A plain deny with an operator reason, folded into the reason shape.
allow := false if input.action.kind == "tool.blocked"

deny_reason := "Blocked by Operator!" if input.action.kind == "tool.blocked"

# tool.undefined: no rule applies, allow is undefined.

# A builtin error: without strict builtin errors OPA makes the rule undefined.
allow if {
	input.action.kind == "tool.divzero"
	1 / count(input.action.args) > 0
}

# Evaluation errors: a non-boolean allow, and two values for one complete rule.
allow := "yes" if input.action.kind == "tool.nonbool"

allow if input.action.kind == "tool.conflict"

allow := false if input.action.kind == "tool.conflict"

# tool.probe always denies and reports what the policy saw as its reason.
allow := false if input.action.kind == "tool.probe"

pf_state := "null" if input.preflight == null

pf_state := input.preflight.outcome if input.preflight != null

deny_reason := sprintf("probe pf %s mode %s actor %s", [pf_state, input.mode, input.actor.id]) if {
	input.action.kind == "tool.probe"
}
`

const testData = `autonomy:
  capabilities:
    tool.echo:        { zones: ["*"], side_effects: false }
    tool.shell:       { zones: ["*"], side_effects: true, requires_preflight: true }
    tool.probe:       { zones: ["*"], requires_preflight: true }
    tool.blocked:     { zones: ["*"] }
    tool.divzero:     { zones: ["*"] }
    tool.nonbool:     { zones: ["*"] }
    tool.conflict:    { zones: ["*"] }
    tool.guarded:     { zones: ["*"], contract: { invariants: ["!has(args.force)"] } }
    refund.create.v2:
      zones: ["payments"]
      side_effects: true
      requires_preflight: true
      requires_rollback: true
      rollbacks: ["rb.refund.void"]
      evidence: ["receipt.id"]
      bind_arguments: true
      contract:
        preconditions: ["args.amountUsd > 0"]
`

// loadTestBundle writes the test bundle to a temporary directory and loads
// it with OPA, as the service loads --bundle DIR.
func loadTestBundle(t testing.TB) *bundle.Bundle {
	t.Helper()
	return bundletest.Load(t, map[string]string{"policy.rego": testPolicy, "data.yaml": testData}, nil)
}

// postconditionBundle is a bundle whose policy allows every call and whose
// one capability, kind, has the postcondition cond.
func postconditionBundle(t testing.TB, kind, cond string) *bundle.Bundle {
	t.Helper()
	data := fmt.Sprintf("autonomy:\n  capabilities:\n    %s:\n      zones: [\"*\"]\n      contract:\n        postconditions: [%q]\n", kind, cond)
	return bundletest.Load(t, map[string]string{"policy.rego": "package autonomy\n\nimport rego.v1\n\nallow := true\n", "data.yaml": data}, nil)
}

// testClock is the injected clock.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// countObserver counts what the gate reports.
type countObserver struct {
	hits, misses, evictions, decisions atomic.Int64
}

func (o *countObserver) CacheLookup(hit bool) {
	if hit {
		o.hits.Add(1)
	} else {
		o.misses.Add(1)
	}
}
func (o *countObserver) CacheEvicted()                                 { o.evictions.Add(1) }
func (o *countObserver) GateDecision(*binding.Decision, time.Duration) { o.decisions.Add(1) }

// env is one gate on its own WAL.
type env struct {
	t      testing.TB
	db     *wal.DB
	clock  *testClock
	policy atomic.Pointer[binding.Policy]
	obs    *countObserver
	gate   *binding.Gate
	opts   binding.Options // what gate was built with
	nextID atomic.Int64
}

// newEnv opens a WAL in a temporary directory and builds a gate on it in
// mode; opts adjust the gate's options before it is built.
func newEnv(t testing.TB, b *bundle.Bundle, mode binding.Mode, opts ...func(*binding.Options)) *env {
	t.Helper()
	return newEnvWAL(t, b, mode, nil, opts...)
}

// newEnvWAL is newEnv with WAL options (benchmarks measure without fsync too).
func newEnvWAL(t testing.TB, b *bundle.Bundle, mode binding.Mode, walOpts *wal.Options, opts ...func(*binding.Options)) *env {
	t.Helper()
	db, err := wal.Open(t.TempDir(), walOpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	e := &env{t: t, db: db, clock: &testClock{now: t0}, obs: &countObserver{}}
	e.setPolicy(b)
	o := binding.Options{
		Store:    db,
		Log:      db,
		Policy:   func() binding.Policy { return *e.policy.Load() },
		Mode:     mode,
		Now:      e.clock.Now,
		NewID:    func() string { return fmt.Sprintf("au_gate%012d", e.nextID.Add(1)) },
		Observer: e.obs,
	}
	for _, f := range opts {
		f(&o)
	}
	e.opts = o
	e.gate = binding.New(o)
	return e
}

// setPolicy swaps the bundle the gate decides under.
func (e *env) setPolicy(p binding.Policy) { e.policy.Store(&p) }

func (e *env) check(r *binding.Request) binding.Decision {
	return e.gate.Check(context.Background(), r)
}

// record writes an autonomy.preflight frame for a decision with outcome
// over steps, through the WAL API as the HTTP API does, expiring
// bindingLife from now. It returns the binding the gate will find.
func (e *env) record(outcome preflight.Outcome, actor string, steps ...preflight.Step) preflight.Binding {
	e.t.Helper()
	now := e.clock.Now()
	req := &preflight.Request{Intent: preflight.Intent{Summary: "test", PlanHash: "plan-1"},
		Plan: preflight.Plan{Steps: steps}, Context: preflight.Context{Actor: preflight.Actor{ID: actor, SessionID: "s"}}}
	d := &preflight.Decision{PreflightID: ids.Preflight(), AuditID: ids.Audit(), Outcome: outcome,
		Reason: preflight.ReasonPassed, ContractResults: []preflight.Result{}, ClauseResults: []preflight.Result{},
		Eligibility: preflight.Eligibility{Allowed: outcome == preflight.OutcomePass, BoundToolKinds: []string{},
			ExpiresAt: now.Add(bindingLife).Format(time.RFC3339)},
		Attempt: 1, DecidedAt: now.Format(time.RFC3339)}
	if outcome == preflight.OutcomePass {
		for _, s := range steps {
			d.Eligibility.BoundToolKinds = append(d.Eligibility.BoundToolKinds, s.Kind)
		}
	} else {
		d.Reason = preflight.ReasonRepairRequired
	}
	b, err := preflight.BindingOf(req, d, now.Add(bindingLife))
	if err != nil {
		e.t.Fatal(err)
	}
	raw, err := d.CanonicalJSON()
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.db.RecordPreflight(context.Background(), wal.PreflightRecord{Binding: b, Decision: raw, Time: now}); err != nil {
		e.t.Fatal(err)
	}
	return b
}

func step(id, kind string, args map[string]any) preflight.Step {
	return preflight.Step{ID: id, Kind: kind, Zone: "default", Args: args}
}

// toolCall is POST /v1/tool with body {"kind","args"} and the headers given
// (lower-case names).
func toolCall(kind string, args map[string]any, headers map[string]string) *binding.Request {
	if args == nil {
		args = map[string]any{}
	}
	body, _ := json.Marshal(map[string]any{"kind": kind, "args": args})
	h := map[string]string{"content-type": "application/json"}
	for k, v := range headers {
		h[k] = v
	}
	return &binding.Request{Method: http.MethodPost, Path: "/v1/tool", Headers: h, Body: body}
}

// shellCallAs is a tool.shell call with request id req-1 and no preflight,
// sent with method and the header name and value pairs in extra.
func shellCallAs(method string, extra ...string) func(*env) *binding.Request {
	return func(*env) *binding.Request {
		h := map[string]string{binding.HeaderRequestID: "req-1"}
		for i := 0; i+1 < len(extra); i += 2 {
			h[extra[i]] = extra[i+1]
		}
		r := toolCall("tool.shell", nil, h)
		r.Method = method
		return r
	}
}

// withID returns headers carrying a preflight id and a request id.
func withID(preflightID, requestID string) map[string]string {
	return map[string]string{binding.HeaderPreflightID: preflightID, binding.HeaderRequestID: requestID}
}

// decisionFrames reads the autonomy.decision frames under auditID.
func (e *env) decisionFrames(auditID string) []wal.DecisionAttrs {
	e.t.Helper()
	frames, err := e.db.AuditFrames(context.Background(), auditID)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []wal.DecisionAttrs
	for _, f := range frames {
		if f.Kind != wal.KindDecision {
			continue
		}
		a, err := f.Decision()
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

// denyBody decodes a deny body strictly: exactly error.{code,reason,audit_id}.
func denyBody(t testing.TB, b []byte) map[string]map[string]string {
	t.Helper()
	var m map[string]map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("deny body %s: %v", b, err)
	}
	return m
}
