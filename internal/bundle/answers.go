package bundle

import (
	"strings"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/open-policy-agent/opa/v1/ast"
)

// The policy's answers are kept by input when nothing but the input and the
// bundle decides them: every call of one tool with the same arguments (and
// the same actor, mode and preflight, when the policy reads those) then
// skips OPA's evaluation. The gate leaves out of the input what the policy
// never reads (inputReads), so the key holds exactly what the answer can
// depend on; a reloaded bundle is a new Bundle with a cache of its own.
const (
	// answerCacheSize bounds the answers kept.
	answerCacheSize = 1024
	// maxAnswerKey bounds the input, in the bytes of its text, whose answer
	// is kept, so the cache holds at most about 2 MiB of keys.
	maxAnswerKey = 2048
)

// answer is one evaluation's result: allowed, or the deny reason; settled
// when no part of it failed (allowWith), and only then kept.
type answer struct {
	allowed bool
	reason  string
	settled bool
}

// clockOrWorld names the builtins whose result depends on something other
// than their arguments and the bundle, beyond those OPA marks
// Nondeterministic: the evaluation's clock (io.jwt.decode_verify without
// a "time" constraint, the certificate chain's validity period), and the
// builtins that write output rather than compute.
var clockOrWorld = map[string]bool{
	"io.jwt.decode_verify":                                   true,
	"crypto.x509.parse_and_verify_certificates":              true,
	"crypto.x509.parse_and_verify_certificates_with_options": true,
	"print":          true,
	"internal.print": true,
	"trace":          true,
}

// pure reports whether the answers of c's policy depend only on its input
// and data: every function it calls is either its own (a data. reference,
// whose body is walked too) or a builtin OPA knows that reads no clock, no
// randomness and nothing outside the evaluation, and no such builtin is
// named anywhere else (as the value of a with, which calls it in the
// place of the function it mocks). A builtin it does not know, which a
// later OPA or a custom build might add, makes it impure.
func pure(c *ast.Compiler) bool {
	ok := true
	// Every reference is walked, so a builtin named anywhere that reads
	// the world makes the policy impure: called, or the value of a with
	// (f with f as time.now_ns), which calls it all the same. A function
	// called or mocked must also be one OPA knows, or the policy's own.
	calledOrMocked := func(op ast.Ref) {
		if name := op.String(); !strings.HasPrefix(name, "data.") && ast.BuiltinMap[name] == nil {
			ok = false
		}
	}
	vis := ast.NewGenericVisitor(func(x any) bool {
		switch x := x.(type) {
		case *ast.Expr:
			if x.IsCall() {
				calledOrMocked(x.Operator())
			}
			for _, w := range x.With {
				if r, isRef := w.Target.Value.(ast.Ref); isRef && !r.HasPrefix(ast.DefaultRootRef) && !r.HasPrefix(ast.InputRootRef) {
					calledOrMocked(r)
				}
			}
		case ast.Call:
			if op, isRef := x[0].Value.(ast.Ref); isRef {
				calledOrMocked(op)
			}
		case ast.Ref:
			name := x.String()
			if b := ast.BuiltinMap[name]; b != nil && (b.Nondeterministic || clockOrWorld[name]) {
				ok = false
			}
		}
		return !ok
	})
	for _, m := range c.Modules {
		vis.Walk(m)
	}
	return ok
}

// newAnswers is the answer cache of a policy compiled into c that reads
// reads of its input, or nil when its answers may change with anything but
// the input, or when its inputs would hardly ever repeat: the request
// carries each call's own x-request-id, and a preflight decision its own
// ids, so a policy reading either would only fill the cache.
func newAnswers(c *ast.Compiler, reads inputReads) *lru.Cache[string, answer] {
	if reads.all || reads.keys["request"] || reads.keys["preflight"] || !pure(c) {
		return nil
	}
	cache, err := lru.New[string, answer](answerCacheSize)
	if err != nil {
		return nil // only for a size below 1
	}
	return cache
}

// answerKey is the cache key of input: its text, in which every string is
// quoted, so two inputs share a key only when they are the same value
// (the gate builds inputs of JSON values only: objects, arrays, strings,
// numbers, booleans, null). ok is false when the input is too big to keep.
func answerKey(input ast.Value) (key string, ok bool) {
	key = input.String()
	return key, len(key) <= maxAnswerKey
}

// ForgetAnswers drops the answers kept so far: a reload that finds the
// bundle unchanged keeps this Bundle, and an operator who reloads expects
// every answer evaluated afresh.
func (b *Bundle) ForgetAnswers() {
	if b.answers != nil {
		b.answers.Purge()
	}
}
