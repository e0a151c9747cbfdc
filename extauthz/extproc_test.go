package extauthz_test

import (
	"cmp"
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/extauthz"
	"github.com/contractrefine/autonomy/internal/bundle/bundletest"
	"github.com/contractrefine/autonomy/internal/ids"
	"github.com/contractrefine/autonomy/wal"
)

// outcomeData declares after-call clauses: a ledger debit whose result
// must be the balance before the call less the amount, the same with
// strict: false, a debit whose invariant holds on the result, and an echo
// with no contract.
const outcomeData = `autonomy:
  capabilities:
    tool.echo: { zones: ["*"] }
    ledger.debit:
      zones: ["*"]
      contract:
        postconditions: ["status == 200", "result.balance == old(args.balance) - args.amount"]
        invariants: ["args.amount > 0"]
        message: "the balance must drop by the amount"
    ledger.soft:
      zones: ["*"]
      contract:
        postconditions: ["result.balance == old(args.balance) - args.amount"]
        strict: false
    ledger.keep:
      zones: ["*"]
      contract:
        invariants: ["args.amount > 0", "result.balance >= 0"]
`

// outcomeEnv is a gate over a real WAL and bundle with both Envoy services
// on one real gRPC server.
type outcomeEnv struct {
	*env
	authz authv3.AuthorizationClient
	proc  extprocv3.ExternalProcessorClient
	stop  func()
}

func newOutcomeEnv(t *testing.T, mode binding.Mode, o extauthz.ProcessorOptions, opts ...func(*binding.Options)) *outcomeEnv {
	t.Helper()
	dir := t.TempDir()
	return startOutcomeEnv(t, dir, mode, o, opts...)
}

func startOutcomeEnv(t *testing.T, dir string, mode binding.Mode, o extauthz.ProcessorOptions, opts ...func(*binding.Options)) *outcomeEnv {
	t.Helper()
	b := bundletest.Load(t, map[string]string{"policy.rego": testPolicy, "data.yaml": outcomeData}, nil)
	db, err := wal.Open(filepath.Join(dir, "wal"), nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, db: db, now: time.Now().UTC()}
	bo := binding.Options{Store: db, Log: db, Outcomes: db, Policy: func() binding.Policy { return b }, Mode: mode,
		Now: e.clock, NewID: ids.Audit}
	for _, f := range opts {
		f(&bo)
	}
	e.gate = binding.New(bo)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	extauthz.NewServer(e.gate).Register(srv)
	extauthz.NewProcessor(e.gate, o).Register(srv)
	go srv.Serve(ln)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			conn.Close()
			srv.Stop()
			db.Close()
		}
	}
	t.Cleanup(stop)
	return &outcomeEnv{env: e, authz: authv3.NewAuthorizationClient(conn),
		proc: extprocv3.NewExternalProcessorClient(conn), stop: stop}
}

// allow runs the ext_authz Check Envoy makes first and returns the audit
// id it adds to the request.
func (e *outcomeEnv) allow(t *testing.T, kind string, args map[string]any, requestID string) string {
	t.Helper()
	resp := check(t, e.authz, envoyCheck(kind, args, "", requestID))
	if resp.GetOkResponse() == nil {
		t.Fatalf("Check denied %s: %v", kind, resp)
	}
	return headerValues(resp.GetOkResponse().GetHeaders())[binding.HeaderAuditID]
}

func hm(kv ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return m
}

// envoyRequest is the request half Envoy sends with both bodies buffered:
// the request headers as ext_authz left them (its audit id added), then
// the whole body.
func envoyRequest(kind string, args map[string]any, requestID, auditID string) []*extprocv3.ProcessingRequest {
	body, _ := json.Marshal(map[string]any{"kind": kind, "args": args})
	return []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hm(
			":authority", "tools.internal", ":method", "POST", ":path", "/v1/tool", ":scheme", "http",
			"content-type", "application/json", "content-length", strconv.Itoa(len(body)),
			"x-request-id", requestID, binding.HeaderAuditID, auditID)}}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}},
	}
}

func envoyResponse(status int, body string) []*extprocv3.ProcessingRequest {
	headers := &extprocv3.HttpHeaders{Headers: hm(":status", strconv.Itoa(status), "content-type", "application/json",
		"content-length", strconv.Itoa(len(body))), EndOfStream: body == ""}
	out := []*extprocv3.ProcessingRequest{{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: headers}}}
	if body != "" {
		out = append(out, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}})
	}
	return out
}

// exchange sends msgs one at a time, as Envoy does, and returns each
// answer; it stops at an immediate response.
func (e *outcomeEnv) exchange(t *testing.T, msgs []*extprocv3.ProcessingRequest) []*extprocv3.ProcessingResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := e.proc.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*extprocv3.ProcessingResponse
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			t.Fatalf("send: %v", err)
		}
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("recv after %T: %v", m.Request, err)
		}
		out = append(out, r)
		if r.GetImmediateResponse() != nil {
			break
		}
	}
	stream.CloseSend()
	return out
}

// outcomes reads the outcome frames under auditID.
func (e *outcomeEnv) outcomes(t *testing.T, auditID string) []wal.OutcomeAttrs {
	t.Helper()
	frames, err := e.db.AuditFramesOf(context.Background(), auditID, []string{wal.KindOutcome})
	if err != nil {
		t.Fatal(err)
	}
	var out []wal.OutcomeAttrs
	for _, f := range frames {
		a, err := f.Outcome()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

// waitOutcomes polls for n outcome frames: a stream that breaks is judged
// after the client has gone, so the test cannot wait on an answer.
func (e *outcomeEnv) waitOutcomes(t *testing.T, auditID string, n int) []wal.OutcomeAttrs {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := e.outcomes(t, auditID)
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type violation struct {
	Error struct {
		Code    string `json:"code"`
		Reason  string `json:"reason"`
		AuditID string `json:"audit_id"`
		Clause  *struct {
			Kind       string         `json:"kind"`
			Expression string         `json:"expression"`
			Bindings   map[string]any `json:"bindings"`
			Message    string         `json:"message"`
		} `json:"clause"`
	} `json:"error"`
}

func TestExtProcAsEnvoySendsIt(t *testing.T) {
	debit := map[string]any{"balance": 100, "amount": 25}
	tests := map[string]struct {
		mode     binding.Mode
		opts     extauthz.ProcessorOptions
		kind     string
		args     map[string]any
		status   int
		body     string
		want     string // "pass", "warn" or "502"
		outcome  string
		reason   string
		enforced bool
		clause   string // the expression the 502 names
		// clauseKind is the kind of clause the 502 names; "" is postcondition.
		clauseKind string
	}{
		"headers only, no contract": {kind: "tool.echo", args: map[string]any{}, status: 204,
			want: "pass", outcome: "ok", reason: "outcome: ok"},
		"buffered bodies, the postcondition holds": {kind: "ledger.debit", args: debit, status: 200, body: `{"balance":75}`,
			want: "pass", outcome: "ok", reason: "outcome: ok"},
		"a wrong result is replaced by a 502": {kind: "ledger.debit", args: debit, status: 200, body: `{"balance":50}`,
			want: "502", outcome: "violated", reason: "clause: postcondition_violated", enforced: true,
			clause: "result.balance == old(args.balance) - args.amount"},
		"a status the postcondition refuses": {kind: "ledger.debit", args: debit, status: 500, body: `{"balance":75}`,
			want: "502", outcome: "violated", reason: "clause: postcondition_violated", enforced: true, clause: "status == 200"},
		"a body that is not JSON is result null": {kind: "ledger.debit", args: debit, status: 200, body: `balance=75`,
			want: "502", outcome: "violated", reason: "clause: postcondition_violated", enforced: true,
			clause: "result.balance == old(args.balance) - args.amount"},
		"an oversized body is never passed": {kind: "tool.echo", args: map[string]any{}, status: 200, body: `{"x":"0123456789"}`,
			opts: extauthz.ProcessorOptions{MaxBodyBytes: 8},
			want: "502", outcome: "violated", reason: "outcome: unverified", enforced: true},
		"an invariant that fails on the result": {kind: "ledger.keep", args: debit, status: 200, body: `{"balance":-5}`,
			want: "502", outcome: "violated", reason: "clause: invariant_violated", enforced: true,
			clause: "result.balance >= 0", clauseKind: "invariant"},
		"an invariant that holds on the result": {kind: "ledger.keep", args: debit, status: 200, body: `{"balance":75}`,
			want: "pass", outcome: "ok", reason: "outcome: ok"},
		"strict false passes with the warning": {kind: "ledger.soft", args: debit, status: 200, body: `{"balance":50}`,
			want: "warn", outcome: "violated", reason: "clause: postcondition_violated"},
		"advisory records and passes": {mode: binding.ModeAdvisory, kind: "ledger.debit", args: debit, status: 200,
			body: `{"balance":50}`, want: "pass", outcome: "violated", reason: "clause: postcondition_violated"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			mode := tc.mode
			if mode == "" {
				mode = binding.ModeEnforce
			}
			e := newOutcomeEnv(t, mode, tc.opts)
			auditID := e.allow(t, tc.kind, tc.args, "req-1")
			msgs := append(envoyRequest(tc.kind, tc.args, "req-1", auditID), envoyResponse(tc.status, tc.body)...)
			answers := e.exchange(t, msgs)
			// Request headers and body are answered in kind.
			if answers[0].GetRequestHeaders() == nil || answers[1].GetRequestBody() == nil {
				t.Fatalf("request messages answered %v, %v", answers[0], answers[1])
			}
			last := answers[len(answers)-1]
			switch tc.want {
			case "502":
				im := last.GetImmediateResponse()
				if im == nil || im.GetStatus().GetCode() != 502 {
					t.Fatalf("want an immediate 502, got %v", last)
				}
				var v violation
				if err := json.Unmarshal(im.GetBody(), &v); err != nil {
					t.Fatalf("502 body %s: %v", im.GetBody(), err)
				}
				if v.Error.Reason != tc.reason || v.Error.AuditID != auditID {
					t.Errorf("502 body %s: want reason %s and audit id %s", im.GetBody(), tc.reason, auditID)
				}
				kind := cmp.Or(tc.clauseKind, "postcondition")
				if tc.clause != "" && (v.Error.Clause == nil || v.Error.Clause.Expression != tc.clause ||
					v.Error.Clause.Kind != kind || v.Error.Code != kind+"_violated") {
					t.Errorf("502 body %s: want clause %q", im.GetBody(), tc.clause)
				}
			case "pass", "warn":
				if len(answers) != len(msgs) || last.GetImmediateResponse() != nil {
					t.Fatalf("want every message answered in kind, got %v", answers)
				}
				common := last.GetResponseBody().GetResponse()
				if tc.body == "" {
					common = last.GetResponseHeaders().GetResponse()
				}
				var warning string
				for _, h := range common.GetHeaderMutation().GetSetHeaders() {
					if h.GetHeader().GetKey() == binding.HeaderPostconditionWarning {
						warning = string(h.GetHeader().GetRawValue())
					}
				}
				if (tc.want == "warn") != (warning != "") {
					t.Errorf("warning header %q, want it set: %v", warning, tc.want == "warn")
				}
			}
			got := e.outcomes(t, auditID)
			if len(got) != 1 {
				t.Fatalf("want one outcome frame, got %+v", got)
			}
			a := got[0]
			if a.Outcome != tc.outcome || a.Reason != tc.reason || a.Enforced != tc.enforced || a.Status != tc.status ||
				a.RequestID != "req-1" || a.ToolKind != tc.kind || a.ReportedBy != wal.ReporterEnvoy {
				t.Errorf("outcome frame %+v, want outcome %s reason %s enforced %v status %d", a, tc.outcome, tc.reason, tc.enforced, tc.status)
			}
		})
	}
}

// TestExtProcNeverPassesABrokenStream: a stream that ends, or runs out of
// time, before the response is judged records the call as unverified and
// answers nothing that would release the response.
func TestExtProcNeverPassesABrokenStream(t *testing.T) {
	debit := map[string]any{"balance": 100, "amount": 25}
	t.Run("broken", func(t *testing.T) {
		e := newOutcomeEnv(t, binding.ModeEnforce, extauthz.ProcessorOptions{})
		auditID := e.allow(t, "ledger.debit", debit, "req-1")
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := e.proc.Process(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range append(envoyRequest("ledger.debit", debit, "req-1", auditID), envoyResponse(200, `{"balance":75}`)[0]) {
			if err := stream.Send(m); err != nil {
				t.Fatal(err)
			}
			if _, err := stream.Recv(); err != nil {
				t.Fatal(err)
			}
		}
		cancel() // Envoy went away between the response headers and the body
		got := e.waitOutcomes(t, auditID, 1)
		if len(got) != 1 || got[0].Outcome != "violated" || got[0].Reason != "outcome: unverified" || got[0].Detail == "" {
			t.Fatalf("want one unverified outcome, got %+v", got)
		}
	})
	t.Run("a message over the size limit", func(t *testing.T) {
		e := newOutcomeEnv(t, binding.ModeEnforce, extauthz.ProcessorOptions{})
		auditID := e.allow(t, "ledger.debit", debit, "req-1")
		// grpc-go's server takes messages of 4 MiB at most by default.
		huge := `{"balance":"` + strings.Repeat("x", 5<<20) + `"}`
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stream, err := e.proc.Process(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range append(envoyRequest("ledger.debit", debit, "req-1", auditID), envoyResponse(200, huge)...) {
			if err := stream.Send(m); err != nil {
				break // the server ended the stream
			}
		}
		for {
			if _, err := stream.Recv(); err != nil {
				break // the stream's end
			}
		}
		got := e.waitOutcomes(t, auditID, 1)
		if len(got) != 1 || got[0].Reason != "outcome: unverified" || !strings.Contains(got[0].Detail, "ResourceExhausted") {
			t.Fatalf("want one unverified outcome naming the message's size, got %+v", got)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		e := newOutcomeEnv(t, binding.ModeEnforce, extauthz.ProcessorOptions{Timeout: 200 * time.Millisecond})
		auditID := e.allow(t, "ledger.debit", debit, "req-1")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stream, err := e.proc.Process(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range envoyRequest("ledger.debit", debit, "req-1", auditID) {
			if err := stream.Send(m); err != nil {
				t.Fatal(err)
			}
			if _, err := stream.Recv(); err != nil {
				t.Fatal(err)
			}
		}
		// The upstream never answers: the next thing on the stream is its end.
		_, err = stream.Recv()
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("want DEADLINE_EXCEEDED, got %v", err)
		}
		got := e.waitOutcomes(t, auditID, 1)
		if len(got) != 1 || got[0].Reason != "outcome: unverified" || got[0].Status != 0 {
			t.Fatalf("want one unverified outcome, got %+v", got)
		}
	})
	// Messages Envoy does not send at that point: a violating response
	// must not pass unjudged, whatever comes between.
	for name, msgs := range map[string]func(auditID string) []*extprocv3.ProcessingRequest{
		"the request's headers again": func(auditID string) []*extprocv3.ProcessingRequest {
			req := envoyRequest("ledger.debit", debit, "req-1", auditID)
			other := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
				Headers: hm(":method", "GET", ":path", "/healthz", "x-request-id", "req-1")}}}
			return append(append(req, other), envoyResponse(200, `{"balance":50}`)...)
		},
		"the response's headers again": func(auditID string) []*extprocv3.ProcessingRequest {
			first := envoyResponse(500, `{"balance":50}`)[0]
			return append(append(envoyRequest("ledger.debit", debit, "req-1", auditID), first), envoyResponse(200, `{"balance":75}`)...)
		},
		"the response's body before its headers": func(auditID string) []*extprocv3.ProcessingRequest {
			return append(envoyRequest("ledger.debit", debit, "req-1", auditID), envoyResponse(200, `{"balance":75}`)[1])
		},
		// Something between ext_authz and ext_proc rewrote the body: the
		// response would be judged against args nobody allowed.
		"the request's body with other args": func(auditID string) []*extprocv3.ProcessingRequest {
			other := map[string]any{"balance": 75, "amount": 25}
			return append(envoyRequest("ledger.debit", other, "req-1", auditID), envoyResponse(200, `{"balance":50}`)...)
		},
		"the response's trailers before its body": func(auditID string) []*extprocv3.ProcessingRequest {
			headers := envoyResponse(200, `{"balance":50}`)[0]
			trailers := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
				ResponseTrailers: &extprocv3.HttpTrailers{}}}
			return append(envoyRequest("ledger.debit", debit, "req-1", auditID), headers, trailers)
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := newOutcomeEnv(t, binding.ModeEnforce, extauthz.ProcessorOptions{})
			auditID := e.allow(t, "ledger.debit", debit, "req-1")
			answers := e.exchange(t, msgs(auditID))
			im := answers[len(answers)-1].GetImmediateResponse()
			if im == nil || im.GetStatus().GetCode() != 502 {
				t.Fatalf("want an immediate 502, got %v", answers)
			}
			got := e.outcomes(t, auditID)
			if len(got) != 1 || got[0].Reason != "outcome: unverified" || !got[0].Enforced {
				t.Fatalf("want one enforced unverified outcome, got %+v", got)
			}
		})
	}
	t.Run("a response for no allowed request", func(t *testing.T) {
		e := newOutcomeEnv(t, binding.ModeEnforce, extauthz.ProcessorOptions{})
		answers := e.exchange(t, append(envoyRequest("ledger.debit", debit, "req-9", ids.Audit()), envoyResponse(200, `{"balance":75}`)...))
		im := answers[len(answers)-1].GetImmediateResponse()
		if im == nil || im.GetStatus().GetCode() != 502 {
			t.Fatalf("want an immediate 502, got %v", answers)
		}
	})
}

// TestExtProcAfterRestart: the service restarts between Envoy's Check and
// the response; the new process finds the decision in the WAL and the
// outcome joins the same audit id, with the step the Check consumed.
func TestExtProcAfterRestart(t *testing.T) {
	debit := map[string]any{"balance": 100, "amount": 25}
	dir := t.TempDir()
	first := startOutcomeEnv(t, dir, binding.ModeEnforce, extauthz.ProcessorOptions{})
	auditID := first.allow(t, "ledger.debit", debit, "req-1")
	first.stop()
	second := startOutcomeEnv(t, dir, binding.ModeEnforce, extauthz.ProcessorOptions{})
	answers := second.exchange(t, append(envoyRequest("ledger.debit", debit, "req-1", auditID), envoyResponse(200, `{"balance":50}`)...))
	if im := answers[len(answers)-1].GetImmediateResponse(); im == nil {
		t.Fatalf("want the violation answered after the restart, got %v", answers)
	}
	got := second.outcomes(t, auditID)
	if len(got) != 1 || got[0].Reason != "clause: postcondition_violated" || got[0].ToolKind != "ledger.debit" {
		t.Fatalf("want the outcome under audit id %s, got %+v", auditID, got)
	}
	frames, err := second.db.AuditFramesOf(context.Background(), auditID, []string{wal.KindDecision, wal.KindOutcome})
	if err != nil || len(frames) != 2 || frames[0].Kind != wal.KindDecision || frames[1].Kind != wal.KindOutcome {
		t.Fatalf("want the decision then the outcome, got %v %v", frames, err)
	}
}

// TestExtProcPassesEnvoysOwnReplies: Envoy sends a reply an earlier filter
// made (ext_authz's deny) through ext_proc's response path with no request
// messages before it. Nothing reached the tool, so the reply passes as it
// is and no outcome is recorded; a 2xx reply with neither a request nor the
// gate's audit id is still refused.
func TestExtProcPassesEnvoysOwnReplies(t *testing.T) {
	e := newOutcomeEnv(t, binding.ModeEnforce, extauthz.ProcessorOptions{})
	resp := check(t, e.authz, envoyCheck("ledger.debit", map[string]any{"balance": 100, "amount": 25}, "pf_BBBBBBBBBBBBBBBBBBBBBBBB", "req-1"))
	denied := resp.GetDeniedResponse()
	if denied == nil {
		t.Fatalf("Check allowed a call with an unknown preflight id: %v", resp)
	}
	h := headerValues(denied.GetHeaders())
	auditID := h[binding.HeaderAuditID]
	reply := []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: hm(
			":status", strconv.Itoa(int(denied.GetStatus().GetCode())), "content-type", "application/json",
			binding.HeaderAuditID, auditID)}}},
		{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte(denied.GetBody()), EndOfStream: true}}},
	}
	answers := e.exchange(t, reply)
	if len(answers) != 2 || answers[0].GetResponseHeaders() == nil || answers[1].GetResponseBody() == nil {
		t.Fatalf("the gate's own deny was not passed as it is: %v", answers)
	}
	if got := e.outcomes(t, auditID); len(got) != 0 {
		t.Errorf("a reply that never reached the tool was recorded as an outcome: %+v", got)
	}

	// A 2xx with nothing to say the gate allowed it is not passed.
	answers = e.exchange(t, envoyResponse(200, `{"balance":75}`))
	if im := answers[len(answers)-1].GetImmediateResponse(); im == nil || im.GetStatus().GetCode() != 502 {
		t.Fatalf("a 2xx response with no request before it was passed: %v", answers)
	}
}

// TestExtProcObservabilityModeRecordsNotEnforced: a filter in observability
// mode releases the response whatever it is answered, so a violation is
// recorded with enforced false.
func TestExtProcObservabilityModeRecordsNotEnforced(t *testing.T) {
	e := newOutcomeEnv(t, binding.ModeEnforce, extauthz.ProcessorOptions{})
	args := map[string]any{"balance": 100, "amount": 25}
	auditID := e.allow(t, "ledger.debit", args, "req-1")
	msgs := append(envoyRequest("ledger.debit", args, "req-1", auditID), envoyResponse(200, `{"balance":50}`)...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := e.proc.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		m.ObservabilityMode = true
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	got := e.waitOutcomes(t, auditID, 1)
	stream.CloseSend()
	if len(got) != 1 || got[0].Outcome != wal.OutcomeViolated || got[0].Reason != "clause: postcondition_violated" || got[0].Enforced {
		t.Fatalf("outcome frames %+v, want one violated and not enforced", got)
	}
}

// TestExtProcAdvisoryUnknownPreflight: advisory mode lets through a call
// whose preflight id was never recorded; its response is judged on its
// clauses (there is no envelope, so no output contract), not unverified.
func TestExtProcAdvisoryUnknownPreflight(t *testing.T) {
	e := newOutcomeEnv(t, binding.ModeAdvisory, extauthz.ProcessorOptions{})
	args := map[string]any{"balance": 100, "amount": 25}
	resp := check(t, e.authz, envoyCheck("ledger.debit", args, "pf_BBBBBBBBBBBBBBBBBBBBBBBB", "req-1"))
	if resp.GetOkResponse() == nil {
		t.Fatalf("advisory Check denied: %v", resp)
	}
	auditID := headerValues(resp.GetOkResponse().GetHeaders())[binding.HeaderAuditID]
	for body, want := range map[string]string{`{"balance":75}`: "outcome: ok", `{"balance":50}`: "clause: postcondition_violated"} {
		e.exchange(t, append(envoyRequest("ledger.debit", args, "req-1", auditID), envoyResponse(200, body)...))
		got := e.outcomes(t, auditID)
		if len(got) == 0 || got[len(got)-1].Reason != want {
			t.Fatalf("response %s: outcome frames %+v, want the last %s", body, got, want)
		}
	}
}
