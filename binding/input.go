package binding

import (
	"context"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/contractrefine/autonomy/internal/canon"
)

// valuePolicy is a Policy that takes its input as an OPA value and says
// which top-level input members it can read; *bundle.Bundle implements it.
// The gate then builds the input straight from Go values, leaves out what
// the policy never reads and skips OPA's conversion of a Go map.
type valuePolicy interface {
	AllowValue(ctx context.Context, input ast.Value) (bool, string, error)
	ReadsInput(key string) bool
}

// decisionCacheSize bounds the decisions kept for policies that read
// input.preflight. The binding cache keeps no decision (SPEC's 100,000
// cached bindings would otherwise hold a parsed decision each, about 10 KB),
// and a policy that reads one mostly does so for an id preflighted moments
// ago.
const decisionCacheSize = 1024

// allow evaluates the policy for c.
func (g *Gate) allow(ctx context.Context, pol Policy, c *call) (bool, string, error) {
	// The policy decides whether or not the client is still there: one
	// that hung up meanwhile would otherwise be recorded as the verifier
	// failing (its timeout, policy.timeout, still bounds it).
	ctx = context.WithoutCancel(ctx)
	if vp, ok := pol.(valuePolicy); ok {
		input, err := g.inputValue(ctx, vp, c)
		if err != nil {
			return false, "", err
		}
		return vp.AllowValue(ctx, input)
	}
	input, err := g.policyInput(ctx, c)
	if err != nil {
		return false, "", err
	}
	return pol.Allow(ctx, input)
}

// withPreflight reports whether the policy sees c's preflight decision: only
// when the ladder passed, whatever the clauses said after it (in advisory
// mode a clause failure is recorded and the policy still decides).
func (c *call) withPreflight() bool { return c.bound != nil && c.ladderPassed }

// inputValue builds the Rego input of docs/CLAUSES.md as an OPA value, with only
// the members the policy can read.
func (g *Gate) inputValue(ctx context.Context, pol valuePolicy, c *call) (ast.Value, error) {
	items := make([][2]*ast.Term, 0, 6)
	if pol.ReadsInput("request") {
		headers := make([][2]*ast.Term, 0, len(c.req.Headers))
		for k, v := range c.req.Headers {
			headers = append(headers, ast.Item(ast.StringTerm(k), ast.StringTerm(v)))
		}
		items = append(items, ast.Item(ast.StringTerm("request"), ast.ObjectTerm(
			ast.Item(ast.StringTerm("method"), ast.StringTerm(c.req.Method)),
			ast.Item(ast.StringTerm("path"), ast.StringTerm(c.req.Path)),
			ast.Item(ast.StringTerm("headers"), ast.ObjectTerm(headers...)))))
	}
	if pol.ReadsInput("action") {
		args := ast.ObjectTerm()
		if c.args != nil {
			v, err := ast.InterfaceToValue(c.args)
			if err != nil {
				return nil, err
			}
			args = ast.NewTerm(v)
		}
		items = append(items, ast.Item(ast.StringTerm("action"), ast.ObjectTerm(
			ast.Item(ast.StringTerm("kind"), ast.StringTerm(c.kind)),
			ast.Item(ast.StringTerm("args"), args))))
	}
	if pol.ReadsInput("actor") {
		items = append(items, ast.Item(ast.StringTerm("actor"), ast.ObjectTerm(
			ast.Item(ast.StringTerm("id"), ast.StringTerm(c.identity)))))
	}
	if pol.ReadsInput("mode") {
		items = append(items, ast.Item(ast.StringTerm("mode"), ast.StringTerm(string(g.o.Mode))))
	}
	if pol.ReadsInput("preflight") {
		pf := ast.Value(ast.Null{})
		if c.withPreflight() {
			v, err := g.decisionValue(ctx, c)
			if err != nil {
				return nil, err
			}
			pf = v
		}
		items = append(items, ast.Item(ast.StringTerm("preflight"), ast.NewTerm(pf)))
	}
	if t, ok := g.mcpTerm(c); ok && pol.ReadsInput("mcp") {
		items = append(items, ast.Item(ast.StringTerm("mcp"), t))
	}
	return ast.NewObject(items...), nil
}

// decisionValue is c's preflight decision as an OPA value, from the small
// decision cache or converted from its recorded JSON.
func (g *Gate) decisionValue(ctx context.Context, c *call) (ast.Value, error) {
	id := c.b.PreflightID
	now := g.o.Now().UnixNano()
	if tv, ok := g.decisions.Get(id); ok && now < tv.until {
		return tv.v, nil
	}
	doc, err := g.decisionDoc(ctx, c)
	if err != nil {
		return nil, err
	}
	v, err := ast.InterfaceToValue(doc)
	if err != nil {
		return nil, err
	}
	g.decisions.Add(id, timedValue{v: v, until: now + int64(g.o.CacheTTL)})
	return v, nil
}

// decisionDoc is c's preflight decision decoded into Go values, as the
// store recorded it.
func (g *Gate) decisionDoc(ctx context.Context, c *call) (any, error) {
	raw, err := g.o.Store.Decision(ctx, c.b.PreflightID)
	if err != nil {
		return nil, err
	}
	if len(raw) == 0 {
		return nil, nil
	}
	return canon.Parse(raw)
}

// policyInput builds the Rego input of docs/CLAUSES.md from Go values, for a
// Policy that takes a Go map.
func (g *Gate) policyInput(ctx context.Context, c *call) (map[string]any, error) {
	headers := make(map[string]any, len(c.req.Headers))
	for k, v := range c.req.Headers {
		headers[k] = v
	}
	var pf any
	if c.withPreflight() {
		doc, err := g.decisionDoc(ctx, c)
		if err != nil {
			return nil, err
		}
		pf = doc
	}
	var args any = c.args
	if args == nil {
		args = map[string]any{}
	}
	input := map[string]any{
		"request":   map[string]any{"method": c.req.Method, "path": c.req.Path, "headers": headers},
		"action":    map[string]any{"kind": c.kind, "args": args},
		"actor":     map[string]any{"id": c.identity},
		"mode":      string(g.o.Mode),
		"preflight": pf,
	}
	if m, ok := g.mcpInput(c); ok {
		input["mcp"] = m
	}
	return input, nil
}

// argsDigest is the canonical digest of the call's args, computed once: the
// ladder compares it with the preflighted step's (bind_arguments) and the
// decision frame records it, and the frame may be built inside the WAL's
// commit loop, which every writer waits on.
func (c *call) argsDigest() (string, error) {
	if !c.digested {
		c.argsDigestValue, c.argsDigestErr = canon.Digest(c.argsMap)
		c.digested = true
	}
	return c.argsDigestValue, c.argsDigestErr
}
