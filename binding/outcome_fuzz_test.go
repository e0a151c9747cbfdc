package binding_test

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/internal/canon"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/preflight/clause"
)

// FuzzDecodeResult feeds the response decoder what a tool runtime may
// answer: whatever it reads as JSON must be one UTF-8 JSON text with a
// canonical form, anything else is null, and the postconditions evaluate
// on it without a panic.
func FuzzDecodeResult(f *testing.F) {
	for _, s := range []string{`{"balance":75}`, `{"balance":75,"balance":50}`, `{"a":1,"A":2}`, `[1e400]`,
		`"\ud800"`, "\xff", `null`, ``, `{"balance":75} {}`, `75`, `{"receipt":{"id":"r1"}}`} {
		f.Add([]byte(s))
	}
	set, err := clause.Compile(map[string]preflight.Capability{"ledger.debit": {Contract: &preflight.ContractSpec{
		Postconditions: []string{"result.balance == old(args.balance) - args.amount", "status == 200"},
		Invariants:     []string{"args.amount > 0"},
	}}}, clause.Options{})
	if err != nil {
		f.Fatal(err)
	}
	args := map[string]any{"balance": json.Number("100"), "amount": json.Number("25")}
	f.Fuzz(func(t *testing.T, body []byte) {
		result, isJSON := binding.DecodeResult(body)
		if !isJSON {
			if result != nil {
				t.Fatalf("not JSON, but result %v", result)
			}
		} else {
			if !json.Valid(body) || !utf8.Valid(body) {
				t.Fatalf("%q read as JSON", body)
			}
			if _, err := canon.Marshal(result); err != nil {
				t.Fatalf("%q read as JSON without a canonical form: %v", body, err)
			}
		}
		rs := set.After("ledger.debit", preflight.AfterCall{Args: args, Result: result, Status: 200})
		if len(rs) != 3 {
			t.Fatalf("want 3 clause results, got %+v", rs)
		}
		for _, r := range rs {
			if _, err := json.Marshal(r.Bindings); err != nil {
				t.Fatalf("bindings %v do not encode: %v", r.Bindings, err)
			}
		}
	})
}

// TestDecodeResultRefusesInexactNumbers: a result number whose text names
// another value than its double is not judged as that double (a negative
// balance read as 0, or 75.000000000000001 as 75); numbers a double holds
// are.
func TestDecodeResultRefusesInexactNumbers(t *testing.T) {
	for body, wantJSON := range map[string]bool{
		`{"balance":-1e-400}`:            false,
		`{"balance":75.000000000000001}`: false,
		`{"id":9007199254740993}`:        false,
		`[74.9999999999999999]`:          false,
		`{"balance":75}`:                 true,
		`{"balance":75.0,"n":-0}`:        true,
		`{"id":9007199254740992}`:        true,
		`{"x":5e-324}`:                   true,
	} {
		if result, isJSON := binding.DecodeResult([]byte(body)); isJSON != wantJSON || (!isJSON && result != nil) {
			t.Errorf("DecodeResult(%s) = %v, %v; want JSON %v", body, result, isJSON, wantJSON)
		}
	}
}
