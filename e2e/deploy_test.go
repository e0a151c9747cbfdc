package e2e

// This file proves two of the three deployment paths of issue 4 with real
// processes — (a) the built-in gateway and (b) a gRPC client that plays
// Envoy — and holds the story and the tool-runtime helpers that the nginx
// path (nginx_test.go) and the demo tests (demo_test.go) share. Every path
// walks the same story against the same assertions; the tool runtime's own
// log file is the witness of what got past the check. Helpers carry the dp
// prefix so they cannot collide with other files of the package.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
)

// dpExpiryWait bounds the polling loop that waits for a 1s binding window
// to run out.
const dpExpiryWait = 10 * time.Second

// Reasons the story expects (docs/API.md).
const (
	dpPassed    = "contract: passed"
	dpReplay    = "contract: preflight_replay"
	dpMismatch  = "contract: preflight_binding_mismatch"
	dpExpired   = "contract: preflight_expired"
	dpRequired  = "contract: preflight_required"
	dpKindHdr   = "X-Autonomy-Tool-Kind"
	dpShellKind = "tool.shell" // requires_preflight in the default bundle
)

// dpMainConfig is the service config of every path: the kind header is
// what nginx's body-less check reads; the others send a body and ignore it.
const dpMainConfig = "gate:\n  kind_header: x-autonomy-tool-kind\n"

// dpExpiryConfig is the same with a one-second binding window, for the
// expired step.
const dpExpiryConfig = "contract_refine:\n  binding_window: 1s\ngate:\n  kind_header: x-autonomy-tool-kind\n"

var dpRuntimeBuild struct {
	once sync.Once
	path string
	err  error
}

// dpRuntimeBinary builds cmd/toolruntime once per test run, beside the
// harness's autonomy binary.
func dpRuntimeBinary(t testing.TB) string {
	t.Helper()
	goTool := NeedProgram(t, "go", "to build cmd/toolruntime")
	dpRuntimeBuild.once.Do(func() {
		dpRuntimeBuild.path = filepath.Join(binDir, "toolruntime")
		cmd := exec.Command(goTool, "build", "-o", dpRuntimeBuild.path, "github.com/contractrefine/autonomy/cmd/toolruntime")
		if out, err := cmd.CombinedOutput(); err != nil {
			dpRuntimeBuild.err = fmt.Errorf("go build cmd/toolruntime: %v\n%s", err, out)
		}
	})
	if dpRuntimeBuild.err != nil {
		t.Fatal(dpRuntimeBuild.err)
	}
	return dpRuntimeBuild.path
}

// dpRuntime is one running example tool runtime.
type dpRuntime struct {
	Addr    string
	logFile string
}

// URL is the runtime's base URL.
func (r *dpRuntime) URL() string { return "http://" + r.Addr }

// dpStartRuntime starts `toolruntime --addr 127.0.0.1:0 --log-file F` and
// returns once it has logged the address it listens on. The process gets
// SIGTERM (then SIGKILL) when the test ends.
func dpStartRuntime(t *testing.T) *dpRuntime {
	t.Helper()
	rt := &dpRuntime{logFile: filepath.Join(t.TempDir(), "toolruntime.log")}
	cmd := exec.Command(dpRuntimeBinary(t), "--addr", "127.0.0.1:0", "--log-file", rt.logFile)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan string, 1)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "listening" {
				addrs <- rec.Addr
			}
		}
		cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(stopTimeout):
			cmd.Process.Kill()
			<-exited
		}
	})
	select {
	case rt.Addr = <-addrs:
		return rt
	case <-exited:
		t.Fatalf("toolruntime exited before listening: %s", stderr.String())
	case <-time.After(startTimeout):
		t.Fatalf("toolruntime did not log \"listening\" within %s", startTimeout)
	}
	return nil
}

// dpRuntimeCall is one "tool call" record of the runtime's log: what
// reached it.
type dpRuntimeCall struct {
	Kind        string `json:"kind"`
	Status      int    `json:"status"`
	AuditID     string `json:"x-autonomy-audit-id"`
	RequestID   string `json:"x-request-id"`
	PreflightID string `json:"x-autonomy-preflight-id"`
	// AdvisoryReason is what reached the runtime in
	// X-Autonomy-Advisory-Reason: only the service may set it.
	AdvisoryReason string `json:"x-autonomy-advisory-reason"`
}

// calls reads the runtime's own log file. The runtime writes a call's line
// before it answers, so every call the test has an answer for is there.
func (r *dpRuntime) calls(t *testing.T) []dpRuntimeCall {
	t.Helper()
	b, err := os.ReadFile(r.logFile)
	if err != nil {
		t.Fatalf("read the runtime's log: %v", err)
	}
	var out []dpRuntimeCall
	for _, line := range bytes.Split(b, []byte("\n")) {
		var rec struct {
			Msg string `json:"msg"`
			dpRuntimeCall
		}
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "tool call" {
			out = append(out, rec.dpRuntimeCall)
		}
	}
	return out
}

// dpStack is what every path runs: one tool runtime and two services in
// enforce mode, one with the default 5m binding window and one with 1s.
type dpStack struct {
	rt           *dpRuntime
	main, expiry *Server
}

// dpStartStack starts the stack; with gateway set both services run the
// built-in gateway in front of the runtime.
func dpStartStack(t *testing.T, gateway bool) *dpStack {
	t.Helper()
	st := &dpStack{rt: dpStartRuntime(t)}
	dir := t.TempDir()
	var args []string
	if gateway {
		args = []string{"--upstream", st.rt.URL(), "--gateway-addr", "127.0.0.1:0"}
	}
	start := func(name, body string) *Server {
		cfg := filepath.Join(dir, name)
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return StartServer(t, ServeOptions{Mode: "enforce", Config: cfg, Args: args})
	}
	st.main = start("main.yaml", dpMainConfig)
	st.expiry = start("expiry.yaml", dpExpiryConfig)
	return st
}

// dpCall is one tool call as the agent makes it.
type dpCall struct {
	kind        string
	preflightID string
	// requestID is the X-Request-Id the client sends; only the fake Envoy
	// uses it as is, the real proxies replace it.
	requestID string
}

// dpResult is what the agent saw, plus the request id the proxy gave the
// call (the id the gate recorded and the runtime logged).
type dpResult struct {
	status    int
	body      []byte
	requestID string
	auditID   string
	// reason is the deny body's reason; "" when the path does not hand
	// the body to the client (nginx's auth_request).
	reason string
}

// dpFront is one deployment path.
type dpFront struct {
	name string
	// api is the base URL an agent uses for /v1/preflight and /v1/audit/.
	api string
	// call sends one POST /v1/tool through the path.
	call func(t *testing.T, c dpCall) dpResult
	// denyBody says whether a deny's JSON body reaches the client.
	denyBody bool
}

// dpArgs are the args of every call and of the preflighted step.
var dpArgs = map[string]any{"cmd": "notify on-call case:882"}

func dpToolBody(kind string) []byte {
	b, _ := json.Marshal(map[string]any{"kind": kind, "args": dpArgs})
	return b
}

// dpNoRedirects is the agent's HTTP client: it reports a redirect instead
// of following it, so a test sees exactly what the front answered.
var dpNoRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error {
	return http.ErrUseLastResponse
}}

// dpHTTPCall posts a tool call to url the way an agent does (the kind in
// the body and, for body-less checks, in X-Autonomy-Tool-Kind), and reads the
// answer: the request id and audit id from the response headers, the
// reason from a JSON deny body.
func dpHTTPCall(t *testing.T, url string, c dpCall) dpResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(dpToolBody(c.kind)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(dpKindHdr, c.kind)
	if c.requestID != "" {
		req.Header.Set("X-Request-Id", c.requestID)
	}
	if c.preflightID != "" {
		req.Header.Set("X-Autonomy-Preflight-Id", c.preflightID)
	}
	resp, err := dpNoRedirects.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	res := dpResult{status: resp.StatusCode, body: body,
		requestID: resp.Header.Get("X-Request-Id"), auditID: resp.Header.Get("X-Autonomy-Audit-Id")}
	dpReadDenyBody(&res)
	return res
}

// dpReadDenyBody fills reason (and the audit id, when no header carried
// it) from a docs/API.md deny body.
func dpReadDenyBody(res *dpResult) {
	var e struct {
		Error struct {
			Reason  string `json:"reason"`
			AuditID string `json:"audit_id"`
		} `json:"error"`
	}
	if res.status != http.StatusOK && json.Unmarshal(res.body, &e) == nil {
		res.reason = e.Error.Reason
		if res.auditID == "" {
			res.auditID = e.Error.AuditID
		}
	}
}

// dpPreflightDecision is the part of a PreflightDecision the story reads.
type dpPreflightDecision struct {
	PreflightID string `json:"preflight_id"`
	AuditID     string `json:"audit_id"`
	Outcome     string `json:"outcome"`
	Eligibility struct {
		BoundToolKinds []string  `json:"bound_tool_kinds"`
		ExpiresAt      time.Time `json:"expires_at"`
	} `json:"eligibility"`
}

// dpPreflight posts a passing one-step tool.shell plan through api and
// returns the decision.
func dpPreflight(t *testing.T, api, session string) dpPreflightDecision {
	t.Helper()
	req := map[string]any{
		"intent": map[string]any{"summary": "Notify the on-call engineer about case 882", "plan_hash": "plan-" + session},
		"plan": map[string]any{"steps": []any{
			map[string]any{"id": "s1", "kind": dpShellKind, "zone": "ops", "args": dpArgs,
				"provenance": map[string]any{"cmd": "literal"}},
		}},
		"context": map[string]any{
			"actor":       map[string]any{"id": "user:e2e", "session_id": session},
			"attestation": map[string]any{"node_id": "edge-7", "issued_at": time.Now().UTC().Format(time.RFC3339)},
		},
	}
	status, body, _ := PostJSON(t, api+"/v1/preflight", req)
	var d dpPreflightDecision
	if status != http.StatusOK || json.Unmarshal(body, &d) != nil || d.Outcome != "pass" || d.PreflightID == "" || d.AuditID == "" {
		t.Fatalf("preflight through %s: want 200 pass with ids, got %d %s", api, status, body)
	}
	if !slices.Equal(d.Eligibility.BoundToolKinds, []string{dpShellKind}) {
		t.Fatalf("preflight binds %v, want [%s]", d.Eligibility.BoundToolKinds, dpShellKind)
	}
	return d
}

// dpFrame is one frame of GET /v1/audit/{id}.
type dpFrame struct {
	Seq   uint64         `json:"seq"`
	Kind  string         `json:"kind"`
	Attrs map[string]any `json:"attrs"`
}

// dpAudit reads the audit join through api.
func dpAudit(t *testing.T, api, auditID string) []dpFrame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, api+"/v1/audit/"+auditID, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var join struct {
		AuditID string    `json:"audit_id"`
		Frames  []dpFrame `json:"frames"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &join) != nil || join.AuditID != auditID {
		t.Fatalf("GET %s/v1/audit/%s: want 200 with the join, got %d %s", api, auditID, resp.StatusCode, body)
	}
	return join.Frames
}

// dpEntry is one call the story made and what it must have done.
type dpEntry struct {
	step    string
	api     string // where its audit join is read
	kind    string
	res     dpResult
	allowed bool
	reason  string
	auditID string // the audit id the decision must be filed under
}

// dpLedger collects the story's calls so the end of the test can hold
// them against the runtime's log and the audit joins.
type dpLedger struct{ entries []dpEntry }

// expect checks one answer as the agent sees it and records the call.
func (l *dpLedger) expect(t *testing.T, f dpFront, api string, e dpEntry) {
	t.Helper()
	e.api = api
	if e.res.requestID == "" {
		t.Errorf("%s: %s: the answer names no request id", f.name, e.step)
	}
	if e.allowed {
		if e.res.status != http.StatusOK {
			t.Errorf("%s: %s: want 200 from the runtime, got %d %s", f.name, e.step, e.res.status, e.res.body)
		}
	} else {
		if e.res.status != http.StatusForbidden {
			t.Errorf("%s: %s: want 403, got %d %s", f.name, e.step, e.res.status, e.res.body)
		}
		if f.denyBody && e.res.reason != e.reason {
			t.Errorf("%s: %s: want deny reason %q, got %q (%s)", f.name, e.step, e.reason, e.res.reason, e.res.body)
		}
	}
	if e.auditID == "" {
		e.auditID = e.res.auditID
	} else if e.res.auditID != "" && e.res.auditID != e.auditID {
		t.Errorf("%s: %s: answer carries audit id %s, want %s", f.name, e.step, e.res.auditID, e.auditID)
	}
	if e.auditID == "" {
		t.Errorf("%s: %s: no audit id to look the decision up by", f.name, e.step)
	}
	l.entries = append(l.entries, e)
}

// verify proves, from the runtime's own log, that exactly the allowed
// calls reached it (each once, with its audit id and request id), and,
// from the audit joins, that every call has its decision frame.
func (l *dpLedger) verify(t *testing.T, f dpFront, rt *dpRuntime) {
	t.Helper()
	calls := rt.calls(t)
	byID := map[string][]dpRuntimeCall{}
	for _, c := range calls {
		byID[c.RequestID] = append(byID[c.RequestID], c)
	}
	allowed := 0
	for _, e := range l.entries {
		got := byID[e.res.requestID]
		if !e.allowed {
			if len(got) > 0 {
				t.Errorf("%s: %s was denied but reached the runtime: %+v", f.name, e.step, got)
			}
			continue
		}
		allowed++
		if len(got) != 1 {
			t.Errorf("%s: %s: want one runtime log line with x-request-id %s, got %+v", f.name, e.step, e.res.requestID, got)
			continue
		}
		if got[0].AuditID != e.auditID || got[0].Kind != e.kind || got[0].Status != http.StatusOK || got[0].AdvisoryReason != "" {
			t.Errorf("%s: %s: runtime logged %+v, want kind %s, status 200, x-autonomy-audit-id %s, no advisory reason",
				f.name, e.step, got[0], e.kind, e.auditID)
		}
	}
	if len(calls) != allowed {
		t.Errorf("%s: the runtime logged %d calls, want only the %d allowed ones: %+v", f.name, len(calls), allowed, calls)
	}
	for _, e := range l.entries {
		frames := dpAudit(t, e.api, e.auditID)
		var found []dpFrame
		for _, fr := range frames {
			if fr.Kind == "autonomy.decision" && fr.Attrs["request_id"] == e.res.requestID {
				found = append(found, fr)
			}
		}
		outcome := "deny"
		if e.allowed {
			outcome = "allow"
		}
		if len(found) != 1 || found[0].Attrs["outcome"] != outcome || found[0].Attrs["reason"] != e.reason ||
			found[0].Attrs["tool_kind"] != e.kind || found[0].Attrs["enforced"] != true {
			t.Errorf("%s: %s: want one enforced decision frame (request %s, %s, %q, %s) under %s, got %+v",
				f.name, e.step, e.res.requestID, outcome, e.reason, e.kind, e.auditID, found)
		}
	}
}

// dpFrameKinds lists the kinds of frames in order.
func dpFrameKinds(frames []dpFrame) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		out[i] = f.Kind
	}
	return out
}

// dpStory walks the issue-4 story through main (the 5m service) and
// expiry (the 1s service) and returns the ledger for verify; a test may
// add its own calls before verifying.
func dpStory(t *testing.T, main, expiry dpFront) *dpLedger {
	t.Helper()
	l := &dpLedger{}
	session := uuid.NewString()

	// The preflight, then the call it allows.
	p1 := dpPreflight(t, main.api, "s1-"+session)
	l.expect(t, main, main.api, dpEntry{step: "the bound call", kind: dpShellKind, allowed: true, reason: dpPassed,
		auditID: p1.AuditID, res: main.call(t, dpCall{kind: dpShellKind, preflightID: p1.PreflightID})})
	if ok := l.entries[0].res; ok.status == http.StatusOK && !bytes.Contains(ok.body, []byte(`"simulated":true`)) {
		t.Errorf("%s: the bound call's answer is not the runtime's: %s", main.name, ok.body)
	}

	// The same call again: a replay.
	l.expect(t, main, main.api, dpEntry{step: "the replay", kind: dpShellKind, reason: dpReplay, auditID: p1.AuditID,
		res: main.call(t, dpCall{kind: dpShellKind, preflightID: p1.PreflightID})})

	// A kind the preflight does not bind; it consumes nothing, so the
	// bound kind then still passes.
	p2 := dpPreflight(t, main.api, "s2-"+session)
	l.expect(t, main, main.api, dpEntry{step: "the wrong kind", kind: "tool.echo", reason: dpMismatch, auditID: p2.AuditID,
		res: main.call(t, dpCall{kind: "tool.echo", preflightID: p2.PreflightID})})
	l.expect(t, main, main.api, dpEntry{step: "the bound kind after a mismatch", kind: dpShellKind, allowed: true,
		reason: dpPassed, auditID: p2.AuditID, res: main.call(t, dpCall{kind: dpShellKind, preflightID: p2.PreflightID})})

	// A requires_preflight kind with no header.
	l.expect(t, main, main.api, dpEntry{step: "the call without a preflight", kind: dpShellKind, reason: dpRequired,
		res: main.call(t, dpCall{kind: dpShellKind})})

	// An expired binding, on the service with a 1s window: poll the clock
	// until the preflight's expires_at has passed, then call.
	p3 := dpPreflight(t, expiry.api, "s3-"+session)
	exp := p3.Eligibility.ExpiresAt
	if exp.IsZero() || exp.After(time.Now().Add(dpExpiryWait)) {
		t.Fatalf("%s: the 1s-window preflight expires at %v", expiry.name, exp)
	}
	for !time.Now().After(exp) {
		time.Sleep(10 * time.Millisecond)
	}
	l.expect(t, expiry, expiry.api, dpEntry{step: "the expired call", kind: dpShellKind, reason: dpExpired, auditID: p3.AuditID,
		res: expiry.call(t, dpCall{kind: dpShellKind, preflightID: p3.PreflightID})})

	// The audit join of the first preflight: its verdict, then both
	// decisions in order.
	want := []string{"autonomy.preflight", "autonomy.decision", "autonomy.decision"}
	if got := dpFrameKinds(dpAudit(t, main.api, p1.AuditID)); !slices.Equal(got, want) {
		t.Errorf("%s: audit join of %s has frames %v, want %v", main.name, p1.AuditID, got, want)
	}
	if got := dpFrameKinds(dpAudit(t, expiry.api, p3.AuditID)); !slices.Equal(got, want[:2]) {
		t.Errorf("%s: audit join of %s has frames %v, want %v", expiry.name, p3.AuditID, got, want[:2])
	}
	return l
}

// dpGatewayFront is path (a): agents talk to the gateway only.
func dpGatewayFront(name string, s *Server) dpFront {
	base := "http://" + s.GatewayAddr
	return dpFront{name: name, api: base, denyBody: true,
		call: func(t *testing.T, c dpCall) dpResult { return dpHTTPCall(t, base+"/v1/tool", c) }}
}

// TestDeployGateway is path (a): `autonomy serve --upstream --gateway-addr`
// as the one front URL, preflights and audit reads included.
func TestDeployGateway(t *testing.T) {
	t.Parallel()
	st := dpStartStack(t, true)
	if st.main.GatewayAddr == "" || st.expiry.GatewayAddr == "" {
		t.Fatal("autonomy serve --upstream logged no gateway_addr")
	}
	main, expiry := dpGatewayFront("gateway", st.main), dpGatewayFront("gateway (1s window)", st.expiry)
	l := dpStory(t, main, expiry)

	// The gateway chooses request ids: a client that resends the id of the
	// call that consumed the preflight does not pass as its retry.
	p := dpPreflight(t, main.api, "retry-"+uuid.NewString())
	first := main.call(t, dpCall{kind: dpShellKind, preflightID: p.PreflightID, requestID: "client-chosen"})
	l.expect(t, main, main.api, dpEntry{step: "a call with a client-chosen request id", kind: dpShellKind,
		allowed: true, reason: dpPassed, auditID: p.AuditID, res: first})
	if first.requestID == "client-chosen" {
		t.Errorf("gateway: the client's X-Request-Id reached the gate")
	}
	l.expect(t, main, main.api, dpEntry{step: "a replay resending the first call's request id", kind: dpShellKind,
		reason: dpReplay, auditID: p.AuditID,
		res: main.call(t, dpCall{kind: dpShellKind, preflightID: p.PreflightID, requestID: first.requestID})})

	// Paths are normalized before the check: these are /v1/tool.
	for name, path := range map[string]string{"merged slashes": "//v1//tool", "dot segments": "/v1/x/../tool"} {
		res := dpHTTPCall(t, "http://"+st.main.GatewayAddr+path, dpCall{kind: dpShellKind})
		l.expect(t, main, main.api, dpEntry{step: "a call without a preflight to " + path + " (" + name + ")",
			kind: dpShellKind, reason: dpRequired, res: res})
	}
	l.verify(t, main, st.rt)
}

// dpEnvoyFront is path (b): the test is Envoy. It sends each call's
// CheckRequest over gRPC exactly as Envoy's ext_authz filter does (headers
// lower-cased with the pseudo headers, the body packed as bytes, its own
// x-request-id in the headers and the id field), and forwards an allowed
// call to the runtime with the OkHttpResponse's header mutations applied.
func dpEnvoyFront(name string, s *Server, rt *dpRuntime, t *testing.T) dpFront {
	authz := s.Authz(t)
	return dpFront{name: name, api: s.URL(""), denyBody: true, call: func(t *testing.T, c dpCall) dpResult {
		t.Helper()
		// Envoy issues the request id (preserve_external_request_id off).
		requestID := uuid.NewString()
		headers := map[string]string{"user-agent": "e2e-agent/1", "accept": "*/*"}
		if c.preflightID != "" {
			headers["x-autonomy-preflight-id"] = c.preflightID
		}
		req := ToolCheck(c.kind, dpArgs, requestID, headers)
		hr := req.Attributes.Request.Http
		hr.Headers[":authority"] = "127.0.0.1:10000"
		hr.Host = "127.0.0.1:10000"
		req.Attributes.Source.Address = dpSocket("127.0.0.1", 51234)
		req.Attributes.Destination = &authv3.AttributeContext_Peer{Address: dpSocket("127.0.0.1", 10000)}
		ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
		defer cancel()
		resp, err := authz.Check(ctx, req)
		if err != nil {
			t.Fatalf("%s: Check: %v", name, err)
		}
		if codes.Code(resp.GetStatus().GetCode()) != codes.OK {
			denied := resp.GetDeniedResponse()
			if codes.Code(resp.GetStatus().GetCode()) != codes.PermissionDenied || denied == nil {
				t.Errorf("%s: a deny must be PERMISSION_DENIED with a DeniedHttpResponse, got %v", name, resp)
			}
			res := dpResult{status: int(denied.GetStatus().GetCode()), body: []byte(denied.GetBody()), requestID: requestID}
			if res.status == 0 {
				res.status = 403 // what Envoy sends when the response sets none
			}
			for _, h := range denied.GetHeaders() {
				if strings.EqualFold(h.GetHeader().GetKey(), "x-autonomy-audit-id") {
					res.auditID = h.GetHeader().GetValue()
				}
			}
			dpReadDenyBody(&res)
			return res
		}
		ok := resp.GetOkResponse()
		if ok == nil {
			t.Fatalf("%s: an allow without an OkHttpResponse: %v", name, resp)
		}
		// The upstream request: the client's headers, then the mutations.
		up := http.Header{}
		for k, v := range hr.Headers {
			if !strings.HasPrefix(k, ":") {
				up.Set(k, v)
			}
		}
		dpApplyHeaderMutations(up, ok.GetHeaders())
		for _, k := range ok.GetHeadersToRemove() {
			up.Del(k)
		}
		hreq, err := http.NewRequestWithContext(ctx, hr.Method, rt.URL()+hr.Path, bytes.NewReader(hr.RawBody))
		if err != nil {
			t.Fatal(err)
		}
		hreq.Header = up
		hresp, err := http.DefaultClient.Do(hreq)
		if err != nil {
			t.Fatalf("%s: forward to the runtime: %v", name, err)
		}
		defer hresp.Body.Close()
		body, _ := io.ReadAll(hresp.Body)
		return dpResult{status: hresp.StatusCode, body: body, requestID: requestID, auditID: up.Get("x-autonomy-audit-id")}
	}}
}

// dpApplyHeaderMutations applies HeaderValueOptions the way Envoy does
// (append_action; the deprecated append field is not used by the service).
func dpApplyHeaderMutations(h http.Header, opts []*corev3.HeaderValueOption) {
	for _, o := range opts {
		k, v := o.GetHeader().GetKey(), o.GetHeader().GetValue()
		_, present := h[http.CanonicalHeaderKey(k)]
		switch o.GetAppendAction() {
		case corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD:
			h.Add(k, v)
		case corev3.HeaderValueOption_ADD_IF_ABSENT:
			if !present {
				h.Set(k, v)
			}
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD:
			h.Set(k, v)
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
			if present {
				h.Set(k, v)
			}
		}
	}
}

func dpSocket(ip string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}
}

// TestDeployEnvoyShapedGRPC is path (b): the service's gRPC Check driven
// by a client that sends what Envoy sends and forwards what Envoy forwards.
func TestDeployEnvoyShapedGRPC(t *testing.T) {
	t.Parallel()
	st := dpStartStack(t, false)
	main := dpEnvoyFront("envoy-shaped gRPC", st.main, st.rt, t)
	expiry := dpEnvoyFront("envoy-shaped gRPC (1s window)", st.expiry, st.rt, t)
	l := dpStory(t, main, expiry)
	l.verify(t, main, st.rt)
}
