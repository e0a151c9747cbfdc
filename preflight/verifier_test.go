package preflight

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/preflight/envelope"
)

// evaluateCase is one Evaluate call on the refund plan, changed by req/env.
type evaluateCase struct {
	req     func(*Request)
	env     func(*envelope.Envelope)
	noEnv   bool
	offline bool
	chain   ChainResolver
	clauses ClauseChecker
}

func (tc evaluateCase) run(t *testing.T) *Decision {
	t.Helper()
	req, env := refundRequest(t), highRiskEnvelope()
	if tc.req != nil {
		tc.req(req)
	}
	if tc.env != nil {
		tc.env(env)
	}
	if tc.noEnv {
		env = nil
	}
	chain := tc.chain
	if chain == nil {
		chain = testChain()
	}
	clauses := tc.clauses
	if clauses == nil {
		clauses = refundClauses{}
	}
	v := NewVerifier(Options{Chain: chain, Offline: tc.offline, Now: fixedClock})
	d, err := v.Evaluate(context.Background(), Input{
		Request: req, Envelope: env, Governance: loadGovernance(t), Clauses: clauses, Attempt: 1,
	})
	if err != nil {
		t.Fatalf("Evaluate: %v", err)
	}
	assertShape(t, d)
	return d
}

// assertShape checks what every decision must satisfy: seven rows in
// catalog order, well-formed reasons, non-nil slices and maps, and
// eligibility consistent with the outcome.
func assertShape(t *testing.T, d *Decision) {
	t.Helper()
	var names []string
	for _, r := range d.ContractResults {
		names = append(names, r.Contract)
	}
	if !slices.Equal(names, Catalog()) {
		t.Errorf("contract rows = %v, want %v", names, Catalog())
	}
	if !ValidReason(d.Reason) {
		t.Errorf("decision reason %q does not match the reason shape", d.Reason)
	}
	if d.ClauseResults == nil {
		t.Error("clause_results is nil")
	}
	for _, r := range append(slices.Clone(d.ContractResults), d.ClauseResults...) {
		if r.Outcome == RowFail && !ValidReason(r.Reason) {
			t.Errorf("row %s reason %q does not match the reason shape", r.Contract, r.Reason)
		}
		if r.Outcome != RowFail && r.Reason != "" {
			t.Errorf("row %s does not fail but has reason %q", r.Contract, r.Reason)
		}
		if r.Outcome == RowNotApplicable && r.Severity != SeverityInfo {
			t.Errorf("row %s is not_applicable with severity %s", r.Contract, r.Severity)
		}
		if r.RepairHints == nil || r.Evidence == nil {
			t.Errorf("row %s has nil hints or evidence", r.Contract)
		}
	}
	switch d.Outcome {
	case OutcomePass, OutcomeRepairRequired, OutcomeDeny:
	default:
		t.Errorf("outcome %q is outside the closed enum", d.Outcome)
	}
	if d.Eligibility.BoundToolKinds == nil {
		t.Error("bound_tool_kinds is nil")
	}
	if d.Eligibility.Allowed != (d.Outcome == OutcomePass) {
		t.Errorf("allowed = %v with outcome %s", d.Eligibility.Allowed, d.Outcome)
	}
	if d.Outcome != OutcomePass && len(d.Eligibility.BoundToolKinds) != 0 {
		t.Errorf("outcome %s binds %v", d.Outcome, d.Eligibility.BoundToolKinds)
	}
}

func rowOf(d *Decision, contract string) Result {
	for _, r := range d.ContractResults {
		if r.Contract == contract {
			return r
		}
	}
	return Result{}
}

func TestEvaluateComposition(t *testing.T) {
	cases := map[string]struct {
		evaluateCase
		outcome Outcome
		reason  string
		kinds   []string
	}{
		"pass": {
			outcome: OutcomePass, reason: ReasonPassed, kinds: []string{"customer.read.v3", "refund.create.v2"},
		},
		"repair required when every blocking failure has a bounded hint": {
			evaluateCase: evaluateCase{req: func(r *Request) {
				r.Plan.Steps[1].Zone = "billing"
				r.Plan.Steps[1].ExpectedEvidence = nil
			}},
			outcome: OutcomeRepairRequired, reason: ReasonRepairRequired,
		},
		"repair required when the step's rollback hint also provides the required rollback": {
			evaluateCase: evaluateCase{req: func(r *Request) { r.Plan.Steps[1].Rollback = "rb.other" }},
			outcome:      OutcomeRepairRequired, reason: ReasonRepairRequired,
		},
		"deny when no step can carry the required rollback": {
			evaluateCase: evaluateCase{req: func(r *Request) { r.Context.RequiredRollback = "rb.cancel.mission" }},
			outcome:      OutcomeDeny, reason: ReasonRollbackContractNotReady,
		},
		"deny with the first blocking reason when one has no hint": {
			evaluateCase: evaluateCase{req: func(r *Request) {
				r.Plan.Steps[1].Zone = "billing"
				r.Plan.Steps[1].Provenance["amountUsd"] = "model"
			}},
			outcome: OutcomeDeny, reason: ReasonArgumentProvenanceInvalid,
		},
		"offline advisory leaves pass": {
			evaluateCase: evaluateCase{offline: true, req: func(r *Request) {
				r.Context.DecisionChain = []string{"au_missing0000000000"}
			}},
			outcome: OutcomePass, reason: ReasonPassed, kinds: []string{"customer.read.v3", "refund.create.v2"},
		},
		"online missing chain denies": {
			evaluateCase: evaluateCase{req: func(r *Request) {
				r.Context.DecisionChain = []string{"au_missing0000000000"}
			}},
			outcome: OutcomeDeny, reason: ReasonDecisionChainIncomplete,
		},
		"clause violation denies": {
			evaluateCase: evaluateCase{noEnv: true, req: func(r *Request) {
				r.Plan.Steps[1].Args["amountUsd"] = json.Number("0")
				r.Plan.Steps[1].Provenance["amountUsd"] = "literal"
				r.Plan.Steps[1].Provenance["caseRef"] = "step:s1"
			}},
			outcome: OutcomeDeny, reason: ReasonPreconditionViolated,
		},
		"clause violation after a repairable contract denies": {
			evaluateCase: evaluateCase{req: func(r *Request) {
				r.Plan.Steps[1].Args["amountUsd"] = json.Number("-1")
			}},
			outcome: OutcomeDeny, reason: ReasonArgumentProvenanceInvalid,
		},
		"panicking resolver fails closed": {
			evaluateCase: evaluateCase{chain: panicChain{}, req: func(r *Request) {
				r.Context.DecisionChain = []string{"au_passed00000000000"}
			}},
			outcome: OutcomeDeny, reason: ReasonVerifierUnavailable,
		},
		"resolver error fails closed over a repairable failure": {
			evaluateCase: evaluateCase{chain: mapChain{err: errors.New("wal: closed")}, req: func(r *Request) {
				r.Context.DecisionChain = []string{"au_passed00000000000"}
				r.Plan.Steps[1].Zone = "billing"
			}},
			outcome: OutcomeDeny, reason: ReasonResolverError,
		},
		"panicking clause checker fails closed": {
			evaluateCase: evaluateCase{clauses: panicClauses{}},
			outcome:      OutcomeDeny, reason: ReasonVerifierUnavailable,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := tc.run(t)
			if d.Outcome != tc.outcome || d.Reason != tc.reason {
				t.Fatalf("outcome = %s %q, want %s %q", d.Outcome, d.Reason, tc.outcome, tc.reason)
			}
			kinds := tc.kinds
			if kinds == nil {
				kinds = []string{}
			}
			if !slices.Equal(d.Eligibility.BoundToolKinds, kinds) {
				t.Errorf("bound_tool_kinds = %v, want %v", d.Eligibility.BoundToolKinds, kinds)
			}
		})
	}
}

func TestEvaluateRows(t *testing.T) {
	t.Run("offline advisory row", func(t *testing.T) {
		d := evaluateCase{offline: true, req: func(r *Request) {
			r.Context.DecisionChain = []string{"au_missing0000000000"}
		}}.run(t)
		assertJSON(t, rowOf(d, ContractDecisionChainComplete), `{"contract":"decision_chain_complete","outcome":"fail","severity":"advisory",
			"reason":"contract: chain_unverifiable_offline","repair_hints":[],"evidence":{"unverifiable_offline":["au_missing0000000000"]}}`)
	})
	t.Run("rollback row with one hint for two violations", func(t *testing.T) {
		d := evaluateCase{req: func(r *Request) { r.Plan.Steps[1].Rollback = "rb.other" }}.run(t)
		if d.Outcome != OutcomeRepairRequired {
			t.Fatalf("outcome = %s (%s), want repair_required", d.Outcome, d.Reason)
		}
		assertJSON(t, rowOf(d, ContractRollback).RepairHints,
			`[{"field":"/plan/steps/1/rollback","suggestion":"rb.refund.void","bounded":true}]`)
	})
	t.Run("resolver error row", func(t *testing.T) {
		d := evaluateCase{chain: mapChain{err: errors.New("wal: closed")}, req: func(r *Request) {
			r.Context.DecisionChain = []string{"au_passed00000000000"}
		}}.run(t)
		assertJSON(t, rowOf(d, ContractDecisionChainComplete), `{"contract":"decision_chain_complete","outcome":"fail","severity":"blocking",
			"reason":"contract: resolver_error","repair_hints":[],"evidence":{"detail":"resolve decision chain au_passed00000000000: wal: closed"}}`)
	})
	t.Run("panic row", func(t *testing.T) {
		d := evaluateCase{chain: panicChain{}, req: func(r *Request) {
			r.Context.DecisionChain = []string{"au_passed00000000000"}
		}}.run(t)
		assertJSON(t, rowOf(d, ContractDecisionChainComplete), `{"contract":"decision_chain_complete","outcome":"fail","severity":"blocking",
			"reason":"contract: verifier_unavailable","repair_hints":[],"evidence":{"detail":"the contract panicked"}}`)
	})
	t.Run("clause rows", func(t *testing.T) {
		d := evaluateCase{noEnv: true, req: func(r *Request) {
			r.Plan.Steps[1].Args["amountUsd"] = json.Number("0")
			r.Plan.Steps[1].Provenance = map[string]string{"caseRef": "literal", "amountUsd": "literal"}
		}}.run(t)
		assertJSON(t, d.ClauseResults, `[{"contract":"s2:precondition[0]","outcome":"fail","severity":"blocking",
			"reason":"clause: precondition_violated","repair_hints":[],
			"evidence":{"step":"s2","kind":"refund.create.v2","expression":"args.amountUsd > 0","message":"args.amountUsd > 0 is false for args.amountUsd = 0"}}]`)
	})
	t.Run("malformed clause reason is replaced", func(t *testing.T) {
		d := evaluateCase{clauses: badReasonClauses{}}.run(t)
		if len(d.ClauseResults) != 2 || d.ClauseResults[0].Reason != ReasonInvariantViolated || d.ClauseResults[1].Reason != ReasonInvariantViolated {
			t.Fatalf("clause rows = %+v", d.ClauseResults)
		}
		if d.ClauseResults[0].Contract != "s1:invariant[2]" {
			t.Errorf("contract = %q", d.ClauseResults[0].Contract)
		}
	})
	t.Run("no clause checker", func(t *testing.T) {
		v := NewVerifier(Options{Now: fixedClock})
		d, err := v.Evaluate(context.Background(), Input{Request: echoRequest(1), Governance: loadGovernance(t)})
		if err != nil {
			t.Fatal(err)
		}
		assertShape(t, d)
		if d.Outcome != OutcomePass || len(d.ClauseResults) != 0 {
			t.Errorf("outcome %s, clause rows %v", d.Outcome, d.ClauseResults)
		}
	})
}

func TestEvaluateEligibility(t *testing.T) {
	cases := map[string]struct {
		evaluateCase
		window  time.Duration
		expires string
		kinds   []string
	}{
		"envelope deadline first": {
			expires: "2026-06-23T14:30:20Z", kinds: []string{"customer.read.v3", "refund.create.v2"},
		},
		"window first": {
			evaluateCase: evaluateCase{env: func(e *envelope.Envelope) { e.Deadline = testNow.Add(time.Hour) }},
			expires:      "2026-06-23T14:35:05Z", kinds: []string{"customer.read.v3", "refund.create.v2"},
		},
		"no deadline, custom window": {
			evaluateCase: evaluateCase{env: func(e *envelope.Envelope) { e.Deadline = time.Time{} }},
			window:       90 * time.Second,
			expires:      "2026-06-23T14:31:35Z", kinds: []string{"customer.read.v3", "refund.create.v2"},
		},
		"distinct kinds in plan order": {
			evaluateCase: evaluateCase{noEnv: true, req: func(r *Request) {
				r.Plan.Steps = append(r.Plan.Steps, Step{ID: "s3", Kind: "customer.read.v3", Zone: "payments"})
				r.Plan.Steps[1].Provenance = map[string]string{"caseRef": "literal", "amountUsd": "literal"}
			}},
			expires: "2026-06-23T14:35:05Z", kinds: []string{"customer.read.v3", "refund.create.v2"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req, env := refundRequest(t), highRiskEnvelope()
			if tc.req != nil {
				tc.req(req)
			}
			if tc.env != nil {
				tc.env(env)
			}
			if tc.noEnv {
				env = nil
			}
			v := NewVerifier(Options{BindingWindow: tc.window, Now: fixedClock})
			d, err := v.Evaluate(context.Background(), Input{Request: req, Envelope: env, Governance: loadGovernance(t), Attempt: 2})
			if err != nil {
				t.Fatal(err)
			}
			assertShape(t, d)
			want := Eligibility{Allowed: true, RequiredRollback: "rb.refund.void", BoundToolKinds: tc.kinds, ExpiresAt: tc.expires}
			assertJSON(t, d.Eligibility, mustJSON(t, want))
			if d.Attempt != 2 || d.DecidedAt != "2026-06-23T14:30:05Z" || d.PreflightID != "" || d.AuditID != "" {
				t.Errorf("attempt %d, decided_at %q, ids %q %q", d.Attempt, d.DecidedAt, d.PreflightID, d.AuditID)
			}
		})
	}
}

func TestEvaluateNilRequest(t *testing.T) {
	_, err := NewVerifier(Options{}).Evaluate(context.Background(), Input{})
	if !errors.Is(err, ErrNilRequest) {
		t.Fatalf("err = %v, want ErrNilRequest", err)
	}
}

func TestNotEvaluated(t *testing.T) {
	withRollback := &Request{Context: Context{RequiredRollback: "rb.refund.void"}}
	cases := map[string]struct {
		reason   string
		window   time.Duration
		req      *Request
		env      *envelope.Envelope
		want     string
		rollback string
	}{
		"repair exhausted": {reason: ReasonRepairExhausted, window: time.Minute, want: "2026-06-23T14:31:05Z"},
		"default window":   {reason: ReasonSessionMetadataMissing, want: "2026-06-23T14:35:05Z"},
		// The envelope's deadline bounds expires_at, refused or not (docs/API.md#preflightdecision).
		"deadline first": {reason: ReasonRepairExhausted, window: 2 * time.Minute, req: withRollback,
			env:  &envelope.Envelope{Deadline: testNow.Add(time.Minute)},
			want: "2026-06-23T14:31:05Z", rollback: "rb.refund.void"},
		"window first": {reason: ReasonRepairExhausted, window: time.Minute, req: withRollback,
			env:  &envelope.Envelope{Deadline: testNow.Add(time.Hour)},
			want: "2026-06-23T14:31:05Z", rollback: "rb.refund.void"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := NotEvaluated(tc.reason, 3, tc.req, tc.env, testNow.In(time.FixedZone("x", 3600)), tc.window)
			assertShape(t, d)
			if d.Outcome != OutcomeDeny || d.Reason != tc.reason || d.Attempt != 3 {
				t.Errorf("decision %s %q attempt %d", d.Outcome, d.Reason, d.Attempt)
			}
			if d.Eligibility.ExpiresAt != tc.want || d.DecidedAt != "2026-06-23T14:30:05Z" {
				t.Errorf("expires_at %q decided_at %q", d.Eligibility.ExpiresAt, d.DecidedAt)
			}
			if d.Eligibility.Allowed || len(d.Eligibility.BoundToolKinds) != 0 || d.Eligibility.RequiredRollback != tc.rollback {
				t.Errorf("eligibility %+v, want nothing bound, required_rollback %q", d.Eligibility, tc.rollback)
			}
			for _, r := range d.ContractResults {
				if r.Outcome != RowNotApplicable {
					t.Errorf("row %s outcome %s", r.Contract, r.Outcome)
				}
			}
		})
	}
	t.Run("method uses the verifier clock", func(t *testing.T) {
		d := NewVerifier(Options{Now: fixedClock}).NotEvaluated(ReasonRepairExhausted, 2)
		if d.DecidedAt != "2026-06-23T14:30:05Z" || d.Eligibility.ExpiresAt != "2026-06-23T14:35:05Z" {
			t.Errorf("decided_at %q expires_at %q", d.DecidedAt, d.Eligibility.ExpiresAt)
		}
	})
}

func TestReasons(t *testing.T) {
	all := []string{
		ReasonPassed, ReasonRepairRequired, ReasonRepairExhausted, ReasonSessionMetadataMissing,
		ReasonVerifierUnavailable, ReasonResolverError, ReasonIntrospectorError, ReasonPreflightRequired,
		ReasonBindingMismatch, ReasonExpired, ReasonReplay, ReasonPlanShapeInvalid,
		ReasonArgumentProvenanceInvalid, ReasonCapabilityNotInZone, ReasonRollbackContractNotReady,
		ReasonExpectedEvidenceMissing, ReasonAttestationStale, ReasonDecisionChainIncomplete,
		ReasonChainUnverifiableOffline, ReasonPreconditionViolated, ReasonInvariantViolated,
		ReasonPostconditionViolated,
	}
	for _, r := range all {
		if !ValidReason(r) {
			t.Errorf("%q does not match the reason shape", r)
		}
	}
	bad := map[string]string{
		"no space": "contract:passed", "upper": "Contract: passed", "digit first": "9c: x",
		"empty sub": "contract: ", "two colons": "a: b: c", "dash": "contract: pre-flight", "empty": "",
	}
	for name, r := range bad {
		t.Run(name, func(t *testing.T) {
			if ValidReason(r) {
				t.Errorf("ValidReason(%q) = true", r)
			}
		})
	}
	if got := Catalog(); len(got) != 7 || got[0] != "plan_shape" || got[6] != "decision_chain_complete" {
		t.Errorf("Catalog() = %v", got)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type panicChain struct{}

func (panicChain) ChainStatus(context.Context, string, string) (bool, bool, error) {
	panic("resolver bug")
}

type panicClauses struct{}

func (panicClauses) Check(string, map[string]any) []ClauseViolation { panic("checker bug") }
func (panicClauses) Unseen(string) []ClauseViolation                { panic("checker bug") }

// badReasonClauses returns a violation with a reason outside the reason shape for
// every step.
type badReasonClauses struct{}

func (badReasonClauses) Unseen(string) []ClauseViolation { return nil }

func (badReasonClauses) Check(kind string, _ map[string]any) []ClauseViolation {
	return []ClauseViolation{{Kind: kind, Clause: "invariant", Index: 2, Expression: "true", Reason: "Invariant Violated!"}}
}

// TestEvaluateConcurrent shares one verifier and one input between
// goroutines: run with -race, it shows Evaluate keeps no shared state.
func TestEvaluateConcurrent(t *testing.T) {
	v := NewVerifier(Options{Chain: testChain(), Now: fixedClock})
	in := Input{Request: refundRequest(t), Envelope: highRiskEnvelope(), Governance: loadGovernance(t), Clauses: refundClauses{}, Attempt: 1}
	in.Request.Plan.Steps[1].Zone = "billing"
	want, err := v.Evaluate(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	wantJSON := mustJSON(t, want)
	const n = 8
	results := make(chan string, n)
	for range n {
		go func() {
			d, err := v.Evaluate(context.Background(), in)
			if err != nil {
				results <- err.Error()
				return
			}
			b, _ := json.Marshal(d)
			results <- string(b)
		}()
	}
	for range n {
		if got := <-results; got != wantJSON {
			t.Errorf("concurrent decision differs:\n%s\n%s", got, wantJSON)
		}
	}
}

// countingClauses counts the steps it is asked to check.
type countingClauses struct{ calls *int }

func (c countingClauses) Check(string, map[string]any) []ClauseViolation {
	*c.calls++
	return nil
}
func (c countingClauses) Unseen(string) []ClauseViolation { return nil }

// TestOversizedPlanRunsNoClauses: a plan over MaxPlanSteps is refused by
// plan_shape, so its clauses are not run: each is cost-limited, but
// thousands of steps would multiply the limit in one request.
func TestOversizedPlanRunsNoClauses(t *testing.T) {
	v := NewVerifier(Options{Chain: testChain(), Now: fixedClock})
	for steps, wantCalls := range map[int]int{MaxPlanSteps: MaxPlanSteps, MaxPlanSteps + 1: 0, 5000: 0} {
		calls := 0
		d, err := v.Evaluate(context.Background(), Input{Request: echoRequest(steps), Governance: loadGovernance(t),
			Clauses: countingClauses{&calls}, Attempt: 1})
		if err != nil {
			t.Fatal(err)
		}
		if calls != wantCalls {
			t.Errorf("%d steps: clauses run on %d, want %d", steps, calls, wantCalls)
		}
		if steps > MaxPlanSteps && d.Outcome == OutcomePass {
			t.Errorf("%d steps: outcome pass", steps)
		}
	}
}
