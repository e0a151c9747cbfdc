package preflight

// Clause kinds of an after-call result (docs/API.md), as the outcome frame and
// the 502 body name them.
const (
	ClausePostcondition  = "postcondition"
	ClauseInvariant      = "invariant"
	ClauseOutputContract = "output_contract"
)

// AfterCall is what the tool's response gives the after-call clauses.
type AfterCall struct {
	// Args are the call's arguments, as the gate read them before the call.
	Args map[string]any
	// Result is the response body as JSON (decoded with json.Number), nil
	// when it is not JSON.
	Result any
	// Status is the HTTP status of the response.
	Status int
}

// ClauseResult is one after-call clause's verdict.
type ClauseResult struct {
	Clause     string // ClausePostcondition, ClauseInvariant or ClauseOutputContract
	Index      int    // position in the declared list
	Expression string
	Held       bool
	// Bindings are the values the expression read, by the text that reads
	// them (args.amountUsd, result.refunded, status, old(args.balance)).
	Bindings map[string]any
	// Message says why the clause failed: the contract's message, or the
	// expression and what it saw; empty when it held.
	Message string
	// Reason is the clause's reason when it fails.
	Reason string
	// Strict is false for a postcondition of a strict: false contract: its
	// failure is a warning that lets the response through.
	Strict bool
}

// OutcomeClauses evaluates a capability's postconditions and invariants on
// a tool's response. The bundle's compiled clauses implement it.
type OutcomeClauses interface {
	// After evaluates kind's postconditions, then its invariants, in
	// declared order, and returns a result for each; none when kind has no
	// contract or its contract is validate: false.
	After(kind string, in AfterCall) []ClauseResult
}
