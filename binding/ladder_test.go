package binding_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

var modes = []binding.Mode{binding.ModeDisabled, binding.ModeAdvisory, binding.ModeEnforce}

const (
	reasonPolicyAllowed = "policy: allowed"
	reasonMalformedCall = "gate: malformed_tool_call"
)

var refundArgs = map[string]any{"caseRef": "case:882", "amountUsd": 125}

// rung is one row of the ladder table: a request and what the ladder makes
// of it, independent of the mode.
type rung struct {
	// call records what the request needs and returns the request.
	call func(e *env) *binding.Request
	// opts adjust the gate (the actor header).
	opts func(*binding.Options)
	// contract is the ladder's (or clause's) failure, "" when it passes.
	contract string
	// bound: the header resolves to a recorded preflight, so the decision
	// carries its ids.
	bound bool
	// presented: the header holds an id-shaped id the log does not know;
	// when the ladder runs, the decision names it all the same.
	presented bool
	// everyMode: the failure is not a ContractRefine check the mode governs
	// (an unreadable tool call) and is enforced in every mode.
	everyMode bool
	// kind is the tool kind the gate reads ("" when it reads none).
	kind string
	// gated is whether the request is a gated call.
	gated bool
}

// outcome is what the gate must answer and record for one rung in one mode.
type outcome struct {
	allowed       bool
	status        int
	reason        string
	advisory      string
	frameOutcome  string
	frameEnforced bool
	frameReason   string
	withPreflight bool
	stepID        string
}

// expect is the table of modes (README.md) applied to a rung: disabled skips the ladder,
// advisory records a failure and lets the call continue to the policy
// (which allows every kind in this table), enforce denies with it.
func expect(r rung, mode binding.Mode) outcome {
	laddered := mode != binding.ModeDisabled && r.gated
	switch {
	case r.contract != "" && (r.everyMode || laddered && mode == binding.ModeEnforce):
		return outcome{status: 403, reason: r.contract, frameOutcome: "deny", frameEnforced: true,
			frameReason: r.contract, withPreflight: r.bound && laddered}
	case r.contract != "" && laddered: // advisory
		return outcome{allowed: true, status: 200, reason: reasonPolicyAllowed, advisory: r.contract,
			frameOutcome: "deny", frameEnforced: false, frameReason: r.contract, withPreflight: r.bound}
	case r.bound && laddered:
		return outcome{allowed: true, status: 200, reason: preflight.ReasonPassed, frameOutcome: "allow",
			frameEnforced: true, frameReason: preflight.ReasonPassed, withPreflight: true, stepID: "s1"}
	default:
		return outcome{allowed: true, status: 200, reason: reasonPolicyAllowed, frameOutcome: "allow",
			frameEnforced: true, frameReason: reasonPolicyAllowed}
	}
}

// kindHeader reads the tool kind from x-autonomy-tool-kind when no body is sent.
func kindHeader(o *binding.Options) { o.KindHeader = "x-autonomy-tool-kind" }

func ladderRungs() map[string]rung {
	echo := func(e *env) preflight.Binding {
		return e.record(preflight.OutcomePass, actorID, step("s1", "tool.echo", map[string]any{"msg": "hi"}))
	}
	echoCall := func(id string) *binding.Request {
		return toolCall("tool.echo", map[string]any{"msg": "hi"}, withID(id, "req-1"))
	}
	actorHeader := func(o *binding.Options) { o.ActorHeader = "X-Autonomy-Actor" }
	return map[string]rung{
		"no header, kind needs no preflight": {
			call: func(e *env) *binding.Request {
				return toolCall("tool.echo", nil, map[string]string{binding.HeaderRequestID: "req-1"})
			},
			kind: "tool.echo", gated: true},
		"no header, requires_preflight": {
			call: func(e *env) *binding.Request {
				return toolCall("tool.shell", map[string]any{"cmd": "ls"}, map[string]string{binding.HeaderRequestID: "req-1"})
			},
			contract: preflight.ReasonPreflightRequired, kind: "tool.shell", gated: true},
		"empty header": {
			call:     func(e *env) *binding.Request { return echoCall("") },
			contract: preflight.ReasonPreflightRequired, kind: "tool.echo", gated: true},
		"malformed header": {
			call:     func(e *env) *binding.Request { return echoCall("pf_not an id!") },
			contract: preflight.ReasonPreflightRequired, kind: "tool.echo", gated: true},
		"header too short to be an id": {
			call:     func(e *env) *binding.Request { return echoCall("pf_short") },
			contract: preflight.ReasonPreflightRequired, kind: "tool.echo", gated: true},
		"unknown id": {
			call:     func(e *env) *binding.Request { return echoCall("pf_AAAAAAAAAAAAAAAAAAAAAA") },
			contract: preflight.ReasonPreflightRequired, presented: true, kind: "tool.echo", gated: true},
		"kind not bound": {
			call: func(e *env) *binding.Request {
				return toolCall("tool.shell", map[string]any{"cmd": "ls"}, withID(echo(e).PreflightID, "req-1"))
			},
			contract: preflight.ReasonBindingMismatch, bound: true, kind: "tool.shell", gated: true},
		"decision repair_required": {
			call: func(e *env) *binding.Request {
				b := e.record(preflight.OutcomeRepairRequired, actorID, step("s1", "tool.echo", map[string]any{"msg": "hi"}))
				return echoCall(b.PreflightID)
			},
			contract: preflight.ReasonBindingMismatch, bound: true, kind: "tool.echo", gated: true},
		"decision deny": {
			call: func(e *env) *binding.Request {
				b := e.record(preflight.OutcomeDeny, actorID, step("s1", "tool.echo", map[string]any{"msg": "hi"}))
				return echoCall(b.PreflightID)
			},
			contract: preflight.ReasonBindingMismatch, bound: true, kind: "tool.echo", gated: true},
		"expired": {
			call: func(e *env) *binding.Request {
				id := echo(e).PreflightID
				e.clock.Advance(bindingLife) // now == expires_at
				return echoCall(id)
			},
			contract: preflight.ReasonExpired, bound: true, kind: "tool.echo", gated: true},
		"expired, args digest differs: the mismatch comes first": {
			call: func(e *env) *binding.Request {
				b := e.record(preflight.OutcomePass, actorID, step("s1", "refund.create.v2", refundArgs))
				e.clock.Advance(bindingLife)
				return toolCall("refund.create.v2", map[string]any{"caseRef": "x", "amountUsd": 1},
					withID(b.PreflightID, "req-1"))
			},
			contract: preflight.ReasonBindingMismatch, bound: true, kind: "refund.create.v2", gated: true},
		"expired, args bound and equal": {
			call: func(e *env) *binding.Request {
				b := e.record(preflight.OutcomePass, actorID, step("s1", "refund.create.v2", refundArgs))
				e.clock.Advance(bindingLife)
				return toolCall("refund.create.v2", refundArgs, withID(b.PreflightID, "req-1"))
			},
			contract: preflight.ReasonExpired, bound: true, kind: "refund.create.v2", gated: true},
		"replay": {
			call: func(e *env) *binding.Request {
				b := echo(e)
				// Another request consumed the only step, through the WAL.
				if _, err := e.db.Consume(context.Background(), consumeOf(&b, "tool.echo", "req-0", e)); err != nil {
					e.t.Fatal(err)
				}
				return echoCall(b.PreflightID)
			},
			contract: preflight.ReasonReplay, bound: true, kind: "tool.echo", gated: true},
		"actor differs from principal": {
			call: func(e *env) *binding.Request {
				r := echoCall(echo(e).PreflightID)
				r.Principal = "spiffe://cluster.local/ns/agents/sa/mallory"
				return r
			},
			contract: preflight.ReasonBindingMismatch, bound: true, kind: "tool.echo", gated: true},
		"actor header differs": {
			opts: actorHeader,
			call: func(e *env) *binding.Request {
				r := echoCall(echo(e).PreflightID)
				r.Headers["x-autonomy-actor"] = "user:mallory"
				r.Principal = actorID // the header wins over the principal
				return r
			},
			contract: preflight.ReasonBindingMismatch, bound: true, kind: "tool.echo", gated: true},
		"actor header not UTF-8": {
			// Recorded with U+FFFD: the frame is written and the call is
			// the mismatch it is, not a 503 with no frame.
			opts: actorHeader,
			call: func(e *env) *binding.Request {
				r := echoCall(echo(e).PreflightID)
				r.Headers["x-autonomy-actor"] = "user:\xff"
				return r
			},
			contract: preflight.ReasonBindingMismatch, bound: true, kind: "tool.echo", gated: true},
		"a number beyond a double, raw args kept": {
			opts: func(o *binding.Options) { o.StoreRawRequests = true },
			call: func(e *env) *binding.Request {
				r := echoCall(echo(e).PreflightID)
				r.Body = []byte(`{"kind":"tool.echo","args":{"n":1e400}}`)
				return r
			},
			contract: reasonMalformedCall, everyMode: true, gated: true},
		// A check without a body (the kind from gate.kind_header, nginx's
		// auth_request) has no args: bound args and clauses cannot be
		// judged on {}, which the real args need not be.
		"no body, arguments bound": {
			opts: kindHeader,
			call: func(e *env) *binding.Request {
				b := e.record(preflight.OutcomePass, actorID, step("s1", "refund.create.v2", map[string]any{}))
				r := toolCall("refund.create.v2", nil, withID(b.PreflightID, "req-1"))
				r.Body, r.Headers["x-autonomy-tool-kind"] = nil, "refund.create.v2"
				return r
			},
			contract: preflight.ReasonBindingMismatch, bound: true, kind: "refund.create.v2", gated: true},
		// Two kind headers arrive joined; the joined kind is no one kind
		// and would need no preflight.
		"no body, kind header twice": {
			opts: kindHeader,
			call: func(e *env) *binding.Request {
				r := toolCall("tool.echo", nil, map[string]string{binding.HeaderRequestID: "req-1"})
				r.Body, r.Headers["x-autonomy-tool-kind"] = nil, "tool.echo,tool.shell"
				return r
			},
			contract: reasonMalformedCall, everyMode: true, gated: true},
		"no body, clauses": {
			opts: kindHeader,
			call: func(e *env) *binding.Request {
				r := toolCall("tool.guarded", nil, map[string]string{binding.HeaderRequestID: "req-1"})
				r.Body, r.Headers["x-autonomy-tool-kind"] = nil, "tool.guarded"
				return r
			},
			contract: preflight.ReasonInvariantViolated, kind: "tool.guarded", gated: true},
		// A Go runtime finds "ARGS" (or "arg\u017f") for its args field:
		// the gate would judge {} while the runtime runs these.
		"args under another spelling": {
			call: func(e *env) *binding.Request {
				r := echoCall(echo(e).PreflightID)
				r.Body = []byte(`{"kind":"tool.echo","ARGS":{"cmd":"rm -rf /"}}`)
				return r
			},
			contract: reasonMalformedCall, everyMode: true, gated: true},
		"args under a Unicode-folded spelling": {
			call: func(e *env) *binding.Request {
				r := echoCall(echo(e).PreflightID)
				r.Body = []byte("{\"kind\":\"tool.echo\",\"arg\u017f\":{\"cmd\":\"rm -rf /\"}}")
				return r
			},
			contract: reasonMalformedCall, everyMode: true, gated: true},
		"args digest differs (bind_arguments)": {
			call: func(e *env) *binding.Request {
				b := e.record(preflight.OutcomePass, actorID, step("s1", "refund.create.v2", refundArgs))
				return toolCall("refund.create.v2", map[string]any{"caseRef": "case:882", "amountUsd": 9999},
					withID(b.PreflightID, "req-1"))
			},
			contract: preflight.ReasonBindingMismatch, bound: true, kind: "refund.create.v2", gated: true},
		"clause violated at the gate": {
			call: func(e *env) *binding.Request {
				args := map[string]any{"caseRef": "case:882", "amountUsd": 0}
				b := e.record(preflight.OutcomePass, actorID, step("s1", "refund.create.v2", args))
				return toolCall("refund.create.v2", args, withID(b.PreflightID, "req-1"))
			},
			contract: preflight.ReasonPreconditionViolated, bound: true, kind: "refund.create.v2", gated: true},
		"valid": {
			call:  func(e *env) *binding.Request { return echoCall(echo(e).PreflightID) },
			bound: true, kind: "tool.echo", gated: true},
		"valid, actor header matches, principal differs": {
			opts: actorHeader,
			call: func(e *env) *binding.Request {
				r := echoCall(echo(e).PreflightID)
				r.Headers["x-autonomy-actor"] = actorID
				r.Principal = "spiffe://cluster.local/ns/agents/sa/agent-1"
				return r
			},
			bound: true, kind: "tool.echo", gated: true},
		"valid, principal matches": {
			call: func(e *env) *binding.Request {
				r := echoCall(echo(e).PreflightID)
				r.Principal = actorID
				return r
			},
			bound: true, kind: "tool.echo", gated: true},
		"valid, args bound": {
			call: func(e *env) *binding.Request {
				b := e.record(preflight.OutcomePass, actorID, step("s1", "refund.create.v2", refundArgs))
				// Same args in another key order and number spelling: same canonical digest.
				r := toolCall("refund.create.v2", nil, withID(b.PreflightID, "req-1"))
				r.Body = []byte(`{"args":{"amountUsd":125.0,"caseRef":"case:882"},"kind":"refund.create.v2"}`)
				return r
			},
			bound: true, kind: "refund.create.v2", gated: true},
		"body not JSON": {
			call: func(e *env) *binding.Request {
				r := echoCall(echo(e).PreflightID)
				r.Body = []byte(`{"kind":`)
				return r
			},
			contract: reasonMalformedCall, everyMode: true, gated: true},
		"body not UTF-8": {
			// The byte 0xff reads as U+FFFD, the preflighted value: the
			// body is refused instead of matching the step's digest.
			call: func(e *env) *binding.Request {
				b := e.record(preflight.OutcomePass, actorID, step("s1", "refund.create.v2", map[string]any{"amountUsd": 125, "caseRef": "\uFFFD"}))
				r := toolCall("refund.create.v2", nil, withID(b.PreflightID, "req-1"))
				r.Body = []byte("{\"args\":{\"amountUsd\":125,\"caseRef\":\"\xff\"},\"kind\":\"refund.create.v2\"}")
				return r
			},
			contract: reasonMalformedCall, everyMode: true, gated: true},
		"body with a lone surrogate": {
			// So does the escape of half a surrogate pair.
			call: func(e *env) *binding.Request {
				b := e.record(preflight.OutcomePass, actorID, step("s1", "refund.create.v2", map[string]any{"amountUsd": 125, "caseRef": "\uFFFD"}))
				r := toolCall("refund.create.v2", nil, withID(b.PreflightID, "req-1"))
				r.Body = []byte(`{"args":{"amountUsd":125,"caseRef":"\ud800"},"kind":"refund.create.v2"}`)
				return r
			},
			contract: reasonMalformedCall, everyMode: true, gated: true},
		"kind named again in upper case": {
			// A Go runtime matches member names to fields without regard
			// to case and keeps the last: it would run tool.shell.
			call: func(e *env) *binding.Request {
				r := echoCall(echo(e).PreflightID)
				r.Body = []byte(`{"kind":"tool.echo","KIND":"tool.shell","args":{}}`)
				return r
			},
			contract: reasonMalformedCall, everyMode: true, gated: true},
		"args named again with a long s": {
			call: func(e *env) *binding.Request {
				b := e.record(preflight.OutcomePass, actorID, step("s1", "refund.create.v2", refundArgs))
				r := toolCall("refund.create.v2", nil, withID(b.PreflightID, "req-1"))
				r.Body = []byte(`{"kind":"refund.create.v2","args":{"amountUsd":125,"caseRef":"case:882"},"arg\u017f":{"amountUsd":999999,"caseRef":"case:999"}}`)
				return r
			},
			contract: reasonMalformedCall, everyMode: true, gated: true},
		"post in lower case is gated": {
			call:     shellCallAs("post"),
			contract: preflight.ReasonPreflightRequired, kind: "tool.shell", gated: true},
		"GET overridden to POST is gated": {
			call:     shellCallAs(http.MethodGet, "x-http-method-override", "post"),
			contract: preflight.ReasonPreflightRequired, kind: "tool.shell", gated: true},
		"an override listing POST among others is gated": {
			call:     shellCallAs(http.MethodGet, "x-http-method-override", "GET, POST"),
			contract: preflight.ReasonPreflightRequired, kind: "tool.shell", gated: true},
		// CGI and WSGI servers fold "_" into "-": X_HTTP_Method_Override
		// reaches a Flask-style override as the dashed header does.
		"PUT overridden to POST with underscores is gated": {
			call:     shellCallAs(http.MethodPut, "x_http_method_override", "POST"),
			contract: preflight.ReasonPreflightRequired, kind: "tool.shell", gated: true},
		"x_method-override naming POST is gated": {
			call:     shellCallAs(http.MethodPatch, "x_method-override", "POST"),
			contract: preflight.ReasonPreflightRequired, kind: "tool.shell", gated: true},
		"POST with white space around it is gated": {
			call:     shellCallAs(" POST "),
			contract: preflight.ReasonPreflightRequired, kind: "tool.shell", gated: true},
		// A runtime reading member names as C strings finds "kind" twice.
		"a NUL in a member name": {
			call: func(e *env) *binding.Request {
				r := echoCall(echo(e).PreflightID)
				r.Body = []byte(`{"kind\u0000x":"tool.shell","kind":"tool.echo","args":{}}`)
				return r
			},
			contract: reasonMalformedCall, everyMode: true, gated: true},
		// Envoy's network-level ext_authz sends no HTTP request: nothing
		// to judge is not an ungated call.
		"no method or path": {
			call: func(e *env) *binding.Request {
				r := toolCall("tool.shell", nil, map[string]string{binding.HeaderRequestID: "req-1"})
				r.Method, r.Path, r.Body = "", "", nil
				return r
			},
			contract: reasonMalformedCall, everyMode: true, gated: true},
		"no path": {
			call: func(e *env) *binding.Request {
				r := toolCall("tool.shell", nil, map[string]string{binding.HeaderRequestID: "req-1"})
				r.Path = ""
				return r
			},
			contract: reasonMalformedCall, everyMode: true, gated: true},
		"GET is not gated": {
			call: func(e *env) *binding.Request {
				r := echoCall(echo(e).PreflightID)
				r.Method, r.Body = http.MethodGet, nil
				return r
			},
		},
	}
}

func consumeOf(b *preflight.Binding, kind, requestID string, e *env) wal.ConsumeRequest {
	return wal.ConsumeRequest{Binding: b, Kind: kind, RequestID: requestID, Time: e.clock.Now()}
}

// TestLadder runs every rung of docs/API.md in every mode of README.md and checks
// the answer, the deny body and the autonomy.decision frame.
func TestLadder(t *testing.T) {
	b := loadTestBundle(t)
	for name, r := range ladderRungs() {
		for _, mode := range modes {
			t.Run(fmt.Sprintf("%s/%s", name, mode), func(t *testing.T) {
				var opts []func(*binding.Options)
				if r.opts != nil {
					opts = append(opts, r.opts)
				}
				e := newEnv(t, b, mode, opts...)
				req := r.call(e)
				want := expect(r, mode)
				d := e.check(req)

				if d.Allowed != want.allowed || d.Status != want.status || d.Reason != want.reason ||
					d.AdvisoryReason != want.advisory {
					t.Fatalf("decision = allowed %v, %d %q, advisory %q; want allowed %v, %d %q, advisory %q",
						d.Allowed, d.Status, d.Reason, d.AdvisoryReason, want.allowed, want.status, want.reason, want.advisory)
				}
				if d.Mode != mode || d.Gated != r.gated || d.ToolKind != r.kind || d.RequestID != "req-1" || d.StepID != want.stepID {
					t.Fatalf("decision fields = %+v", d)
				}
				wantPF := ""
				// A call refused as unreadable (everyMode) presenting a known
				// preflight is recorded under the preflight's audit id.
				known := false
				if id := req.Headers[binding.HeaderPreflightID]; r.everyMode && mode != binding.ModeDisabled && id != "" {
					_, err := e.db.Binding(context.Background(), id)
					known = err == nil
				}
				if want.withPreflight || known {
					wantPF = req.Headers[binding.HeaderPreflightID]
					if b, err := e.db.Binding(context.Background(), wantPF); err != nil || d.AuditID != b.AuditID {
						t.Fatalf("audit id %q, want the preflight's (%+v, %v)", d.AuditID, b, err)
					}
				} else if d.AuditID != "au_gate000000000001" {
					t.Fatalf("audit id %q, want a fresh one", d.AuditID)
				}
				if (r.presented || r.everyMode) && mode != binding.ModeDisabled && idShaped(req.Headers[binding.HeaderPreflightID]) {
					wantPF = req.Headers[binding.HeaderPreflightID]
				}
				if d.PreflightID != wantPF {
					t.Fatalf("preflight id %q, want %q", d.PreflightID, wantPF)
				}

				// The upstream headers of an allow, the body of a deny.
				if d.Allowed {
					h := d.UpstreamHeaders()
					if h[binding.HeaderAuditID] != d.AuditID || h[binding.HeaderAdvisoryReason] != want.advisory {
						t.Fatalf("upstream headers %v", h)
					}
				} else {
					body := denyBody(t, d.DenyBody())
					_, sub, _ := strings.Cut(want.reason, ": ")
					if len(body) != 1 || len(body["error"]) != 3 || body["error"]["code"] != sub ||
						body["error"]["reason"] != want.reason || body["error"]["audit_id"] != d.AuditID {
						t.Fatalf("deny body %s", d.DenyBody())
					}
				}

				// Exactly one decision frame for this request, saying the same.
				frames := e.decisionFrames(d.AuditID)
				if len(frames) != 1 {
					t.Fatalf("%d decision frames under %s, want 1", len(frames), d.AuditID)
				}
				f := frames[0]
				if f.Outcome != want.frameOutcome || f.Enforced != want.frameEnforced ||
					f.Reason != want.frameReason || f.Mode != string(mode) || f.Status != want.status ||
					f.PreflightID != wantPF || f.ToolKind != r.kind || f.StepID != want.stepID || f.RequestID != "req-1" {
					t.Fatalf("decision frame %+v, want %+v", f, want)
				}
				// A clause the call failed is named, without the values it read.
				clauseFailed := mode != binding.ModeDisabled &&
					(r.contract == preflight.ReasonPreconditionViolated || r.contract == preflight.ReasonInvariantViolated)
				if (f.Clause != nil) != clauseFailed || (clauseFailed && (f.Clause.Expression == "" ||
					(f.Clause.Kind != "precondition" && f.Clause.Kind != "invariant"))) {
					t.Fatalf("decision frame names clause %+v, want one: %v", f.Clause, clauseFailed)
				}

				// An allow under a preflight consumed its step: the next
				// request is a replay in enforce.
				if want.stepID != "" && mode == binding.ModeEnforce {
					again := e.check(withRequestID(req, "req-2"))
					if again.Allowed || again.Reason != preflight.ReasonReplay {
						t.Fatalf("second request after a consume: %+v", again)
					}
				}
			})
		}
	}
}

// withRequestID returns a copy of r under another x-request-id.
func withRequestID(r *binding.Request, requestID string) *binding.Request {
	c := *r
	c.Headers = map[string]string{}
	for k, v := range r.Headers {
		c.Headers[k] = v
	}
	c.Headers[binding.HeaderRequestID] = requestID
	return &c
}

// TestUnreadableCallNamesItsPreflight: a call the gate cannot read is
// refused before the ladder runs, but its decision frame still names the
// preflight id it presented and, for a known preflight, joins the
// preflight's audit, so the refused attempts made with an id show with it.
func TestUnreadableCallNamesItsPreflight(t *testing.T) {
	e := newEnv(t, loadTestBundle(t), binding.ModeEnforce)
	b := e.record(preflight.OutcomePass, "", step("s1", "tool.shell", nil))
	unknown := "pf_AAAAAAAAAAAAAAAAAAAAAAAA"
	notJSON := func(id string) *binding.Request {
		r := toolCall("tool.shell", nil, withID(id, "req-"+id))
		r.Body = []byte("notjson")
		return r
	}
	partial := toolCall("tool.shell", nil, withID(b.PreflightID, "req-partial"))
	partial.Headers["x-envoy-auth-partial-body"] = "true"
	for name, tc := range map[string]struct {
		r             *binding.Request
		reason, audit string
	}{
		"not JSON":        {notJSON(b.PreflightID), reasonMalformedCall, b.AuditID},
		"partial body":    {partial, "gate: partial_body", b.AuditID},
		"an unknown id":   {notJSON(unknown), reasonMalformedCall, ""},
		"an id-less call": {notJSON(""), reasonMalformedCall, ""},
	} {
		t.Run(name, func(t *testing.T) {
			d := e.check(tc.r)
			want := tc.r.Headers[binding.HeaderPreflightID]
			if d.Allowed || d.Reason != tc.reason || d.PreflightID != want {
				t.Fatalf("%+v, want a %s deny naming preflight id %q", d, tc.reason, want)
			}
			if tc.audit != "" && d.AuditID != tc.audit {
				t.Fatalf("audit id %s, want the preflight's %s", d.AuditID, tc.audit)
			}
			if tc.audit == "" && d.AuditID == b.AuditID {
				t.Fatalf("a call not presenting the preflight joined its audit")
			}
		})
	}
	if frames := e.decisionFrames(b.AuditID); len(frames) != 2 || frames[0].PreflightID != b.PreflightID {
		t.Fatalf("the preflight's join holds %+v, want the two refused attempts", frames)
	}
}

// idShaped reports whether id has the shape the ladder looks up.
var idShaped = regexp.MustCompile(`^[A-Za-z0-9_-]{16,128}$`).MatchString

// TestNoBodyRecordsNoArgsDigest: a call without a body (its kind from
// gate.kind_header) is judged on args {}, but its real args are unknown,
// so neither its decision frame nor its consumed marker's frame records a
// digest of {} as if they were its args.
func TestNoBodyRecordsNoArgsDigest(t *testing.T) {
	for _, raw := range []bool{false, true} {
		e := newEnv(t, loadTestBundle(t), binding.ModeEnforce, kindHeader, func(o *binding.Options) { o.StoreRawRequests = raw })
		b := e.record(preflight.OutcomePass, actorID, step("s1", "tool.echo", map[string]any{"msg": "hi"}))
		r := toolCall("tool.echo", nil, withID(b.PreflightID, "req-1"))
		r.Body, r.Headers["x-autonomy-tool-kind"] = nil, "tool.echo"
		if d := e.check(r); !d.Allowed {
			t.Fatalf("no-body call of a step that binds no args: %+v", d)
		}
		frames, err := e.db.AuditFramesOf(context.Background(), b.AuditID, []string{wal.KindDecision, wal.KindConsumed})
		if err != nil {
			t.Fatal(err)
		}
		var seen int
		for _, f := range frames {
			if f.Kind != wal.KindDecision && f.Kind != wal.KindConsumed {
				continue
			}
			seen++
			for _, name := range []string{"args_digest", "args"} {
				if has, err := f.Attr(name, new(any)); err != nil || has {
					t.Errorf("store_raw_requests %v: %s frame holds %s: %s", raw, f.Kind, name, f.Attrs)
				}
			}
		}
		if seen != 2 {
			t.Fatalf("%d decision and consumed frames under %s, want 2", seen, b.AuditID)
		}
	}
}
