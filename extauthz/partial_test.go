package extauthz_test

import (
	"fmt"
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/preflight"
)

// TestGRPCPartialBodySpendsNothing: a body Envoy marks partial, or one
// shorter than its Content-Length, is denied gate: partial_body in every
// mode, and the preflight's step is still there for the whole call.
func TestGRPCPartialBodySpendsNothing(t *testing.T) {
	cuts := map[string]func(r *authv3.CheckRequest){
		"marked partial by Envoy": func(r *authv3.CheckRequest) {
			r.Attributes.Request.Http.Headers["x-envoy-auth-partial-body"] = "true"
		},
		"marked partial, other case": func(r *authv3.CheckRequest) {
			r.Attributes.Request.Http.Headers["x-envoy-auth-partial-body"] = "True"
		},
		"content-length larger than the body": func(r *authv3.CheckRequest) {
			h := r.Attributes.Request.Http
			h.Headers["content-length"] = fmt.Sprint(len(h.RawBody) + 10)
		},
		"body cut, as a string": func(r *authv3.CheckRequest) {
			h := r.Attributes.Request.Http
			h.Body, h.RawBody = string(h.RawBody[:len(h.RawBody)-3]), nil
		},
	}
	deniedSpendingNothing(t, cuts, "gate: partial_body")
	// Envoy says "false" when allow_partial_message is on and the body fit.
	e := newEnv(t, binding.ModeEnforce)
	c := serveGRPC(t, e.gate)
	pf := e.record("tool.echo", map[string]any{"msg": "hi"})
	req := envoyCheck("tool.echo", map[string]any{"msg": "hi"}, pf.PreflightID, "req-1")
	req.Attributes.Request.Http.Headers["x-envoy-auth-partial-body"] = "false"
	wantAllowed(t, check(t, c, req), pf.AuditID, "enforce", preflight.ReasonPassed, "")
}

// TestGRPCBodyLimitMatchesHTTPCheck: the gRPC Check refuses a body over
// http.max_body_bytes as the HTTP check does, and takes one at the limit.
func TestGRPCBodyLimitMatchesHTTPCheck(t *testing.T) {
	const limit = 4096
	e := newEnv(t, binding.ModeEnforce, func(o *binding.Options) { o.MaxBodyBytes = limit })
	c := serveGRPC(t, e.gate)
	// {"args":{"pad":"…"},"kind":"tool.echo"} is 38 bytes besides the pad.
	at := map[string]any{"pad": strings.Repeat("x", limit-38)}
	pf := e.record("tool.echo", at)
	req := envoyCheck("tool.echo", at, pf.PreflightID, "req-1")
	if n := len(req.Attributes.Request.Http.RawBody); n != limit {
		t.Fatalf("body at the limit is %d bytes, want %d", n, limit)
	}
	wantAllowed(t, check(t, c, req), pf.AuditID, "enforce", preflight.ReasonPassed, "")

	over := map[string]any{"pad": strings.Repeat("x", limit-37)}
	pf = e.record("tool.echo", over)
	wantDenied(t, check(t, c, envoyCheck("tool.echo", over, pf.PreflightID, "req-2")),
		codes.PermissionDenied, typev3.StatusCode_Forbidden, "gate: malformed_tool_call")
}

// TestGRPCBodyNotTheRequests: a check whose body is not the request's (two
// bodies, a Content-Length that is no length or declares fewer bytes than
// the body) is denied gate: malformed_tool_call in every mode, spending
// nothing; a Content-Length repeated with one value is the body's.
func TestGRPCBodyNotTheRequests(t *testing.T) {
	shell := envoyCheck("tool.shell", map[string]any{"cmd": "rm -rf /"}, "", "x").Attributes.Request.Http.RawBody
	bad := map[string]func(r *authv3.CheckRequest){
		"body and raw_body": func(r *authv3.CheckRequest) { r.Attributes.Request.Http.Body = string(shell) },
		"content-length not a number": func(r *authv3.CheckRequest) {
			r.Attributes.Request.Http.Headers["content-length"] = "abc"
		},
		"content-length negative": func(r *authv3.CheckRequest) { r.Attributes.Request.Http.Headers["content-length"] = "-5" },
		"content-length shorter than the body": func(r *authv3.CheckRequest) {
			r.Attributes.Request.Http.Headers["content-length"] = "3"
		},
		"content-length twice, two values": func(r *authv3.CheckRequest) {
			h := r.Attributes.Request.Http
			h.Headers["content-length"] = fmt.Sprintf("%d,%d", len(h.RawBody), len(h.RawBody)+1)
		},
	}
	deniedSpendingNothing(t, bad, "gate: malformed_tool_call")
	e := newEnv(t, binding.ModeEnforce)
	c := serveGRPC(t, e.gate)
	pf := e.record("tool.echo", map[string]any{"msg": "hi"})
	req := envoyCheck("tool.echo", map[string]any{"msg": "hi"}, pf.PreflightID, "req-1")
	h := req.Attributes.Request.Http
	h.Headers["content-length"] = fmt.Sprintf("%d, %d", len(h.RawBody), len(h.RawBody))
	wantAllowed(t, check(t, c, req), pf.AuditID, "enforce", preflight.ReasonPassed, "")
}

// deniedSpendingNothing: each spoiled Check of a one-step preflight is
// denied with reason in enforce and advisory mode, and the step is still
// there for the whole call after it.
func deniedSpendingNothing(t *testing.T, spoiled map[string]func(*authv3.CheckRequest), reason string) {
	t.Helper()
	for name, spoil := range spoiled {
		for _, mode := range []binding.Mode{binding.ModeEnforce, binding.ModeAdvisory} {
			t.Run(name+"/"+string(mode), func(t *testing.T) {
				e := newEnv(t, mode)
				c := serveGRPC(t, e.gate)
				pf := e.record("tool.echo", map[string]any{"msg": "hi"})
				req := envoyCheck("tool.echo", map[string]any{"msg": "hi"}, pf.PreflightID, "req-1")
				spoil(req)
				wantDenied(t, check(t, c, req), codes.PermissionDenied, typev3.StatusCode_Forbidden, reason)
				whole := envoyCheck("tool.echo", map[string]any{"msg": "hi"}, pf.PreflightID, "req-2")
				wantAllowed(t, check(t, c, whole), pf.AuditID, string(mode), preflight.ReasonPassed, "")
			})
		}
	}
}
