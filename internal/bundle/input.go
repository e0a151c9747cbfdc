package bundle

import (
	"context"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
)

// inputReads is what the bundle's policy can read of its input: the
// top-level members it names (input.action, input["mode"]), or everything
// when it uses input in any way that is not a reference with a constant
// first key (x := input, input[k], with input as …, import input).
type inputReads struct {
	all  bool
	keys map[string]bool
}

// inputReadsOf walks every compiled module, so rules reached through data
// references, functions and imports are all covered.
func inputReadsOf(c *ast.Compiler) inputReads {
	r := inputReads{keys: map[string]bool{}}
	var vis *ast.GenericVisitor
	vis = ast.NewGenericVisitor(func(x any) bool {
		switch x := x.(type) {
		case ast.Ref:
			if !x[0].Equal(ast.InputRootDocument) {
				return false
			}
			if key, ok := refKey(x); ok {
				r.keys[key] = true
			} else {
				r.all = true
			}
			for _, t := range x[1:] {
				vis.Walk(t)
			}
			return true
		case ast.Var:
			if x.Equal(ast.InputRootDocument.Value) {
				r.all = true
			}
		}
		return false
	})
	for _, m := range c.Modules {
		vis.Walk(m)
	}
	return r
}

// refKey returns the constant first key of a reference into input.
func refKey(ref ast.Ref) (string, bool) {
	if len(ref) < 2 {
		return "", false
	}
	key, ok := ref[1].Value.(ast.String)
	return string(key), ok
}

// ReadsInput reports whether the policy can read input member key. The gate
// leaves out of the input what the policy never reads, most usefully the
// preflight decision, which it would otherwise have to keep or load for
// every call.
func (b *Bundle) ReadsInput(key string) bool { return b.reads.all || b.reads.keys[key] }

// AllowValue is Allow with the input already converted to an OPA value, so
// the caller can build it from Go values directly and reuse parts of it.
// A pure policy's answer for an input it answered before is the one it gave
// then (answers.go); errors are never kept.
func (b *Bundle) AllowValue(ctx context.Context, input ast.Value) (bool, string, error) {
	key, keep := "", false
	if b.answers != nil {
		if key, keep = answerKey(input); keep {
			if a, ok := b.answers.Get(key); ok {
				return a.allowed, a.reason, nil
			}
		}
	}
	a, err := b.allowWith(ctx, rego.EvalParsedInput(input))
	if err == nil && keep && a.settled {
		b.answers.Add(key, a)
	}
	return a.allowed, a.reason, err
}
