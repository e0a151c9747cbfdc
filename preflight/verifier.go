package preflight

import (
	"context"
	"fmt"
	"time"

	"github.com/contractrefine/autonomy/internal/canon"
	"github.com/contractrefine/autonomy/preflight/envelope"
)

// DefaultBindingWindow is how long a passing decision stays bindable when
// Options.BindingWindow is zero.
const DefaultBindingWindow = 5 * time.Minute

// Verifier decides a preflight. A deny is a Decision, not an error: Evaluate
// returns an error only when it was called without a request.
type Verifier interface {
	Evaluate(ctx context.Context, in Input) (*Decision, error)
}

var _ Verifier = (*DefaultVerifier)(nil)

// Input is everything one evaluation reads besides the verifier's options.
type Input struct {
	Request *Request
	// Envelope is the validated context.request, nil when there is none.
	Envelope *envelope.Envelope
	// Governance is the bundle's autonomy data; nil reads as an empty
	// bundle, in which no kind is a capability.
	Governance *Governance
	// Clauses checks the capabilities' declared clauses; nil checks none.
	Clauses ClauseChecker
	// Attempt is the repair attempt this request is (1 = the first).
	Attempt int
}

// Options configures a DefaultVerifier. The zero value is usable, except
// that a request naming a decision chain then fails closed.
type Options struct {
	// Chain resolves the audit ids of context.decision_chain.
	Chain ChainResolver
	// BindingWindow bounds how long a passing decision is bindable;
	// 0 means DefaultBindingWindow.
	BindingWindow time.Duration
	// Offline makes a chain id the resolver does not find an advisory
	// failure instead of a blocking one (contract_refine.offline).
	Offline bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Kinds is the rule plan step kinds follow (plan_shape); the zero
	// value is the /v1/tool rule.
	Kinds KindRule
}

// DefaultVerifier runs the seven contracts of docs/API.md#preflightdecision and the declared
// clauses, and composes the outcome of docs/API.md#how-the-outcome-is-composed. It holds no mutable
// state, so one value serves concurrent evaluations.
type DefaultVerifier struct {
	chain   ChainResolver
	window  time.Duration
	offline bool
	now     func() time.Time
	kinds   KindRule
}

// NewVerifier returns a verifier with opts, defaults filled in.
func NewVerifier(opts Options) *DefaultVerifier {
	v := &DefaultVerifier{chain: opts.Chain, window: opts.BindingWindow, offline: opts.Offline, now: opts.Now,
		kinds: opts.Kinds}
	if v.window <= 0 {
		v.window = DefaultBindingWindow
	}
	if v.now == nil {
		v.now = time.Now
	}
	return v
}

// contract is one entry of the catalog.
type contract struct {
	name  string
	check func(e *evaluation) (Result, error)
}

// contracts returns the catalog with its checks, in catalog order.
func contracts() [7]contract {
	return [7]contract{
		{ContractPlanShape, checkPlanShape},
		{ContractArgumentProvenance, checkArgumentProvenance},
		{ContractCapabilityInZone, checkCapabilityInZone},
		{ContractRollback, checkRollbackContract},
		{ContractExpectedEvidence, checkExpectedEvidence},
		{ContractAttestationFreshness, checkAttestationFreshness},
		{ContractDecisionChainComplete, checkDecisionChain},
	}
}

// evaluation is the state of one Evaluate call, shared by the contracts.
type evaluation struct {
	ctx     context.Context
	req     *Request
	env     *envelope.Envelope
	gov     *Governance
	now     time.Time
	offline bool
	chain   ChainResolver
	kinds   KindRule

	input        any
	inputDecoded bool
	inputOK      bool
	// inputCanon holds the canonical form of each input value arguments
	// claim to copy, by pointer: many arguments may name one value.
	inputCanon map[string][]byte
	// hintBytes counts the canonical bytes of input values offered as
	// hints so far (maxInputHintBytes).
	hintBytes int
}

// envelopeInput is the envelope's input, decoded once, with json.Number
// numbers; false when there is no envelope or its input does not parse.
func (e *evaluation) envelopeInput() (any, bool) {
	if e.env == nil {
		return nil, false
	}
	if !e.inputDecoded {
		e.inputDecoded = true
		v, err := canon.Parse(e.env.Input)
		e.input, e.inputOK = v, err == nil
	}
	return e.input, e.inputOK
}

// Evaluate runs every contract and clause on in and composes the decision.
// PreflightID and AuditID are left empty for the caller to assign.
func (v *DefaultVerifier) Evaluate(ctx context.Context, in Input) (*Decision, error) {
	if in.Request == nil {
		return nil, ErrNilRequest
	}
	now := v.now().UTC()
	e := &evaluation{
		ctx: ctx, req: in.Request, env: in.Envelope, gov: in.Governance,
		now: now, offline: v.offline, chain: v.chain, kinds: v.kinds,
	}

	var failedClosed string
	rows := make([]Result, 0, 7)
	for _, c := range contracts() {
		r, reason := runContract(e, c)
		if failedClosed == "" {
			failedClosed = reason
		}
		rows = append(rows, r)
	}
	clauses, reason := clauseRows(in.Request, in.Clauses)
	if failedClosed == "" {
		failedClosed = reason
	}

	d := &Decision{
		ContractResults: rows,
		ClauseResults:   clauses,
		Attempt:         in.Attempt,
		DecidedAt:       now.Format(time.RFC3339Nano),
	}
	if failedClosed != "" {
		d.Outcome, d.Reason = OutcomeDeny, failedClosed
	} else {
		d.Outcome, d.Reason = compose(rows, clauses)
	}
	d.Eligibility = eligibility(d.Outcome, in.Request, in.Envelope, now, v.window)
	if d.Eligibility.Allowed {
		expires, _ := time.Parse(time.RFC3339Nano, d.Eligibility.ExpiresAt)
		d.Eligibility.ApprovalsRequired = approvalsRequired(in.Request, in.Governance, in.Envelope, now, expires)
	}
	return d, nil
}

// runContract runs one contract, turning a panic or an error into a
// fail-closed row and returning its reason ("" when the contract ran).
func runContract(e *evaluation, c contract) (r Result, failedClosed string) {
	defer func() {
		if p := recover(); p != nil {
			r = failClosed(c.name, ReasonVerifierUnavailable, "the contract panicked")
			failedClosed = ReasonVerifierUnavailable
		}
	}()
	r, err := c.check(e)
	if err != nil {
		return failClosed(c.name, ReasonResolverError, err.Error()), ReasonResolverError
	}
	return r, ""
}

// clauseRows runs the declared clauses on every step; each violation is a
// blocking row. A panicking checker fails the decision closed. A plan over
// MaxPlanSteps is refused by plan_shape whatever its clauses say, so they
// are not run: each clause is cost-limited, but thousands of steps in one
// request would multiply that limit (seconds of CPU, megabytes of rows).
func clauseRows(req *Request, checker ClauseChecker) (rows []Result, failedClosed string) {
	rows = []Result{}
	if checker == nil || len(req.Plan.Steps) > MaxPlanSteps {
		return rows, ""
	}
	for _, s := range req.Plan.Steps {
		violations, panicked := checkClauses(checker, s)
		if panicked {
			rows = append(rows, failClosed(s.ID+":clauses", ReasonVerifierUnavailable, "the clause checker panicked"))
			if failedClosed == "" {
				failedClosed = ReasonVerifierUnavailable
			}
			continue
		}
		for _, cv := range violations {
			rows = append(rows, Result{
				Contract:    fmt.Sprintf("%s:%s[%d]", s.ID, cv.Clause, cv.Index),
				Outcome:     RowFail,
				Severity:    SeverityBlocking,
				Reason:      clauseReason(cv),
				RepairHints: []Hint{},
				Evidence: map[string]any{
					"step":       s.ID,
					"kind":       s.Kind,
					"expression": cv.Expression,
					"message":    cv.Message,
				},
			})
		}
	}
	return rows, failedClosed
}

func checkClauses(checker ClauseChecker, s Step) (violations []ClauseViolation, panicked bool) {
	defer func() {
		if recover() != nil {
			violations, panicked = nil, true
		}
	}()
	args := s.Args
	if args == nil {
		args = map[string]any{}
	}
	return checker.Check(s.Kind, args), false
}

// clauseReason keeps a clause row's reason in the <layer>: <subreason>
// shape (ValidReason) even if the
// checker hands back a malformed one.
func clauseReason(cv ClauseViolation) string {
	if ValidReason(cv.Reason) {
		return cv.Reason
	}
	if cv.Clause == "invariant" {
		return ReasonInvariantViolated
	}
	return ReasonPreconditionViolated
}

// compose applies docs/API.md#how-the-outcome-is-composed to the contract rows and then the clause rows.
// Only blocking failures count; advisory ones stay in their rows.
func compose(rows, clauses []Result) (Outcome, string) {
	first := ""
	allRepairable := true
	for _, list := range [][]Result{rows, clauses} {
		for _, r := range list {
			if r.Outcome != RowFail || r.Severity != SeverityBlocking {
				continue
			}
			if first == "" {
				first = r.Reason
			}
			if !hasBoundedHint(r) {
				allRepairable = false
			}
		}
	}
	switch {
	case first == "":
		return OutcomePass, ReasonPassed
	case allRepairable:
		return OutcomeRepairRequired, ReasonRepairRequired
	}
	return OutcomeDeny, first
}

// eligibility is what the gate will accept under the decision: the plan's
// kinds on pass, nothing otherwise, until the window or the envelope's
// deadline ends, whichever is first.
func eligibility(outcome Outcome, req *Request, env *envelope.Envelope, now time.Time, window time.Duration) Eligibility {
	expires := now.Add(window)
	if env != nil && !env.Deadline.IsZero() && env.Deadline.Before(expires) {
		expires = env.Deadline
	}
	el := Eligibility{
		Allowed:          outcome == OutcomePass,
		RequiredRollback: req.Context.RequiredRollback,
		BoundToolKinds:   []string{},
		ExpiresAt:        expires.UTC().Format(time.RFC3339Nano),
	}
	if el.Allowed {
		seen := map[string]bool{}
		for _, s := range req.Plan.Steps {
			if !seen[s.Kind] {
				seen[s.Kind] = true
				el.BoundToolKinds = append(el.BoundToolKinds, s.Kind)
			}
		}
	}
	return el
}

// NotEvaluated returns the deny decision for a request refused before any
// contract ran, such as contract: repair_exhausted: all seven rows are
// not_applicable and nothing is bindable. Its eligibility is what any
// decision of req would carry (expires_at bounded by the envelope's
// deadline, the required rollback); req and env may be nil. A window of 0
// means DefaultBindingWindow.
func NotEvaluated(reason string, attempt int, req *Request, env *envelope.Envelope, now time.Time, window time.Duration) *Decision {
	if window <= 0 {
		window = DefaultBindingWindow
	}
	now = now.UTC()
	rows := make([]Result, 0, 7)
	for _, name := range Catalog() {
		rows = append(rows, notApplicable(name, "not evaluated: "+reason))
	}
	if req == nil {
		req = &Request{}
	}
	return &Decision{
		Outcome:         OutcomeDeny,
		Reason:          reason,
		ContractResults: rows,
		ClauseResults:   []Result{},
		Eligibility:     eligibility(OutcomeDeny, req, env, now, window),
		Attempt:         attempt,
		DecidedAt:       now.Format(time.RFC3339Nano),
	}
}

// NotEvaluated is the package NotEvaluated on the verifier's clock and
// binding window.
func (v *DefaultVerifier) NotEvaluated(reason string, attempt int) *Decision {
	return NotEvaluated(reason, attempt, nil, nil, v.now(), v.window)
}
