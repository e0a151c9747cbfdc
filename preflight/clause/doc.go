// Package clause compiles and evaluates the user-declared clauses a
// capability carries in its `contract` block (docs/CLAUSES.md), written in CEL.
//
// # Variables
//
// Preconditions see one variable, `args`, declared as map(string, dyn): the
// call's top-level arguments, so `args.amountUsd > 0` and
// `args.account.balance >= 0` type-check without a schema. Postconditions and
// invariants also see `result` (dyn), `status` (int) and the function
// `old(dyn) -> dyn`, which names a value as it was before the call. An
// invariant that reads `result` or `status` describes the state after the
// call: it is evaluated on the response only; the others run before the call
// (on the plan step and at the gate) and again on the response.
//
// # Compile at bundle load
//
// Compile parses and type-checks every clause of every capability once, when
// the bundle loads, so a typo fails startup and check-config instead of the
// first call. A clause must have the static type bool: an expression whose
// type is int, string or even dyn (such as a bare `args.enabled`) is rejected;
// compare explicitly (`args.enabled == true`). A contract with
// `validate: false` is compiled too, so its typos are caught, but it is never
// evaluated. Every problem across the bundle is returned in one
// *CompileError, sorted by kind, clause (preconditions, invariants,
// postconditions) and index.
//
// # Evaluation
//
// Set.Check runs a kind's preconditions, then its invariants, in declared
// order, on the call's arguments, using the programs prepared at Compile.
// Arguments arrive as decoded JSON; numbers that are whole (float64 125.0 or
// json.Number "125") become CEL int, others CEL double, so the same request
// gives the same answer however it was decoded. Comparisons across int and
// double work (`args.amountUsd > 0` holds for 125.5); arithmetic across them
// does not in CEL, so a clause mixing them should convert with double(...).
//
// Evaluation is fail-closed: a missing field, a wrong type or an exceeded cost
// limit is reported as a violation with the same reason code as a false
// clause, never as a pass.
//
// # Cost limit
//
// Each evaluation is bounded by CEL's runtime cost accounting
// (Options.CostLimit, DefaultCostLimit when zero), so a clause that walks a
// large list argument cannot stall the gate.
//
// # Postconditions
//
// Postconditions need the tool's response, and no response hook exists yet:
// they are accepted and type-checked at Compile, listed by Set.Postconditions
// for reporting, and never enforced.
package clause
