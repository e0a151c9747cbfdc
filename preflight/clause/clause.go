package clause

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"

	"github.com/contractrefine/autonomy/preflight"
)

// DefaultCostLimit is the CEL runtime cost one clause evaluation may spend
// when Options.CostLimit is zero. It admits a simple comprehension such as
// args.items.all(i, i.usd > 0) over about a thousand elements, and stops
// anything larger before it stalls the gate.
const DefaultCostLimit uint64 = 10000

// Clause list names, as they appear in the bundle and in Problem.Clause.
const (
	Preconditions  = "preconditions"
	Invariants     = "invariants"
	Postconditions = "postconditions"
)

// Options configures Compile. The zero value uses the defaults.
type Options struct {
	// CostLimit bounds the CEL runtime cost of one clause evaluation; an
	// evaluation that exceeds it is a violation. Zero means DefaultCostLimit.
	CostLimit uint64
}

// Set holds the compiled clauses of a bundle. It is immutable after Compile
// and safe for concurrent use; a nil *Set has no clauses.
type Set struct {
	contracts map[string]*contract
	compiled  int
}

var _ preflight.ClauseChecker = (*Set)(nil)

// contract is one capability's compiled contract.
type contract struct {
	enforced       bool
	message        string
	checks         []check // preconditions, then invariants, in declared order
	postconditions []string
	// post are the compiled postconditions, in declared order.
	post []check
	// strict is false when the contract says strict: false: a failed
	// postcondition is then a warning.
	strict bool
}

// check is one precondition or invariant, ready to evaluate.
type check struct {
	clause     string // "precondition" or "invariant"
	reason     string
	index      int
	expression string
	program    cel.Program
	bindings   []binding
	// afterOnly marks an invariant that reads result or status: it
	// describes the state after the call, so it is evaluated on the
	// response only (After), never on the args alone (Check).
	afterOnly bool
}

// Compile parses and type-checks every clause of every capability, and
// prepares the preconditions and invariants for evaluation. All problems in
// the bundle are returned together as one *CompileError.
func Compile(caps map[string]preflight.Capability, opts Options) (*Set, error) {
	costLimit := opts.CostLimit
	if costLimit == 0 {
		costLimit = DefaultCostLimit
	}
	argsEnv, err := cel.NewEnv(
		cel.Variable(argsVar, cel.MapType(cel.StringType, cel.DynType)),
		cel.CrossTypeNumericComparisons(true),
	)
	if err != nil {
		return nil, fmt.Errorf("clause: build CEL environment: %w", err)
	}
	// Postconditions also read the response (result, status) and old(e),
	// the value e had before the call. Before the call there are only the
	// args, so e may read nothing else (checkOld), and the args a
	// postcondition is evaluated with are the ones the gate captured from
	// the request before the call: old(e) is e over them.
	postEnv, err := argsEnv.Extend(
		cel.Variable(resultVar, cel.DynType),
		cel.Variable(statusVar, cel.IntType),
		cel.Function(oldFunc, cel.Overload("old_dyn", []*cel.Type{cel.DynType}, cel.DynType,
			cel.UnaryBinding(func(v ref.Val) ref.Val { return v }))),
	)
	if err != nil {
		return nil, fmt.Errorf("clause: build CEL postcondition environment: %w", err)
	}

	s := &Set{contracts: map[string]*contract{}}
	var problems []Problem
	for _, kind := range slices.Sorted(maps.Keys(caps)) {
		spec := caps[kind].Contract
		if spec == nil {
			continue
		}
		c := &contract{
			enforced:       spec.Validate == nil || *spec.Validate,
			strict:         spec.Strict == nil || *spec.Strict,
			message:        spec.Message,
			postconditions: slices.Clone(spec.Postconditions),
		}
		lists := []struct {
			name, singular, reason string
			exprs                  []string
			env                    *cel.Env
		}{
			{Preconditions, "precondition", preflight.ReasonPreconditionViolated, spec.Preconditions, argsEnv},
			// Invariants hold before and after the call (docs/CLAUSES.md): after it
			// they read result and status like a postcondition, so they
			// compile in the postcondition environment.
			{Invariants, "invariant", preflight.ReasonInvariantViolated, spec.Invariants, postEnv},
			{Postconditions, preflight.ClausePostcondition, preflight.ReasonPostconditionViolated, spec.Postconditions, postEnv},
		}
		for _, l := range lists {
			for i, expr := range l.exprs {
				at := Problem{Kind: kind, Clause: l.name, Index: i, Expression: expr}
				ast, found := compileBool(l.env, expr, at)
				if len(found) == 0 && (l.name == Postconditions || l.name == Invariants) {
					found = checkOld(ast.NativeRep().Expr(), ast.NativeRep().SourceInfo(), expr, at)
				}
				if len(found) > 0 {
					problems = append(problems, found...)
					continue
				}
				s.compiled++
				prg, err := l.env.Program(ast, cel.CostLimit(costLimit), cel.EvalOptions(cel.OptOptimize))
				if err != nil {
					at.Message = "prepare program: " + err.Error()
					problems = append(problems, at)
					continue
				}
				ck := check{
					clause:     l.singular,
					reason:     l.reason,
					index:      i,
					expression: expr,
					program:    prg,
					bindings:   bindings(ast.NativeRep().Expr()),
				}
				if l.name == Postconditions {
					ck.bindings = bindings(ast.NativeRep().Expr(), argsVar, resultVar, statusVar)
					c.post = append(c.post, ck)
					continue
				}
				if l.name == Invariants {
					ck.bindings = bindings(ast.NativeRep().Expr(), argsVar, resultVar, statusVar)
					ck.afterOnly = slices.ContainsFunc(ck.bindings, func(b binding) bool { return b.root != argsVar })
				}
				c.checks = append(c.checks, ck)
			}
		}
		s.contracts[kind] = c
	}
	if len(problems) > 0 {
		slices.SortStableFunc(problems, compareProblems)
		return nil, &CompileError{Problems: problems}
	}
	return s, nil
}

// compileBool compiles expr in env and requires a bool result. It returns
// the checked AST, or the problems found, each a copy of at with its
// position and message filled in.
func compileBool(env *cel.Env, expr string, at Problem) (*cel.Ast, []Problem) {
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		var out []Problem
		for _, e := range iss.Errors() {
			p := at
			if line := e.Location.Line(); line > 0 {
				// CEL's columns are 0-based; the end of an empty
				// expression has none.
				p.Line, p.Column = line, max(e.Location.Column()+1, 1)
			} else {
				// A limit on the whole expression (its size, its
				// nesting): it is named from its start.
				p.Line, p.Column = startOf(expr)
			}
			p.Message = e.Message
			out = append(out, p)
		}
		return nil, out
	}
	if out := ast.OutputType(); !out.IsExactType(types.BoolType) {
		p := at
		p.Line, p.Column = startOf(expr)
		p.Message = fmt.Sprintf("clause must evaluate to bool, found %s", out)
		if out.IsExactType(types.DynType) {
			p.Message += " (compare explicitly, e.g. == true)"
		}
		return nil, []Problem{p}
	}
	return ast, nil
}

// startOf returns the 1-based line and column of the first non-space
// character of expr, where a type problem with the whole clause is reported.
func startOf(expr string) (line, column int) {
	line, column = 1, 1
	for _, r := range expr {
		switch {
		case r == '\n':
			line, column = line+1, 1
		case unicode.IsSpace(r):
			column++
		default:
			return line, column
		}
	}
	return 1, 1
}

// clauseRank orders clause lists as a contract declares them.
var clauseRank = map[string]int{Preconditions: 0, Invariants: 1, Postconditions: 2}

func compareProblems(a, b Problem) int {
	return cmp.Or(
		strings.Compare(a.Kind, b.Kind),
		cmp.Compare(clauseRank[a.Clause], clauseRank[b.Clause]),
		cmp.Compare(a.Index, b.Index),
		cmp.Compare(a.Line, b.Line),
		cmp.Compare(a.Column, b.Column),
	)
}

// Check evaluates kind's preconditions, then its invariants, on args and
// returns every clause that did not hold. A clause that cannot be evaluated
// (missing field, wrong type, cost limit) is a violation too. A kind with no
// contract, or one marked validate: false, returns nil.
func (s *Set) Check(kind string, args map[string]any) []preflight.ClauseViolation {
	c := s.contract(kind)
	if c == nil || !c.enforced || len(c.checks) == 0 {
		return nil
	}
	norm, _ := normalize(args).(map[string]any)
	if norm == nil {
		norm = map[string]any{}
	}
	activation := map[string]any{argsVar: norm}
	var out []preflight.ClauseViolation
	for _, ck := range c.checks {
		if ck.afterOnly {
			continue
		}
		msg, ok := ck.eval(activation, c.message)
		if ok {
			continue
		}
		out = append(out, preflight.ClauseViolation{
			Kind:       kind,
			Clause:     ck.clause,
			Index:      ck.index,
			Expression: ck.expression,
			Message:    msg,
			Reason:     ck.reason,
		})
	}
	return out
}

// Unseen returns one violation for each clause Check would evaluate for
// kind, for a call whose args cannot be seen (a check without a body): a
// clause judged on {} might pass while the real args break it.
func (s *Set) Unseen(kind string) []preflight.ClauseViolation {
	c := s.contract(kind)
	if c == nil || !c.enforced {
		return nil
	}
	out := make([]preflight.ClauseViolation, 0, len(c.checks))
	for _, ck := range c.checks {
		if ck.afterOnly {
			continue
		}
		out = append(out, preflight.ClauseViolation{Kind: kind, Clause: ck.clause, Index: ck.index,
			Expression: ck.expression, Reason: ck.reason,
			Message: ck.clause + " could not be evaluated: " + ck.expression + ": the check carried no body, so the args are unknown"})
	}
	return out
}

// eval runs one clause. It reports ok only when the clause evaluated to
// true; otherwise msg says why. The contract's message replaces the default
// opening of a false clause's message but not an evaluation error's, which
// the operator needs to see to fix the bundle or the caller.
func (ck *check) eval(activation map[string]any, override string) (msg string, ok bool) {
	val, _, err := ck.program.Eval(activation)
	if err != nil {
		return fmt.Sprintf("%s could not be evaluated: %s: %v%s", ck.clause, ck.expression, err, describe(ck.bindings, activation, true)), false
	}
	held, isBool := val.Value().(bool)
	if !isBool {
		return fmt.Sprintf("%s could not be evaluated: %s: result is %s, not bool%s", ck.clause, ck.expression, val.Type().TypeName(), describe(ck.bindings, activation, true)), false
	}
	if held {
		return "", true
	}
	if override != "" {
		// The operator's words lead; the expression and the values it read
		// follow, as in every violation message (docs/CLAUSES.md).
		return override + ": " + ck.expression + describe(ck.bindings, activation, false), false
	}
	return fmt.Sprintf("%s violated: %s%s", ck.clause, ck.expression, describe(ck.bindings, activation, false)), false
}

func (s *Set) contract(kind string) *contract {
	if s == nil {
		return nil
	}
	return s.contracts[kind]
}

// HasContract reports whether kind declares a contract block, enforced or
// not.
func (s *Set) HasContract(kind string) bool {
	return s.contract(kind) != nil
}

// Enforced reports whether Check evaluates kind's clauses: it has a
// contract that is not validate: false.
func (s *Set) Enforced(kind string) bool {
	c := s.contract(kind)
	return c != nil && c.enforced
}

// Postconditions returns kind's declared postconditions, for reporting
// them as accepted but not enforced. The caller owns the slice.
func (s *Set) Postconditions(kind string) []string {
	c := s.contract(kind)
	if c == nil {
		return nil
	}
	return slices.Clone(c.postconditions)
}

// Len returns the number of compiled clauses of every kind, including
// postconditions and those of validate: false contracts.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return s.compiled
}
