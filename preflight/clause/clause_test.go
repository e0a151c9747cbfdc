package clause_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/preflight/clause"
)

const refundKind = "refund.create.v2"

// decode reads args the way the service does: JSON with UseNumber, so the
// json.Number path is exercised as well as plain float64.
func decode(t testing.TB, body string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	var out map[string]any
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// withdraw is the seed's withdraw contract, in CEL.
var withdraw = preflight.ContractSpec{
	Preconditions:  []string{"args.amount > 0", "args.amount <= args.account.balance"},
	Invariants:     []string{"args.account.balance >= 0"},
	Postconditions: []string{"result.account.balance == old(args.account.balance) - args.amount"},
}

var positive = preflight.ContractSpec{
	Preconditions: []string{"args.amountUsd > 0"},
	Invariants:    []string{"args.amountUsd <= 500"},
}

func TestCheck(t *testing.T) {
	numbers := make([]any, 50)
	for i := range numbers {
		numbers[i] = float64(i)
	}
	tests := map[string]struct {
		contract  preflight.ContractSpec
		costLimit uint64
		kind      string // defaults to refundKind
		args      map[string]any
		want      []preflight.ClauseViolation
	}{
		"passing clauses, json.Number int": {
			contract: positive,
			args:     map[string]any{"amountUsd": json.Number("125")},
		},
		"passing clauses, json.Number decimal": {
			contract: positive,
			args:     map[string]any{"amountUsd": json.Number("125.5")},
		},
		"passing clauses, integral float64": {
			contract: positive,
			args:     map[string]any{"amountUsd": 125.0},
		},
		"passing clauses, fractional float64": {
			contract: positive,
			args:     map[string]any{"amountUsd": 125.5},
		},
		"failing precondition": {
			contract: positive,
			args:     map[string]any{"amountUsd": -5.0},
			want: []preflight.ClauseViolation{{
				Kind: refundKind, Clause: "precondition", Index: 0, Expression: "args.amountUsd > 0",
				Message: "precondition violated: args.amountUsd > 0 (args.amountUsd = -5)",
				Reason:  "clause: precondition_violated",
			}},
		},
		"failing invariant": {
			contract: positive,
			args:     map[string]any{"amountUsd": json.Number("500.25")},
			want: []preflight.ClauseViolation{{
				Kind: refundKind, Clause: "invariant", Index: 0, Expression: "args.amountUsd <= 500",
				Message: "invariant violated: args.amountUsd <= 500 (args.amountUsd = 500.25)",
				Reason:  "clause: invariant_violated",
			}},
		},
		"missing field fails closed in both lists": {
			contract: positive,
			args:     map[string]any{"amount": 5.0},
			want: []preflight.ClauseViolation{{
				Kind: refundKind, Clause: "precondition", Index: 0, Expression: "args.amountUsd > 0",
				Message: "precondition could not be evaluated: args.amountUsd > 0: no such key: amountUsd",
				Reason:  "clause: precondition_violated",
			}, {
				Kind: refundKind, Clause: "invariant", Index: 0, Expression: "args.amountUsd <= 500",
				Message: "invariant could not be evaluated: args.amountUsd <= 500: no such key: amountUsd",
				Reason:  "clause: invariant_violated",
			}},
		},
		"nil args fail closed": {
			contract: preflight.ContractSpec{Preconditions: []string{"args.amountUsd > 0"}},
			args:     nil,
			want: []preflight.ClauseViolation{{
				Kind: refundKind, Clause: "precondition", Index: 0, Expression: "args.amountUsd > 0",
				Message: "precondition could not be evaluated: args.amountUsd > 0: no such key: amountUsd",
				Reason:  "clause: precondition_violated",
			}},
		},
		"wrong type fails closed": {
			contract: preflight.ContractSpec{Preconditions: []string{"args.amountUsd > 0"}},
			args:     map[string]any{"amountUsd": "125"},
			want: []preflight.ClauseViolation{{
				Kind: refundKind, Clause: "precondition", Index: 0, Expression: "args.amountUsd > 0",
				Message: `precondition could not be evaluated: args.amountUsd > 0: no such overload (args.amountUsd = "125")`,
				Reason:  "clause: precondition_violated",
			}},
		},
		"cost limit exceeded fails closed": {
			contract:  preflight.ContractSpec{Preconditions: []string{"args.items.all(i, args.items.all(j, i + j >= 0))"}},
			costLimit: 100,
			args:      map[string]any{"items": numbers},
			want: []preflight.ClauseViolation{{
				Kind: refundKind, Clause: "precondition", Index: 0,
				Expression: "args.items.all(i, args.items.all(j, i + j >= 0))",
				Message: "precondition could not be evaluated: args.items.all(i, args.items.all(j, i + j >= 0)): " +
					"operation cancelled: actual cost limit exceeded " +
					"(args.items = [0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,2…)",
				Reason: "clause: precondition_violated",
			}},
		},
		"same comprehension within the cost limit passes": {
			contract:  preflight.ContractSpec{Preconditions: []string{"args.items.all(i, args.items.all(j, i + j >= 0))"}},
			costLimit: 100,
			args:      map[string]any{"items": []any{1.0, 2.0}},
		},
		"validate false skips evaluation": {
			contract: preflight.ContractSpec{Preconditions: []string{"args.amountUsd > 0"}, Validate: ptr(false)},
			args:     map[string]any{"amountUsd": -5.0},
		},
		"validate true is enforced": {
			contract: preflight.ContractSpec{Preconditions: []string{"args.amountUsd > 0"}, Validate: ptr(true)},
			args:     map[string]any{"amountUsd": -5.0},
			want: []preflight.ClauseViolation{{
				Kind: refundKind, Clause: "precondition", Index: 0, Expression: "args.amountUsd > 0",
				Message: "precondition violated: args.amountUsd > 0 (args.amountUsd = -5)",
				Reason:  "clause: precondition_violated",
			}},
		},
		"message opens a false clause's message": {
			contract: preflight.ContractSpec{Preconditions: []string{"args.amountUsd > 0"}, Message: "refund amount must be positive"},
			args:     map[string]any{"amountUsd": -5.0},
			want: []preflight.ClauseViolation{{
				Kind: refundKind, Clause: "precondition", Index: 0, Expression: "args.amountUsd > 0",
				Message: "refund amount must be positive: args.amountUsd > 0 (args.amountUsd = -5)",
				Reason:  "clause: precondition_violated",
			}},
		},
		"message does not hide an evaluation error": {
			contract: preflight.ContractSpec{Preconditions: []string{"args.amountUsd > 0"}, Message: "refund amount must be positive"},
			args:     map[string]any{},
			want: []preflight.ClauseViolation{{
				Kind: refundKind, Clause: "precondition", Index: 0, Expression: "args.amountUsd > 0",
				Message: "precondition could not be evaluated: args.amountUsd > 0: no such key: amountUsd",
				Reason:  "clause: precondition_violated",
			}},
		},
		"kind without a contract": {
			contract: positive,
			kind:     "customer.read.v3",
			args:     map[string]any{"amountUsd": -5.0},
		},
		"withdraw passes": {
			contract: withdraw,
			args:     decode(t, `{"amount": 30, "account": {"balance": 100}}`),
		},
		"withdraw passes with a decimal amount": {
			contract: withdraw,
			args:     decode(t, `{"amount": 99.5, "account": {"balance": 100}}`),
		},
		"withdraw over the balance": {
			contract: withdraw,
			args:     decode(t, `{"amount": 150, "account": {"balance": 100}}`),
			want: []preflight.ClauseViolation{{
				Kind: refundKind, Clause: "precondition", Index: 1, Expression: "args.amount <= args.account.balance",
				Message: "precondition violated: args.amount <= args.account.balance (args.amount = 150, args.account.balance = 100)",
				Reason:  "clause: precondition_violated",
			}},
		},
		"withdraw from a negative balance breaks the invariant": {
			contract: withdraw,
			args:     decode(t, `{"amount": 0, "account": {"balance": -10}}`),
			want: []preflight.ClauseViolation{{
				Kind: refundKind, Clause: "precondition", Index: 0, Expression: "args.amount > 0",
				Message: "precondition violated: args.amount > 0 (args.amount = 0)",
				Reason:  "clause: precondition_violated",
			}, {
				Kind: refundKind, Clause: "precondition", Index: 1, Expression: "args.amount <= args.account.balance",
				Message: "precondition violated: args.amount <= args.account.balance (args.amount = 0, args.account.balance = -10)",
				Reason:  "clause: precondition_violated",
			}, {
				Kind: refundKind, Clause: "invariant", Index: 0, Expression: "args.account.balance >= 0",
				Message: "invariant violated: args.account.balance >= 0 (args.account.balance = -10)",
				Reason:  "clause: invariant_violated",
			}},
		},
		"bindings name odd keys and list indexes": {
			contract: preflight.ContractSpec{Preconditions: []string{`args["max-usd"] > args.items[0].usd`}},
			args:     decode(t, `{"max-usd": 10, "items": [{"usd": 12}]}`),
			want: []preflight.ClauseViolation{{
				Kind: refundKind, Clause: "precondition", Index: 0, Expression: `args["max-usd"] > args.items[0].usd`,
				Message: `precondition violated: args["max-usd"] > args.items[0].usd (args["max-usd"] = 10, args.items[0].usd = 12)`,
				Reason:  "clause: precondition_violated",
			}},
		},
		"bindings skip a loop variable named args": {
			contract: preflight.ContractSpec{Preconditions: []string{"args.items.exists(args, args.usd > 100)"}},
			args:     decode(t, `{"items": [{"usd": 12}]}`),
			want: []preflight.ClauseViolation{{
				Kind: refundKind, Clause: "precondition", Index: 0, Expression: "args.items.exists(args, args.usd > 100)",
				Message: `precondition violated: args.items.exists(args, args.usd > 100) (args.items = [{"usd":12}])`,
				Reason:  "clause: precondition_violated",
			}},
		},
		"has() of an absent field shows it missing": {
			contract: preflight.ContractSpec{Preconditions: []string{"has(args.reason)"}},
			args:     map[string]any{},
			want: []preflight.ClauseViolation{{
				Kind: refundKind, Clause: "precondition", Index: 0, Expression: "has(args.reason)",
				Message: "precondition violated: has(args.reason) (args.reason = <missing>)",
				Reason:  "clause: precondition_violated",
			}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			set, err := clause.Compile(map[string]preflight.Capability{
				refundKind:         {Contract: &tc.contract},
				"customer.read.v3": {},
			}, clause.Options{CostLimit: tc.costLimit})
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			kind := tc.kind
			if kind == "" {
				kind = refundKind
			}
			got := set.Check(kind, tc.args)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Check(%q) =\n%#v\nwant\n%#v", kind, got, tc.want)
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	syntaxMessage := "Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}"
	tests := map[string]struct {
		caps map[string]preflight.Capability
		want []Problem
	}{
		"three malformed clauses in two capabilities": {
			caps: map[string]preflight.Capability{
				refundKind: {Contract: &preflight.ContractSpec{
					Preconditions: []string{"args.amountUsd > 0", "args.amountUsd >"},
					Invariants:    []string{"args.amountUsd <= 500", "  size(args.items) + 1"},
				}},
				"account.withdraw": {Contract: &preflight.ContractSpec{
					Preconditions:  withdraw.Preconditions,
					Postconditions: []string{withdraw.Postconditions[0], "result.ok &&\n  refundable(args.amount)"},
				}},
				"customer.read.v3": {},
			},
			want: []Problem{
				{Kind: "account.withdraw", Clause: "postconditions", Index: 1, Expression: "result.ok &&\n  refundable(args.amount)",
					Line: 2, Column: 13, Message: "undeclared reference to 'refundable' (in container '')"},
				{Kind: refundKind, Clause: "preconditions", Index: 1, Expression: "args.amountUsd >",
					Line: 1, Column: 17, Message: syntaxMessage},
				{Kind: refundKind, Clause: "invariants", Index: 1, Expression: "  size(args.items) + 1",
					Line: 1, Column: 3, Message: "clause must evaluate to bool, found int"},
			},
		},
		"validate false is still compiled": {
			caps: map[string]preflight.Capability{
				refundKind: {Contract: &preflight.ContractSpec{Preconditions: []string{"args.amountUsd >"}, Validate: ptr(false)}},
			},
			want: []Problem{{Kind: refundKind, Clause: "preconditions", Index: 0, Expression: "args.amountUsd >",
				Line: 1, Column: 17, Message: syntaxMessage}},
		},
		"old and result exist only after the call": {
			caps: map[string]preflight.Capability{
				refundKind: {Contract: &preflight.ContractSpec{
					Preconditions: []string{"old(args.amountUsd) > 0", "result == 1"},
					Invariants:    []string{"old(result) == 1", "args.a == 1 &&\n  old(old(args.a)) == 1"},
				}},
			},
			want: []Problem{
				{Kind: refundKind, Clause: "preconditions", Index: 0, Expression: "old(args.amountUsd) > 0",
					Line: 1, Column: 4, Message: "undeclared reference to 'old' (in container '')"},
				{Kind: refundKind, Clause: "preconditions", Index: 1, Expression: "result == 1",
					Line: 1, Column: 1, Message: "undeclared reference to 'result' (in container '')"},
				// Placed at what old may not read: result, the inner old (a
				// call is placed at its parenthesis, as CEL places calls).
				{Kind: refundKind, Clause: "invariants", Index: 0, Expression: "old(result) == 1",
					Line: 1, Column: 5, Message: "old(e) is the value of e before the call, when only args exist: e may read args only, and no old inside old"},
				{Kind: refundKind, Clause: "invariants", Index: 1, Expression: "args.a == 1 &&\n  old(old(args.a)) == 1",
					Line: 2, Column: 10, Message: "old(e) is the value of e before the call, when only args exist: e may read args only, and no old inside old"},
			},
		},
		"positions are 1-based, also for an empty clause and a limit": {
			caps: map[string]preflight.Capability{
				refundKind: {Contract: &preflight.ContractSpec{Preconditions: []string{"", deepClause}}},
			},
			want: []Problem{
				{Kind: refundKind, Clause: "preconditions", Index: 0, Expression: "", Line: 1, Column: 1, Message: syntaxMessage},
				{Kind: refundKind, Clause: "preconditions", Index: 1, Expression: deepClause, Line: 1, Column: 1,
					Message: "expression recursion limit exceeded: 250"},
			},
		},
		"a bare dyn field is not a bool": {
			caps: map[string]preflight.Capability{
				refundKind: {Contract: &preflight.ContractSpec{Postconditions: []string{"old(args.enabled)"}}},
			},
			want: []Problem{{Kind: refundKind, Clause: "postconditions", Index: 0, Expression: "old(args.enabled)",
				Line: 1, Column: 1, Message: "clause must evaluate to bool, found dyn (compare explicitly, e.g. == true)"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			set, err := clause.Compile(tc.caps, clause.Options{})
			if set != nil {
				t.Errorf("Compile returned a set alongside an error")
			}
			var ce *clause.CompileError
			if !errors.As(err, &ce) {
				t.Fatalf("Compile error = %v, want *clause.CompileError", err)
			}
			if !errors.Is(err, clause.ErrInvalidClause) {
				t.Errorf("errors.Is(err, ErrInvalidClause) = false")
			}
			if !reflect.DeepEqual(ce.Problems, tc.want) {
				t.Errorf("Problems =\n%#v\nwant\n%#v", ce.Problems, tc.want)
			}
		})
	}
}

// deepClause nests past CEL's parser recursion limit.
var deepClause = strings.Repeat("(", 300) + "args.amountUsd > 0" + strings.Repeat(")", 300)

// Problem is a local alias so the expected tables above stay short.
type Problem = clause.Problem

func TestCompileErrorText(t *testing.T) {
	_, err := clause.Compile(map[string]preflight.Capability{
		refundKind: {Contract: &preflight.ContractSpec{
			Preconditions: []string{"args.amountUsd > 0", "args.amountUsd > unknownFn()"},
			Invariants:    []string{"args.amountUsd"},
		}},
	}, clause.Options{})
	want := `clause: 2 invalid clauses: ` +
		`capability "refund.create.v2": preconditions[1] at 1:27: undeclared reference to 'unknownFn' (in container ''); ` +
		`capability "refund.create.v2": invariants[0] at 1:1: clause must evaluate to bool, found dyn (compare explicitly, e.g. == true)`
	if err == nil || err.Error() != want {
		t.Errorf("Error() =\n%v\nwant\n%s", err, want)
	}
}

func TestSetReporting(t *testing.T) {
	set, err := clause.Compile(map[string]preflight.Capability{
		"account.withdraw": {Contract: &withdraw},
		"doc.only":         {Contract: &preflight.ContractSpec{Preconditions: []string{"args.x > 0"}, Validate: ptr(false)}},
		"customer.read.v3": {},
	}, clause.Options{})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	var nilSet *clause.Set
	tests := map[string]struct {
		set            *clause.Set
		kind           string
		hasContract    bool
		enforced       bool
		postconditions []string
	}{
		"withdraw":        {set: set, kind: "account.withdraw", hasContract: true, enforced: true, postconditions: withdraw.Postconditions},
		"documentation":   {set: set, kind: "doc.only", hasContract: true},
		"no contract":     {set: set, kind: "customer.read.v3"},
		"unknown kind":    {set: set, kind: "nope"},
		"nil set is safe": {set: nilSet, kind: "account.withdraw"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.set.HasContract(tc.kind); got != tc.hasContract {
				t.Errorf("HasContract = %v, want %v", got, tc.hasContract)
			}
			if got := tc.set.Enforced(tc.kind); got != tc.enforced {
				t.Errorf("Enforced = %v, want %v", got, tc.enforced)
			}
			if got := tc.set.Postconditions(tc.kind); !reflect.DeepEqual(got, tc.postconditions) {
				t.Errorf("Postconditions = %q, want %q", got, tc.postconditions)
			}
			if got := tc.set.Check(tc.kind, map[string]any{}); len(got) != 0 && !tc.enforced {
				t.Errorf("Check on an unenforced kind = %v, want none", got)
			}
		})
	}
	// Four withdraw clauses plus the documentation-only precondition.
	if got := set.Len(); got != 5 {
		t.Errorf("Len = %d, want 5", got)
	}
	if got := nilSet.Len(); got != 0 {
		t.Errorf("nil Len = %d, want 0", got)
	}
	if got := set.Postconditions("account.withdraw"); &got[0] == &withdraw.Postconditions[0] {
		t.Errorf("Postconditions shares the bundle's slice")
	}
}

// TestCheckLeavesArgsAlone guards the copy made before evaluation: the
// caller's map is shared with other readers and must not be rewritten.
func TestCheckLeavesArgsAlone(t *testing.T) {
	set, err := clause.Compile(map[string]preflight.Capability{"account.withdraw": {Contract: &withdraw}}, clause.Options{})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	args := decode(t, `{"amount": 30, "account": {"balance": 100}}`)
	before := fmt.Sprintf("%#v", args)
	if got := set.Check("account.withdraw", args); got != nil {
		t.Fatalf("Check = %v, want pass", got)
	}
	if after := fmt.Sprintf("%#v", args); after != before {
		t.Errorf("args changed:\n%s\nwant\n%s", after, before)
	}
}

func TestCheckConcurrent(t *testing.T) {
	set, err := clause.Compile(map[string]preflight.Capability{"account.withdraw": {Contract: &withdraw}}, clause.Options{})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	pass := decode(t, `{"amount": 30, "account": {"balance": 100}}`)
	fail := decode(t, `{"amount": 150, "account": {"balance": 100}}`)
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := range 16 {
		wg.Go(func() {
			for range 50 {
				if got := set.Check("account.withdraw", pass); got != nil {
					errs <- fmt.Sprintf("goroutine %d: pass case got %v", g, got)
					return
				}
				if got := set.Check("account.withdraw", fail); len(got) != 1 || got[0].Index != 1 {
					errs <- fmt.Sprintf("goroutine %d: fail case got %v", g, got)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func BenchmarkCheck(b *testing.B) {
	set, err := clause.Compile(map[string]preflight.Capability{"account.withdraw": {Contract: &withdraw}}, clause.Options{})
	if err != nil {
		b.Fatalf("Compile: %v", err)
	}
	benches := map[string]string{
		"pass": `{"amount": 30, "account": {"balance": 100}, "memo": "rent"}`,
		"fail": `{"amount": 150, "account": {"balance": 100}, "memo": "rent"}`,
	}
	for name, body := range benches {
		args := decode(b, body)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				set.Check("account.withdraw", args)
			}
		})
	}
}

// TestInvariantAfterTheCall: invariants are evaluated on the
// response with result and status bound. One that reads them is left out
// before the call (there is no response yet) and judged after it; one that
// reads args only runs at both times.
func TestInvariantAfterTheCall(t *testing.T) {
	set, err := clause.Compile(map[string]preflight.Capability{
		"ledger.debit": {Contract: &preflight.ContractSpec{
			Invariants: []string{"args.amountUsd > 0", "status == 200 && result.balanceUsd >= 0"},
		}},
	}, clause.Options{})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	if got := set.Check("ledger.debit", map[string]any{"amountUsd": 5.0}); len(got) != 0 {
		t.Errorf("Check before the call = %+v, want no violation (the response invariant waits for the response)", got)
	}
	if got := set.Check("ledger.debit", map[string]any{"amountUsd": -5.0}); len(got) != 1 || got[0].Expression != "args.amountUsd > 0" {
		t.Errorf("Check with a negative amount = %+v, want the args invariant only", got)
	}
	if got := set.Unseen("ledger.debit"); len(got) != 1 {
		t.Errorf("Unseen = %+v, want the args invariant only", got)
	}
	tests := map[string]struct {
		result any
		status int
		held   []bool
	}{
		"balance stays positive": {result: map[string]any{"balanceUsd": 10.0}, status: 200, held: []bool{true, true}},
		"balance goes negative":  {result: map[string]any{"balanceUsd": -1.0}, status: 200, held: []bool{true, false}},
		"error status":           {result: map[string]any{"balanceUsd": 10.0}, status: 500, held: []bool{true, false}},
		"not JSON":               {result: nil, status: 200, held: []bool{true, false}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			rs := set.After("ledger.debit", preflight.AfterCall{Args: map[string]any{"amountUsd": 5.0}, Result: tc.result, Status: tc.status})
			if len(rs) != len(tc.held) {
				t.Fatalf("After = %+v, want %d results", rs, len(tc.held))
			}
			for i, r := range rs {
				if r.Clause != preflight.ClauseInvariant || r.Held != tc.held[i] {
					t.Errorf("result %d = %s held=%v (%s), want invariant held=%v", i, r.Clause, r.Held, r.Message, tc.held[i])
				}
				if !tc.held[i] && r.Reason != "clause: invariant_violated" {
					t.Errorf("result %d reason = %q", i, r.Reason)
				}
			}
		})
	}
	if !set.HasAfter("ledger.debit") {
		t.Errorf("HasAfter = false, want true")
	}
}
