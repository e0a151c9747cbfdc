package clause

import (
	"encoding/json"

	celast "github.com/google/cel-go/common/ast"

	"github.com/contractrefine/autonomy/preflight"
)

// The CEL variables a postcondition reads besides args.
const (
	resultVar = "result"
	statusVar = "status"
)

// maxBindingBytes bounds one binding's value in an after-call result: a
// larger value (a whole result, a long list) is kept as its JSON text cut
// to maxValueRunes, so an outcome frame does not copy the response.
const maxBindingBytes = 256

var _ preflight.OutcomeClauses = (*Set)(nil)

// checkOld refuses an old(e) whose e reads anything but args, or holds
// another old: before the call there is no result and no status. The
// problem is placed at what old may not read (si gives its position).
func checkOld(e celast.Expr, si *celast.SourceInfo, expr string, at Problem) []Problem {
	var bad celast.Expr
	var walk func(e celast.Expr, inOld bool)
	walk = func(e celast.Expr, inOld bool) {
		if bad != nil {
			return
		}
		switch e.Kind() {
		case celast.IdentKind:
			if inOld && (e.AsIdent() == resultVar || e.AsIdent() == statusVar) {
				bad = e
			}
		case celast.SelectKind:
			walk(e.AsSelect().Operand(), inOld)
		case celast.CallKind:
			c := e.AsCall()
			if c.FunctionName() == oldFunc {
				if inOld {
					bad = e
					return
				}
				inOld = true
			}
			if c.IsMemberFunction() {
				walk(c.Target(), inOld)
			}
			for _, a := range c.Args() {
				walk(a, inOld)
			}
		case celast.ListKind:
			for _, el := range e.AsList().Elements() {
				walk(el, inOld)
			}
		case celast.MapKind:
			for _, en := range e.AsMap().Entries() {
				m := en.AsMapEntry()
				walk(m.Key(), inOld)
				walk(m.Value(), inOld)
			}
		case celast.StructKind:
			for _, f := range e.AsStruct().Fields() {
				walk(f.AsStructField().Value(), inOld)
			}
		case celast.ComprehensionKind:
			c := e.AsComprehension()
			for _, x := range []celast.Expr{c.IterRange(), c.AccuInit(), c.LoopCondition(), c.LoopStep(), c.Result()} {
				walk(x, inOld)
			}
		}
	}
	walk(e, false)
	if bad == nil {
		return nil
	}
	at.Line, at.Column = startOf(expr)
	if si != nil {
		if loc := si.GetStartLocation(bad.ID()); loc.Line() > 0 {
			at.Line, at.Column = loc.Line(), loc.Column()+1 // CEL's columns are 0-based
		}
	}
	at.Message = "old(e) is the value of e before the call, when only args exist: e may read args only, and no old inside old"
	return []Problem{at}
}

// After evaluates kind's postconditions, then its invariants, on a tool's
// response (docs/API.md), and returns one result per clause in that order. A
// clause that cannot be evaluated (a missing field, a result that is not
// JSON, the cost limit) does not hold. A kind with no contract, or a
// validate: false one, returns nil.
func (s *Set) After(kind string, in preflight.AfterCall) []preflight.ClauseResult {
	c := s.contract(kind)
	if c == nil || !c.enforced {
		return nil
	}
	args, _ := normalize(in.Args).(map[string]any)
	if args == nil {
		args = map[string]any{}
	}
	activation := map[string]any{argsVar: args, resultVar: normalize(in.Result), statusVar: int64(in.Status)}
	out := make([]preflight.ClauseResult, 0, len(c.post)+len(c.checks))
	add := func(ck *check, strict bool) {
		msg, held := ck.eval(activation, c.message)
		out = append(out, preflight.ClauseResult{
			Clause:     ck.clause,
			Index:      ck.index,
			Expression: ck.expression,
			Held:       held,
			Bindings:   bindingValues(ck.bindings, activation),
			Message:    msg,
			Reason:     ck.reason,
			Strict:     strict,
		})
	}
	for i := range c.post {
		add(&c.post[i], c.strict)
	}
	for i := range c.checks {
		if c.checks[i].clause == preflight.ClauseInvariant {
			add(&c.checks[i], true)
		}
	}
	return out
}

// HasAfter reports whether kind has clauses After evaluates.
func (s *Set) HasAfter(kind string) bool {
	c := s.contract(kind)
	if c == nil || !c.enforced {
		return false
	}
	if len(c.post) > 0 {
		return true
	}
	for i := range c.checks {
		if c.checks[i].clause == preflight.ClauseInvariant {
			return true
		}
	}
	return false
}

// bindingValues are the values bs read among vars, by their text; a path
// that is absent is left out.
func bindingValues(bs []binding, vars map[string]any) map[string]any {
	out := make(map[string]any, len(bs))
	for _, b := range bs {
		v, ok := valueOf(b, vars)
		if !ok {
			continue
		}
		if raw, err := json.Marshal(v); err != nil || len(raw) > maxBindingBytes {
			v = formatValue(v)
		}
		out[b.text] = v
	}
	return out
}
