package extauthz_test

// The extauthz tests run the real gate (package binding) on a real bbolt WAL
// and real OPA; these helpers build it.

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/internal/bundle"
	"github.com/contractrefine/autonomy/internal/bundle/bundletest"
	"github.com/contractrefine/autonomy/internal/ids"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// principal is the mTLS identity Envoy reports for the agent, and the
// actor id of the test preflights.
const principal = "spiffe://cluster.local/ns/agents/sa/agent-1"

const testPolicy = `package autonomy

import rego.v1

allow if input.action.kind == ""

allow if {
	input.action.kind != "tool.nonbool"
	data.autonomy.capabilities[input.action.kind]
}

# A policy bug: allow is not a boolean, an evaluation error.
allow := "yes" if input.action.kind == "tool.nonbool"
`

const testData = `autonomy:
  capabilities:
    tool.echo:   { zones: ["*"] }
    tool.shell:  { zones: ["*"], side_effects: true, requires_preflight: true }
    tool.nonbool: { zones: ["*"] }
`

func loadTestBundle(t testing.TB) *bundle.Bundle {
	t.Helper()
	return bundletest.Load(t, map[string]string{"policy.rego": testPolicy, "data.yaml": testData}, nil)
}

type env struct {
	t    testing.TB
	db   *wal.DB
	gate *binding.Gate
	mu   sync.Mutex
	now  time.Time
}

func newEnv(t testing.TB, mode binding.Mode, opts ...func(*binding.Options)) *env {
	t.Helper()
	b := loadTestBundle(t)
	db, err := wal.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	e := &env{t: t, db: db, now: time.Date(2026, 6, 23, 14, 29, 0, 0, time.UTC)}
	o := binding.Options{Store: db, Log: db, Policy: func() binding.Policy { return b }, Mode: mode,
		Now: e.clock, NewID: ids.Audit}
	for _, f := range opts {
		f(&o)
	}
	e.gate = binding.New(o)
	return e
}

func (e *env) clock() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

// record writes a passing preflight for one step of kind with args, for
// the actor principal, through the WAL API.
func (e *env) record(kind string, args map[string]any) preflight.Binding {
	e.t.Helper()
	req := &preflight.Request{Plan: preflight.Plan{Steps: []preflight.Step{{ID: "s1", Kind: kind, Args: args}}},
		Context: preflight.Context{Actor: preflight.Actor{ID: principal}}}
	d := &preflight.Decision{PreflightID: ids.Preflight(), AuditID: ids.Audit(), Outcome: preflight.OutcomePass,
		Reason: preflight.ReasonPassed, Eligibility: preflight.Eligibility{Allowed: true, BoundToolKinds: []string{kind}}}
	b, err := preflight.BindingOf(req, d, e.clock().Add(5*time.Minute))
	if err != nil {
		e.t.Fatal(err)
	}
	raw, err := d.CanonicalJSON()
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.db.RecordPreflight(context.Background(), wal.PreflightRecord{Binding: b, Decision: raw, Time: e.clock()}); err != nil {
		e.t.Fatal(err)
	}
	return b
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
		if f.Kind == wal.KindDecision {
			a, err := f.Decision()
			if err != nil {
				e.t.Fatal(err)
			}
			out = append(out, a)
		}
	}
	return out
}

// denyBody is the JSON body of a deny.
type denyBody struct {
	Error struct {
		Code    string `json:"code"`
		Reason  string `json:"reason"`
		AuditID string `json:"audit_id"`
	} `json:"error"`
}

func decodeDeny(t testing.TB, b []byte) denyBody {
	t.Helper()
	var d denyBody
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("deny body %s: %v", b, err)
	}
	return d
}
