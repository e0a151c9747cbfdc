package clause

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
)

// argsVar is the CEL variable that holds the call's arguments.
const argsVar = "args"

// maxValueRunes bounds one binding's rendering in a violation message, so a
// clause over a large list argument does not copy the list into the message.
const maxValueRunes = 64

// normalize copies decoded JSON into the values CEL should see: a whole
// number becomes int64 and any other number float64, whether it was decoded
// as float64 or json.Number. It copies rather than edits, because the
// caller's map may be read concurrently.
func normalize(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[k] = normalize(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = normalize(e)
		}
		return out
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		if f, err := v.Float64(); err == nil {
			return normalize(f)
		}
		// Not a number after all: let CEL see the text and fail the clause.
		return string(v)
	case float64:
		// 2^63 is exactly representable, so the bounds are exact too.
		if v == math.Trunc(v) && v >= math.MinInt64 && v < math.MaxInt64 {
			return int64(v)
		}
		return v
	default:
		return v
	}
}

// step is one hop of a path into a value: a field name, or a list index
// when isIndex is set.
type step struct {
	field   string
	index   int64
	isIndex bool
}

// binding is a path into a variable (args, or after the call result and
// status) that a clause reads, such as args.account.balance; its value is
// shown when the clause fails. A path read inside old(...) is its own
// binding, written old(args.balance).
type binding struct {
	text  string
	root  string
	steps []step
}

// oldFunc is the postcondition function that reads the values before the
// call.
const oldFunc = "old"

// bindings returns the paths into the variables roots that expr reads, in
// source order, each once. A path stops at the first hop that is not a
// constant field or index, e.g. args.items[i] is reported as args.items.
func bindings(expr celast.Expr, roots ...string) []binding {
	if len(roots) == 0 {
		roots = []string{argsVar}
	}
	var out []binding
	seen := map[string]bool{}
	add := func(b binding) {
		if !seen[b.text] {
			seen[b.text] = true
			out = append(out, b)
		}
	}
	var walk func(e celast.Expr, shadowed map[string]bool)
	walk = func(e celast.Expr, shadowed map[string]bool) {
		if root, steps, ok := rootPath(e, roots, shadowed); ok {
			add(binding{text: renderPath(root, steps), root: root, steps: steps})
			return
		}
		switch e.Kind() {
		case celast.SelectKind:
			walk(e.AsSelect().Operand(), shadowed)
		case celast.CallKind:
			c := e.AsCall()
			if c.FunctionName() == oldFunc && len(c.Args()) == 1 && !c.IsMemberFunction() {
				if root, steps, ok := rootPath(c.Args()[0], roots, shadowed); ok {
					add(binding{text: oldFunc + "(" + renderPath(root, steps) + ")", root: root, steps: steps})
					return
				}
			}
			if c.IsMemberFunction() {
				walk(c.Target(), shadowed)
			}
			for _, a := range c.Args() {
				walk(a, shadowed)
			}
		case celast.ListKind:
			for _, el := range e.AsList().Elements() {
				walk(el, shadowed)
			}
		case celast.MapKind:
			for _, en := range e.AsMap().Entries() {
				m := en.AsMapEntry()
				walk(m.Key(), shadowed)
				walk(m.Value(), shadowed)
			}
		case celast.StructKind:
			for _, f := range e.AsStruct().Fields() {
				walk(f.AsStructField().Value(), shadowed)
			}
		case celast.ComprehensionKind:
			c := e.AsComprehension()
			walk(c.IterRange(), shadowed)
			walk(c.AccuInit(), shadowed)
			// A loop variable named like a root hides the real one inside
			// the loop.
			inner := shadowed
			for _, v := range []string{c.IterVar(), c.IterVar2(), c.AccuVar()} {
				if v != "" && slices.Contains(roots, v) && !inner[v] {
					inner = maps.Clone(inner)
					if inner == nil {
						inner = map[string]bool{}
					}
					inner[v] = true
				}
			}
			walk(c.LoopCondition(), inner)
			walk(c.LoopStep(), inner)
			walk(c.Result(), inner)
		}
	}
	walk(expr, nil)
	return out
}

// rootPath reports whether e is one of roots (not shadowed) followed only
// by constant field and index hops, and returns the root and those hops.
func rootPath(e celast.Expr, roots []string, shadowed map[string]bool) (string, []step, bool) {
	switch e.Kind() {
	case celast.IdentKind:
		id := e.AsIdent()
		return id, nil, slices.Contains(roots, id) && !shadowed[id]
	case celast.SelectKind:
		s := e.AsSelect()
		root, steps, ok := rootPath(s.Operand(), roots, shadowed)
		if !ok {
			return "", nil, false
		}
		return root, append(steps, step{field: s.FieldName()}), true
	case celast.CallKind:
		c := e.AsCall()
		if c.FunctionName() != operators.Index || len(c.Args()) != 2 || c.Args()[1].Kind() != celast.LiteralKind {
			return "", nil, false
		}
		root, steps, ok := rootPath(c.Args()[0], roots, shadowed)
		if !ok {
			return "", nil, false
		}
		switch key := c.Args()[1].AsLiteral().(type) {
		case types.String:
			return root, append(steps, step{field: string(key)}), true
		case types.Int:
			return root, append(steps, step{index: int64(key), isIndex: true}), true
		}
	}
	return "", nil, false
}

// renderPath writes steps the way a clause author would: args.a.b, or
// args["odd-key"] and args.items[0] where a dot cannot be used.
func renderPath(root string, steps []step) string {
	var b strings.Builder
	b.WriteString(root)
	for _, s := range steps {
		switch {
		case s.isIndex:
			fmt.Fprintf(&b, "[%d]", s.index)
		case isIdentifier(s.field):
			b.WriteString(".")
			b.WriteString(s.field)
		default:
			fmt.Fprintf(&b, "[%s]", strconv.Quote(s.field))
		}
	}
	return b.String()
}

func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		letter := r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		digit := r >= '0' && r <= '9'
		if !letter && !(digit && i > 0) {
			return false
		}
	}
	return true
}

// lookup follows steps into a normalized value.
func lookup(cur any, steps []step) (any, bool) {
	for _, s := range steps {
		switch v := cur.(type) {
		case map[string]any:
			if s.isIndex {
				return nil, false
			}
			next, ok := v[s.field]
			if !ok {
				return nil, false
			}
			cur = next
		case []any:
			if !s.isIndex || s.index < 0 || s.index >= int64(len(v)) {
				return nil, false
			}
			cur = v[s.index]
		default:
			return nil, false
		}
	}
	return cur, true
}

// describe renders the bindings' values as ` (args.a = 1, args.b = "x")`,
// or "" when there is nothing to show. An absent path is shown as <missing>
// unless skipMissing is set, which an evaluation error uses because its own
// text ("no such key: x") already names it.
func describe(bs []binding, vars map[string]any, skipMissing bool) string {
	var parts []string
	for _, b := range bs {
		v, ok := valueOf(b, vars)
		switch {
		case ok:
			parts = append(parts, b.text+" = "+formatValue(v))
		case !skipMissing:
			parts = append(parts, b.text+" = <missing>")
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// valueOf is b's value among the variables vars, which hold normalized
// values; a missing root is a missing value.
func valueOf(b binding, vars map[string]any) (any, bool) {
	root, ok := vars[b.root]
	if !ok {
		return nil, false
	}
	return lookup(root, b.steps)
}

// formatValue writes v as JSON, which is deterministic (sorted keys) and
// quotes strings, cut to maxValueRunes.
func formatValue(v any) string {
	raw, err := json.Marshal(v)
	s := string(raw)
	if err != nil {
		s = fmt.Sprint(v)
	}
	if utf8.RuneCountInString(s) <= maxValueRunes {
		return s
	}
	n := 0
	for i := range s {
		if n == maxValueRunes {
			return s[:i] + "…"
		}
		n++
	}
	return s
}
