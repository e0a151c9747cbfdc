package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/preflight"
)

// recordingGate stands in for the gate: the gateway is under test here
// (what it hands the check and the upstream), not the ladder, which the
// e2e tests drive through this gateway with the real gate.
type recordingGate struct {
	mu    sync.Mutex
	seen  []*binding.Request
	allow bool
}

func (g *recordingGate) Check(_ context.Context, r *binding.Request) binding.Decision {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seen = append(g.seen, r)
	if g.allow {
		return binding.Decision{Allowed: true, Status: 200, AuditID: "au_test", Mode: binding.ModeEnforce}
	}
	return binding.Decision{Status: 403, Reason: "contract: preflight_required", AuditID: "au_test", Mode: binding.ModeEnforce}
}

type upstreamSeen struct {
	path, requestID, auditID, forwardedURI, body string
	expect                                       string
	trailer                                      http.Header
	contentLength                                int64
	transferEncoding                             []string
}

func newGateway(t *testing.T, allow bool, opts ...func(*Options)) (*recordingGate, *httptest.Server, chan upstreamSeen) {
	t.Helper()
	seen := make(chan upstreamSeen, 8)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen <- upstreamSeen{path: r.URL.Path, requestID: r.Header.Get("X-Request-Id"),
			auditID: r.Header.Get("X-Autonomy-Audit-Id"), forwardedURI: r.Header.Get("X-Forwarded-Uri"), body: string(b),
			expect: r.Header.Get("Expect"), trailer: r.Trailer, contentLength: r.ContentLength, transferEncoding: r.TransferEncoding}
		w.Write([]byte("upstream"))
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	gate := &recordingGate{allow: allow}
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("api " + r.URL.Path)) })
	n := 0
	o := Options{Gate: gate, Upstream: u, API: api, MaxBodyBytes: 1 << 10,
		NewRequestID: func() string { n++; return "rq-" + string(rune('0'+n)) }}
	for _, f := range opts {
		f(&o)
	}
	gw := httptest.NewServer(New(o))
	t.Cleanup(gw.Close)
	return gate, gw, seen
}

func do(t *testing.T, method, url string, header map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestGatewayRoutes(t *testing.T) {
	tests := map[string]struct {
		method, path string
		// gated: the request goes to the gate (and, allowed, upstream as
		// upstreamPath); otherwise the API answers "api <apiPath>".
		gated        bool
		upstreamPath string
		apiPath      string
		status       int
	}{
		"tool call":                  {method: "POST", path: "/v1/tool", gated: true, upstreamPath: "/v1/tool", status: 200},
		"merged slashes":             {method: "POST", path: "//v1//tool", gated: true, upstreamPath: "/v1/tool", status: 200},
		"dot segments":               {method: "POST", path: "/v1/a/../tool", gated: true, upstreamPath: "/v1/tool", status: 200},
		"trailing slash kept":        {method: "POST", path: "/v1/tool/", gated: true, upstreamPath: "/v1/tool/", status: 200},
		"other path, gated":          {method: "GET", path: "/healthz", gated: true, upstreamPath: "/healthz", status: 200},
		"preflight":                  {method: "POST", path: "/v1/preflight", apiPath: "/v1/preflight", status: 200},
		"preflight by id":            {method: "GET", path: "/v1/preflight/pf_x", apiPath: "/v1/preflight/pf_x", status: 200},
		"audit":                      {method: "GET", path: "/v1/audit/au_x", apiPath: "/v1/audit/au_x", status: 200},
		"audit via dot segments":     {method: "GET", path: "/v1/tool/../audit/au_x", apiPath: "/v1/audit/au_x", status: 200},
		"preflight prefix, not API":  {method: "POST", path: "/v1/preflights", gated: true, upstreamPath: "/v1/preflights", status: 200},
		"approvals list":             {method: "GET", path: "/v1/approvals", apiPath: "/v1/approvals", status: 200},
		"approval decision":          {method: "POST", path: "/v1/approvals/pf_x/s1", apiPath: "/v1/approvals/pf_x/s1", status: 200},
		"approvals prefix, not API":  {method: "POST", path: "/v1/approvalsx", gated: true, upstreamPath: "/v1/approvalsx", status: 200},
		"approvals, other case":      {method: "POST", path: "/V1/Approvals/pf_x/s1", apiPath: "/V1/Approvals/pf_x/s1", status: 200},
		"escaped slash refused":      {method: "POST", path: "/v1%2ftool", status: 400},
		"escaped backslash refused":  {method: "POST", path: "/v1%5ctool", status: 400},
		"upper-case escapes refused": {method: "POST", path: "/v1%5Ctool", status: 400},
		"escaped slash, upper case":  {method: "POST", path: "/v1%2Ftool", status: 400},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			gate, gw, seen := newGateway(t, true)
			resp, body := do(t, tc.method, gw.URL+tc.path, nil, `{"kind":"tool.echo"}`)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if got := len(gate.seen); (got == 1) != tc.gated {
				t.Fatalf("gate saw %d requests, gated=%v", got, tc.gated)
			}
			switch {
			case tc.gated:
				if gate.seen[0].Path != tc.upstreamPath {
					t.Errorf("gate saw path %q, want %q", gate.seen[0].Path, tc.upstreamPath)
				}
				if u := <-seen; u.path != tc.upstreamPath {
					t.Errorf("upstream got path %q, want %q", u.path, tc.upstreamPath)
				}
			case tc.apiPath != "":
				if body != "api "+tc.apiPath {
					t.Errorf("API answered %q, want %q", body, "api "+tc.apiPath)
				}
			}
		})
	}
}

func TestGatewayRequestIDAndHeaders(t *testing.T) {
	forged := map[string]string{
		"X-Request-Id":        "client-chosen",
		"X-Autonomy-Audit-Id": "au_forged",
		"X-Forwarded-Uri":     "/elsewhere",
		"X-Original-Method":   "GET",
	}
	t.Run("allowed", func(t *testing.T) {
		gate, gw, seen := newGateway(t, true)
		resp, _ := do(t, "POST", gw.URL+"/v1/tool", forged, `{"kind":"tool.echo"}`)
		u := <-seen
		r := gate.seen[0]
		if r.Headers["x-request-id"] != "rq-1" || u.requestID != "rq-1" || resp.Header.Get("X-Request-Id") != "rq-1" {
			t.Errorf("request id: gate %q, upstream %q, response %q; want the gateway's rq-1 in all three",
				r.Headers["x-request-id"], u.requestID, resp.Header.Get("X-Request-Id"))
		}
		if r.Method != "POST" || r.Path != "/v1/tool" || r.Headers["x-autonomy-audit-id"] != "" {
			t.Errorf("gate saw %s %s with audit id %q: the client's forwarded and audit headers must not count",
				r.Method, r.Path, r.Headers["x-autonomy-audit-id"])
		}
		if u.auditID != "au_test" || u.body != `{"kind":"tool.echo"}` {
			t.Errorf("upstream got audit id %q and body %q, want au_test and the client's body", u.auditID, u.body)
		}
	})
	t.Run("denied", func(t *testing.T) {
		_, gw, seen := newGateway(t, false)
		resp, body := do(t, "POST", gw.URL+"/v1/tool", forged, `{"kind":"tool.echo"}`)
		if resp.StatusCode != 403 || resp.Header.Get("X-Request-Id") != "rq-1" || !strings.Contains(body, "preflight_required") {
			t.Errorf("deny: %d, request id %q, body %s", resp.StatusCode, resp.Header.Get("X-Request-Id"), body)
		}
		select {
		case u := <-seen:
			t.Errorf("a denied request reached the upstream: %+v", u)
		default:
		}
	})
}

// TestGatewayClientCannotReshapeTheCall: what the client sends cannot make
// the upstream get another call than the one the gate checked, nor one
// without the headers the gateway set.
func TestGatewayClientCannotReshapeTheCall(t *testing.T) {
	t.Run("the actor header is the proxy's", func(t *testing.T) {
		gate, gw, seen := newGateway(t, true, func(o *Options) { o.ActorHeader = "X-Autonomy-Actor" })
		do(t, "POST", gw.URL+"/v1/tool", map[string]string{"X-Autonomy-Actor": "user:victim"}, `{"kind":"tool.echo"}`)
		<-seen
		if a, ok := gate.seen[0].Headers["x-autonomy-actor"]; ok {
			t.Errorf("the gate saw the client's actor header %q", a)
		}
	})
	t.Run("a trusted proxy's actor header is kept", func(t *testing.T) {
		gate, gw, seen := newGateway(t, true, func(o *Options) {
			o.ActorHeader = "X-Autonomy-Actor"
			o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
		})
		do(t, "POST", gw.URL+"/v1/tool", map[string]string{"X-Autonomy-Actor": "user:alice", "X-Autonomy-Audit-Id": "au_forged"}, `{"kind":"tool.echo"}`)
		if u := <-seen; u.auditID != "au_test" {
			t.Errorf("upstream got audit id %q: only the actor header is the proxy's to set", u.auditID)
		}
		if a := gate.seen[0].Headers["x-autonomy-actor"]; a != "user:alice" {
			t.Errorf("the gate saw actor %q, want the trusted proxy's user:alice", a)
		}
	})
	t.Run("an untrusted peer's actor header is removed", func(t *testing.T) {
		gate, gw, seen := newGateway(t, true, func(o *Options) {
			o.ActorHeader = "X-Autonomy-Actor"
			o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
		})
		do(t, "POST", gw.URL+"/v1/tool", map[string]string{"X-Autonomy-Actor": "user:victim"}, `{"kind":"tool.echo"}`)
		<-seen
		if a, ok := gate.seen[0].Headers["x-autonomy-actor"]; ok {
			t.Errorf("the gate saw the client's actor header %q", a)
		}
	})
	t.Run("nor can their underscore spellings", func(t *testing.T) {
		got := headersUpstreamGets(t, "X-Autonomy-Actor", map[string]string{"X_Autonomy_Audit_Id": "au_forged",
			"X_Autonomy_Actor": "user:forged", "X_Request_Id": "forged", "X_Autonomy_Advisory_Reason": "x", "X_Other": "kept"})
		for k := range got {
			if strings.Contains(k, "_") && k != "X_other" {
				t.Errorf("upstream got %s: %q", k, got[k])
			}
		}
		if got.Get("X_Other") != "kept" {
			t.Errorf("an unrelated underscore header was dropped: %v", got)
		}
	})
	t.Run("the client's address headers do not reach the upstream", func(t *testing.T) {
		got := headersUpstreamGets(t, "", map[string]string{"X-Real-Ip": "10.1.1.1", "X_Real_Ip": "10.1.1.2",
			"X-Forwarded-For": "10.1.1.1", "Forwarded": "for=10.1.1.1"})
		if v := got.Values("X-Real-Ip"); len(v) > 0 || got.Get("X_Real_Ip") != "" || got.Get("Forwarded") != "" ||
			got.Get("X-Forwarded-For") != "127.0.0.1" {
			t.Errorf("upstream got X-Real-Ip %q, X_Real_Ip %q, Forwarded %q, X-Forwarded-For %q; want only the gateway's peer in X-Forwarded-For",
				v, got.Get("X_Real_Ip"), got.Get("Forwarded"), got.Get("X-Forwarded-For"))
		}
	})
	t.Run("Connection cannot drop the gateway's headers", func(t *testing.T) {
		_, gw, seen := newGateway(t, true)
		do(t, "POST", gw.URL+"/v1/tool", map[string]string{
			"Connection": "X-Autonomy-Audit-Id, x-request-id, X-Autonomy-Preflight-Id, X-Other"}, `{"kind":"tool.echo"}`)
		if u := <-seen; u.auditID != "au_test" || u.requestID != "rq-1" {
			t.Errorf("upstream got audit id %q and request id %q, want au_test and rq-1", u.auditID, u.requestID)
		}
	})
	t.Run("trailers and Expect are not passed on", func(t *testing.T) {
		_, gw, seen := newGateway(t, true)
		pr, pw := io.Pipe()
		go func() {
			pw.Write([]byte(`{"kind":"tool.echo"}`))
			pw.Close()
		}()
		req, err := http.NewRequest("POST", gw.URL+"/v1/tool", pr) // unknown length: chunked, with trailers
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Expect", "100-continue")
		req.Trailer = http.Header{"X-Autonomy-Audit-Id": {"au_forged"}, "X-Autonomy-Preflight-Id": {"pf_forged"}}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		u := <-seen
		if len(u.trailer) != 0 || u.expect != "" || u.body != `{"kind":"tool.echo"}` || u.auditID != "au_test" {
			t.Errorf("upstream got trailer %v, Expect %q, body %q, audit id %q", u.trailer, u.expect, u.body, u.auditID)
		}
		// The body the gate read is replayed with its length.
		if u.contentLength != int64(len(`{"kind":"tool.echo"}`)) || len(u.transferEncoding) != 0 {
			t.Errorf("upstream got Content-Length %d and Transfer-Encoding %v, want the body's length and no chunking", u.contentLength, u.transferEncoding)
		}
	})
	t.Run("upgrades are refused", func(t *testing.T) {
		gate, gw, seen := newGateway(t, true)
		resp, body := do(t, "GET", gw.URL+"/ws", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"}, "")
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "upgrade_refused") || len(gate.seen) != 0 {
			t.Errorf("upgrade: %d %s, gate saw %d requests", resp.StatusCode, body, len(gate.seen))
		}
		select {
		case u := <-seen:
			t.Errorf("an upgrade reached the upstream: %+v", u)
		default:
		}
	})
}

// headersUpstreamGets sends a gated POST with header through a gateway
// (actor header actorHeader, "" for none) whose gate allows it, and
// returns the headers its upstream got.
func headersUpstreamGets(t *testing.T, actorHeader string, header map[string]string) http.Header {
	t.Helper()
	headers := make(chan http.Header, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { headers <- r.Header.Clone() }))
	defer up.Close()
	u, _ := url.Parse(up.URL)
	gw := httptest.NewServer(New(Options{Gate: &recordingGate{allow: true}, Upstream: u, MaxBodyBytes: 1 << 10,
		ActorHeader: actorHeader, NewRequestID: func() string { return "rq-1" }}))
	defer gw.Close()
	do(t, "POST", gw.URL+"/v1/tool", header, `{"kind":"tool.echo"}`)
	return <-headers
}

// TestGatewayBodyNotReadWhole: an allowed request whose body is over the
// limit or cannot be read is refused, never forwarded with what was read
// (an empty or cut body the upstream would take for the request).
func TestGatewayBodyNotReadWhole(t *testing.T) {
	var codes codeLog
	_, gw, seen := newGateway(t, true, func(o *Options) { o.OnError = codes.add })
	big := strings.Repeat("x", 2<<10) // MaxBodyBytes is 1 KiB
	resp, body := do(t, http.MethodPut, gw.URL+"/v1/upload", nil, big)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, `"code":"request-too-large"`) {
		t.Fatalf("over the limit: %d %s", resp.StatusCode, body)
	}
	select {
	case u := <-seen:
		t.Fatalf("the upstream was handed %q", u.body)
	default:
	}

	// A client that stops sending: the handler is driven directly, with a
	// body that fails half way, and an upstream nothing listens on (a
	// forward would answer 502).
	h := New(Options{Gate: &recordingGate{allow: true}, Upstream: &url.URL{Scheme: "http", Host: "127.0.0.1:1"},
		MaxBodyBytes: 1 << 10, OnError: codes.add})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/v1/upload", io.MultiReader(strings.NewReader("part"), failingReader{})))
	if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"code":"body-unreadable"`) {
		t.Fatalf("body cut off: %d %s", rec.Code, rec.Body.String())
	}
	codes.want(t, preflight.CodeRequestTooLarge, preflight.CodeBodyUnreadable)
}

// codeLog collects the codes OnError is told, from the servers' goroutines.
type codeLog struct {
	mu    sync.Mutex
	codes []string
}

func (l *codeLog) add(code string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.codes = append(l.codes, code)
}

func (l *codeLog) want(t *testing.T, codes ...string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if strings.Join(l.codes, ",") != strings.Join(codes, ",") {
		t.Errorf("OnError told %v, want %v", l.codes, codes)
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

// TestGatewayCountsItsErrors: every error the gateway answers itself is
// reported to OnError by its code.
func TestGatewayCountsItsErrors(t *testing.T) {
	var codes codeLog
	_, gw, _ := newGateway(t, true, func(o *Options) {
		o.OnError = codes.add
		o.Upstream = &url.URL{Scheme: "http", Host: "127.0.0.1:1"} // nothing listens
	})
	for _, tc := range []struct {
		path   string
		header map[string]string
		status int
	}{
		{"/v1%2ftool", nil, http.StatusBadRequest},
		{"/v1/tool", map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"}, http.StatusBadRequest},
		{"/v1/tool", nil, http.StatusBadGateway},
	} {
		if resp, body := do(t, http.MethodPost, gw.URL+tc.path, tc.header, `{"kind":"tool.echo"}`); resp.StatusCode != tc.status {
			t.Fatalf("%s: %d %s", tc.path, resp.StatusCode, body)
		}
	}
	codes.want(t, preflight.CodePathRejected, preflight.CodeUpgradeRefused, preflight.CodeUpstreamUnavailable)
}

// TestGatewayUpstreamTimeout: an upstream that does not start its answer
// within UpstreamTimeout gets the client a 502 upstream-unavailable, not
// a connection held until the upstream answers.
func TestGatewayUpstreamTimeout(t *testing.T) {
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select { // answers 200 after 5s if the gateway waits that long
		case <-release:
		case <-time.After(5 * time.Second):
		}
	}))
	t.Cleanup(hung.Close)
	defer close(release)
	u, _ := url.Parse(hung.URL)
	var codes codeLog
	_, gw, _ := newGateway(t, true, func(o *Options) {
		o.Upstream, o.UpstreamTimeout, o.OnError = u, 50*time.Millisecond, codes.add
	})
	resp, body := do(t, http.MethodPost, gw.URL+"/v1/tool", nil, `{"kind":"tool.echo"}`)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, preflight.CodeUpstreamUnavailable) {
		t.Fatalf("hung upstream: %d %s, want 502 %s", resp.StatusCode, body, preflight.CodeUpstreamUnavailable)
	}
	codes.want(t, preflight.CodeUpstreamUnavailable)
}

// gatedGate allows every call as a gated one, and judgeStub records the
// outcomes it is asked for under its audit id.
type gatedGate struct{}

func (gatedGate) Check(context.Context, *binding.Request) binding.Decision {
	return binding.Decision{Allowed: true, Gated: true, Status: 200, AuditID: "au_gated", Mode: binding.ModeEnforce}
}

type judgeStub struct{ errs chan error }

func (j judgeStub) Outcome(_ context.Context, x *binding.Exchange) binding.Verdict {
	j.errs <- x.Response.Err
	return binding.Verdict{Judged: true, AuditID: x.Decision.AuditID, Status: http.StatusBadGateway}
}

// TestGatewayUpstreamDownNamesTheAudit: when the upstream cannot be
// reached the call's outcome is recorded as unverified, and the 502 names
// its audit id, in the body and the header, so the caller can find it.
func TestGatewayUpstreamDownNamesTheAudit(t *testing.T) {
	j := judgeStub{errs: make(chan error, 1)}
	gw := httptest.NewServer(New(Options{Gate: gatedGate{}, Judge: j, Upstream: &url.URL{Scheme: "http", Host: "127.0.0.1:1"},
		MaxBodyBytes: 1 << 10}))
	t.Cleanup(gw.Close)
	resp, body := do(t, http.MethodPost, gw.URL+"/v1/tool", nil, `{"kind":"tool.echo"}`)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, `"code":"upstream-unavailable"`) ||
		!strings.Contains(body, `"audit_id":"au_gated"`) || resp.Header.Get("X-Autonomy-Audit-Id") != "au_gated" ||
		resp.Header.Get("X-Request-Id") == "" {
		t.Fatalf("upstream down: %d %v %s, want 502 upstream-unavailable naming au_gated", resp.StatusCode, resp.Header, body)
	}
	if err := <-j.errs; err == nil {
		t.Fatal("the outcome was asked for without the upstream's error")
	}
}

// TestGatewayEventStreamOutlivesWriteTimeout: an event stream passed on
// unjudged (an MCP session's GET stream) keeps delivering after the
// server's write timeout, which bounds answers, not sessions.
func TestGatewayEventStreamOutlivesWriteTimeout(t *testing.T) {
	const writeTimeout = 300 * time.Millisecond
	more := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("data: one\n\n"))
		w.(http.Flusher).Flush()
		select {
		case <-more:
		case <-r.Context().Done():
			return
		}
		w.Write([]byte("data: two\n\n"))
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	gw := httptest.NewUnstartedServer(New(Options{Gate: &recordingGate{allow: true}, Upstream: u, MaxBodyBytes: 1 << 10}))
	gw.Config.WriteTimeout = writeTimeout
	gw.Start()
	t.Cleanup(gw.Close)

	client := &http.Client{Timeout: 10 * writeTimeout}
	resp, err := client.Get(gw.URL + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || line != "data: one\n" {
		t.Fatalf("first event %q, %v", line, err)
	}
	time.Sleep(3 * writeTimeout) // the scenario: the server speaks again after the write timeout
	close(more)
	r.ReadString('\n') // the blank line ending the first event
	if line, err := r.ReadString('\n'); err != nil || line != "data: two\n" {
		t.Fatalf("an event sent after the write timeout: %q, %v; want it delivered", line, err)
	}
}

// TestGatewaySlowAnswerIsRefusedInTime: a judged answer whose body does
// not end within the answer window (an SSE answer sends its headers at
// once) is judged unverified and refused while the client can still be
// answered, not cut off by the write deadline after being recorded.
func TestGatewaySlowAnswerIsRefusedInTime(t *testing.T) {
	const writeTimeout = 600 * time.Millisecond
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the answer never ends
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	j := judgeStub{errs: make(chan error, 1)}
	gw := httptest.NewUnstartedServer(New(Options{Gate: gatedGate{}, Judge: j, Upstream: u, MaxBodyBytes: 1 << 10,
		UpstreamTimeout: writeTimeout / 2}))
	gw.Config.WriteTimeout = writeTimeout
	gw.Start()
	t.Cleanup(gw.Close)
	client := &http.Client{Timeout: 10 * writeTimeout} // past the write deadline, nothing will come
	resp, err := client.Post(gw.URL+"/v1/tool", "application/json", strings.NewReader(`{"kind":"tool.echo"}`))
	if err != nil {
		t.Fatalf("answer that never ends: %v, want the 502 of an unverified outcome", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("answer that never ends: %d %s, want the 502 of an unverified outcome", resp.StatusCode, body)
	}
	if err := <-j.errs; !errors.Is(err, errAnswerTooSlow) {
		t.Fatalf("the outcome was judged with %v, want errAnswerTooSlow", err)
	}
}

// releasingJudge releases every response as judged ok, counting outcomes.
type releasingJudge struct{ outcomes chan error }

func (j releasingJudge) Outcome(_ context.Context, x *binding.Exchange) binding.Verdict {
	j.outcomes <- x.Response.Err
	if x.Response.Err != nil {
		return binding.Verdict{Judged: true, AuditID: x.Decision.AuditID, Status: http.StatusBadGateway}
	}
	return binding.Verdict{Judged: true, Release: true, AuditID: x.Decision.AuditID}
}

// TestGatewayReleasedResponseNamesTheGatesAudit: a released response
// carries the gate's audit id, never the runtime's, and no advisory reason
// of the runtime's; replayed with its length, it announces no trailer.
func TestGatewayReleasedResponseNamesTheGatesAudit(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Autonomy-Audit-Id", "au_forged_by_tool")
		w.Header().Set("X-Autonomy-Advisory-Reason", "forged")
		w.Header().Set("Trailer", "X-Tool-Sig")
		w.Write([]byte(`{"ok":true}`))
		w.Header().Set("X-Tool-Sig", "sig")
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	j := releasingJudge{outcomes: make(chan error, 2)}
	gw := httptest.NewServer(New(Options{Gate: gatedGate{}, Judge: j, Upstream: u, MaxBodyBytes: 1 << 10}))
	t.Cleanup(gw.Close)
	resp, body := do(t, http.MethodPost, gw.URL+"/v1/tool", nil, `{"kind":"tool.echo"}`)
	if resp.StatusCode != http.StatusOK || body != `{"ok":true}` {
		t.Fatalf("released response: %d %s", resp.StatusCode, body)
	}
	if got := resp.Header.Values("X-Autonomy-Audit-Id"); len(got) != 1 || got[0] != "au_gated" {
		t.Errorf("X-Autonomy-Audit-Id %q, want the gate's au_gated alone", got)
	}
	if got := resp.Header.Get("X-Autonomy-Advisory-Reason"); got != "" {
		t.Errorf("the runtime's advisory reason %q reached the client", got)
	}
	if resp.Header.Get("Trailer") != "" || len(resp.Trailer) != 0 {
		t.Errorf("a body replayed with its length announces trailers: %v %v", resp.Header.Values("Trailer"), resp.Trailer)
	}
	if err := <-j.outcomes; err != nil {
		t.Fatalf("judged with %v", err)
	}
}

// TestGatewayUnaskedUpgradeIsOneOutcome: a 101 from the runtime (the
// gateway refuses every upgrade, so no request asked for one) is an
// unverified outcome, recorded once, and a 502 for the client.
func TestGatewayUnaskedUpgradeIsOneOutcome(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				c.Write([]byte("HTTP/1.1 101 Switching Protocols\r\n\r\n"))
			}()
		}
	}()
	j := releasingJudge{outcomes: make(chan error, 2)}
	gw := httptest.NewServer(New(Options{Gate: gatedGate{}, Judge: j, Upstream: &url.URL{Scheme: "http", Host: ln.Addr().String()},
		MaxBodyBytes: 1 << 10}))
	t.Cleanup(gw.Close)
	resp, body := do(t, http.MethodPost, gw.URL+"/v1/tool", nil, `{"kind":"tool.echo"}`)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, preflight.CodeUpstreamUnavailable) {
		t.Fatalf("unasked 101: %d %s, want 502 %s", resp.StatusCode, body, preflight.CodeUpstreamUnavailable)
	}
	if err := <-j.outcomes; !errors.Is(err, errUnaskedUpgrade) {
		t.Fatalf("the outcome was judged with %v, want errUnaskedUpgrade", err)
	}
	select {
	case err := <-j.outcomes:
		t.Fatalf("a second outcome was recorded for one call (%v)", err)
	default:
	}
}

// TestGatewayHoldsInterimAnswers: the runtime's informational answers
// (103 Early Hints and the like, with headers only the gate may set) do not
// reach the client, on a gated call judged before release or an ungated
// one: the client gets the final answer alone.
func TestGatewayHoldsInterimAnswers(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.Header().Set("X-Autonomy-Audit-Id", "au_forged_by_tool")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusProcessing)
		w.Header().Del("Link")
		w.Header().Del("X-Autonomy-Audit-Id")
		w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	j := releasingJudge{outcomes: make(chan error, 4)}
	gw := httptest.NewServer(New(Options{Gate: gatedGate{}, Judge: j, Upstream: u, MaxBodyBytes: 1 << 10}))
	t.Cleanup(gw.Close)
	for _, path := range []string{"/v1/tool", "/other"} {
		var interim []int
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
			interim = append(interim, code)
			return nil
		}}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace),
			http.MethodPost, gw.URL+path, strings.NewReader(`{"kind":"tool.echo"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != `{"ok":true}` || len(interim) != 0 {
			t.Errorf("%s: %d %s after interim answers %v; want 200 alone", path, resp.StatusCode, body, interim)
		}
		if got := resp.Header.Get("X-Autonomy-Audit-Id"); got == "au_forged_by_tool" {
			t.Errorf("%s: the runtime's audit id reached the client", path)
		}
	}
}

// TestGatewayResponseNamesTheDecision: a call the gate let through without
// judging its response (mode disabled, or a path the gate does not gate)
// still tells the client the audit id of its decision, and a runtime's own
// audit id or advisory reason is removed in either spelling.
func TestGatewayResponseNamesTheDecision(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X_Autonomy_Audit_Id"] = []string{"au_forged_underscore"}
		w.Header()["X_autonomy_advisory_reason"] = []string{"forged"}
		w.Header().Set("X-Autonomy-Audit-Id", "au_forged_by_tool")
		w.Write([]byte("upstream"))
	}))
	t.Cleanup(up.Close)
	u, _ := url.Parse(up.URL)
	gw := httptest.NewServer(New(Options{Gate: &recordingGate{allow: true}, Upstream: u, MaxBodyBytes: 1 << 10}))
	t.Cleanup(gw.Close)
	resp, body := do(t, http.MethodPost, gw.URL+"/v1/tool", nil, `{"kind":"tool.echo"}`)
	if resp.StatusCode != http.StatusOK || body != "upstream" {
		t.Fatalf("allowed call: %d %s", resp.StatusCode, body)
	}
	if got := resp.Header.Values("X-Autonomy-Audit-Id"); len(got) != 1 || got[0] != "au_test" {
		t.Errorf("X-Autonomy-Audit-Id %q, want the decision's au_test alone", got)
	}
	for k, v := range resp.Header {
		if strings.Contains(k, "_") {
			t.Errorf("the runtime's %s: %q reached the client", k, v)
		}
	}
}
