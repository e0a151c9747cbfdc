package preflight

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/preflight/envelope"
)

// testNow is the fixed clock of every test: five seconds after the example envelopes'
// envelope timestamp, before its deadline.
var testNow = time.Date(2026, 6, 23, 14, 30, 5, 0, time.UTC)

func fixedClock() time.Time { return testNow }

// loadGovernance reads the docs/CLAUSES.md-like bundle data of testdata/governance.json.
func loadGovernance(t testing.TB) *Governance {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "governance.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g Governance
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatalf("decode governance: %v", err)
	}
	return &g
}

// refundJSON is the refund request of docs/API.md#preflightrequest without the envelope, which
// unit tests pass as an Envelope value.
const refundJSON = `{
  "intent":  { "summary": "Refund case 882", "plan_hash": "plan-882-v1" },
  "plan": { "steps": [
    { "id": "s1", "kind": "customer.read.v3", "zone": "payments",
      "args": { "caseRef": "case:882" },
      "provenance": { "caseRef": "input:/caseRef" } },
    { "id": "s2", "kind": "refund.create.v2", "zone": "payments", "depends_on": ["s1"],
      "args": { "caseRef": "case:882", "amountUsd": 125 },
      "provenance": { "caseRef": "input:/caseRef", "amountUsd": "input:/amountUsd" },
      "rollback": "rb.refund.void", "expected_evidence": ["receipt.id"] } ] },
  "context": {
    "actor": { "id": "user:example", "session_id": "session:001" },
    "attestation": { "node_id": "edge-7", "issued_at": "2026-06-23T14:29:00Z" },
    "decision_chain": [],
    "required_rollback": "rb.refund.void" } }`

func refundRequest(t testing.TB) *Request {
	t.Helper()
	req, rerr := DecodeRequest([]byte(refundJSON))
	if rerr != nil {
		t.Fatalf("decode refund request: %v", rerr)
	}
	return req
}

// echoRequest is a plan of n tool.echo steps with no side effects.
func echoRequest(n int) *Request {
	req := &Request{
		Intent:  Intent{Summary: "echo", PlanHash: "plan-echo"},
		Plan:    Plan{Steps: []Step{}},
		Context: Context{Actor: Actor{ID: "user:example", SessionID: "session:echo"}},
	}
	for i := range n {
		req.Plan.Steps = append(req.Plan.Steps, Step{
			ID: "e" + strconv.Itoa(i+1), Kind: "tool.echo", Args: map[string]any{"text": "hi"},
		})
	}
	return req
}

// highRiskEnvelope is the high-risk example envelope (testdata/high-risk.json) as the
// envelope validator would hand it over.
func highRiskEnvelope() *envelope.Envelope {
	return &envelope.Envelope{
		ContractVersion: envelope.ContractVersion,
		RequestID:       "req_20260623_002",
		IdempotencyKey:  "idem_refund_case_882",
		Timestamp:       time.Date(2026, 6, 23, 14, 30, 0, 0, time.UTC),
		Deadline:        time.Date(2026, 6, 23, 14, 30, 20, 0, time.UTC),
		ActorIDRef:      "user:example",
		TenantIDRef:     "tenant:demo",
		SessionIDRef:    "session:001",
		RiskLevel:       "high",
		Input:           json.RawMessage(`{"caseRef":"case:882","amountUsd":125}`),
		AllowedTools:    []string{"customer.read.v3", "refund.create.v2"},
		ToolPolicy:      envelope.ToolPolicy{DefaultDecision: "deny", MaxCalls: 5, AllowSideEffects: true},
		Budget:          envelope.Budget{MaxToolCalls: 4},
	}
}

// newEvaluation is the state a contract sees, on the fixed clock.
func newEvaluation(req *Request, env *envelope.Envelope, gov *Governance) *evaluation {
	return &evaluation{ctx: context.Background(), req: req, env: env, gov: gov, now: testNow}
}

// assertJSON fails unless got encodes to the same JSON value as want.
func assertJSON(t *testing.T, got any, want string) {
	t.Helper()
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	var g, w any
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad expectation %s: %v", want, err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("got  %s\nwant %s", b, compact(want))
	}
}

func compact(s string) string {
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// refundClauses is a hand-written ClauseChecker for refund.create.v2's
// one precondition, args.amountUsd > 0.
type refundClauses struct{}

// Unseen is never reached at preflight, which always has the args.
func (refundClauses) Unseen(string) []ClauseViolation { return nil }

func (refundClauses) Check(kind string, args map[string]any) []ClauseViolation {
	if kind != "refund.create.v2" {
		return nil
	}
	n, ok := args["amountUsd"].(json.Number)
	if ok {
		if f, err := n.Float64(); err == nil && f > 0 {
			return nil
		}
	}
	return []ClauseViolation{{
		Kind: kind, Clause: "precondition", Index: 0, Expression: "args.amountUsd > 0",
		Message: fmt.Sprintf("args.amountUsd > 0 is false for args.amountUsd = %v", args["amountUsd"]),
		Reason:  ReasonPreconditionViolated,
	}}
}

// chainStatus is one audit id's record for mapChain.
type chainStatus struct{ found, passed bool }

// mapChain resolves audit ids from a map; err, when set, is returned for
// every id.
type mapChain struct {
	ids map[string]chainStatus
	err error
}

func (m mapChain) ChainStatus(_ context.Context, id, _ string) (bool, bool, error) {
	if m.err != nil {
		return false, false, m.err
	}
	s := m.ids[id]
	return s.found, s.passed, nil
}

// testChain knows one passed and one denied decision.
func testChain() mapChain {
	return mapChain{ids: map[string]chainStatus{
		"au_passed00000000000": {found: true, passed: true},
		"au_denied00000000000": {found: true, passed: false},
	}}
}
