package clause_test

import (
	"fmt"
	"strings"

	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/preflight/clause"
)

func ExampleCompile() {
	caps := map[string]preflight.Capability{
		"account.withdraw": {Contract: &preflight.ContractSpec{
			Preconditions:  []string{"args.amount > 0", "args.amount <= args.account.balance"},
			Invariants:     []string{"args.account.balance >= 0"},
			Postconditions: []string{"result.account.balance == old(args.account.balance) - args.amount"},
		}},
	}
	set, err := clause.Compile(caps, clause.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	args := map[string]any{"amount": 150.0, "account": map[string]any{"balance": 100.0}}
	for _, v := range set.Check("account.withdraw", args) {
		fmt.Println(v.Reason, "|", v.Message)
	}
	after := set.After("account.withdraw", preflight.AfterCall{Args: map[string]any{"amount": 30.0,
		"account": map[string]any{"balance": 100.0}}, Result: map[string]any{"account": map[string]any{"balance": 80.0}}, Status: 200})
	for _, r := range after {
		fmt.Println(strings.TrimSpace(fmt.Sprint(r.Clause, " ", r.Held, " | ", r.Message)))
	}

	_, err = clause.Compile(map[string]preflight.Capability{
		"account.withdraw": {Contract: &preflight.ContractSpec{Preconditions: []string{"args.amount >> 0"}}},
	}, clause.Options{})
	fmt.Println(err != nil)
	// Output:
	// clause: precondition_violated | precondition violated: args.amount <= args.account.balance (args.amount = 150, args.account.balance = 100)
	// postcondition false | postcondition violated: result.account.balance == old(args.account.balance) - args.amount (result.account.balance = 80, old(args.account.balance) = 100, args.amount = 30)
	// invariant true |
	// true
}
