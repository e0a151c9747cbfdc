package extauthz_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/extauthz"
	"github.com/contractrefine/autonomy/preflight"
)

const maxBody = 1024

// serveHTTP serves the HTTP check for gate on a loopback port, mounted the
// way the service mounts it.
func serveHTTP(t testing.TB, gate extauthz.Checker) string {
	t.Helper()
	mux := http.NewServeMux()
	h := extauthz.NewHTTPHandler(gate, maxBody)
	mux.Handle(extauthz.HTTPPrefix, h)
	mux.Handle(extauthz.HTTPPrefix+"/", h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

type httpAnswer struct {
	status int
	header http.Header
	body   []byte
}

func do(t testing.TB, method, url string, headers map[string]string, body []byte) httpAnswer {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return httpAnswer{resp.StatusCode, resp.Header, b}
}

func echoBody() []byte { return []byte(`{"kind":"tool.echo","args":{"msg":"hi"}}`) }

// TestHTTPCheckForms: the same decision through each proxy's way of asking:
// Envoy's http_service (the original request under the /v1/authz prefix),
// nginx auth_request (X-Original-*), Caddy forward_auth and Traefik
// forwardAuth (X-Forwarded-*, with or without the body).
func TestHTTPCheckForms(t *testing.T) {
	forms := map[string]func(base, pfID, requestID string) (method, url string, h map[string]string, body []byte){
		"envoy http_service": func(base, pfID, rid string) (string, string, map[string]string, []byte) {
			return http.MethodPost, base + "/v1/authz/v1/tool",
				map[string]string{"X-Autonomy-Preflight-Id": pfID, "X-Request-Id": rid, "Content-Type": "application/json"}, echoBody()
		},
		"nginx auth_request, kind header, no body": func(base, pfID, rid string) (string, string, map[string]string, []byte) {
			return http.MethodGet, base + "/v1/authz",
				map[string]string{"X-Original-Method": "POST", "X-Original-URI": "/v1/tool?trace=1",
					"X-Tool-Kind": "tool.echo", "X-Autonomy-Preflight-Id": pfID, "X-Request-Id": rid}, nil
		},
		"caddy forward_auth, kind header, no body": func(base, pfID, rid string) (string, string, map[string]string, []byte) {
			return http.MethodGet, base + "/v1/authz",
				map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/v1/tool",
					"X-Forwarded-Host": "tools.internal", "X-Tool-Kind": "tool.echo",
					"X-Autonomy-Preflight-Id": pfID, "X-Request-Id": rid}, nil
		},
		"traefik forwardAuth with forwardBody": func(base, pfID, rid string) (string, string, map[string]string, []byte) {
			return http.MethodPost, base + "/v1/authz",
				map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/v1/tool",
					"Content-Type": "application/json", "X-Autonomy-Preflight-Id": pfID, "X-Request-Id": rid}, echoBody()
		},
	}
	for name, form := range forms {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, binding.ModeEnforce, func(o *binding.Options) { o.KindHeader = "x-tool-kind" })
			base := serveHTTP(t, e.gate)
			// tool.echo does not bind arguments: the bodiless forms match too.
			pf := e.record("tool.echo", map[string]any{"msg": "hi"})
			ask := func(requestID string) httpAnswer {
				method, url, h, body := form(base, pf.PreflightID, requestID)
				return do(t, method, url, h, body)
			}

			a := ask("req-1")
			if a.status != http.StatusOK || a.header.Get("X-Autonomy-Audit-Id") != pf.AuditID || len(a.body) != 0 {
				t.Fatalf("allow: %d %v %s", a.status, a.header, a.body)
			}
			a = ask("req-2")
			if a.status != http.StatusForbidden || a.header.Get("Content-Type") != "application/json" ||
				a.header.Get("X-Autonomy-Audit-Id") != pf.AuditID {
				t.Fatalf("replay: %d %v %s", a.status, a.header, a.body)
			}
			if b := decodeDeny(t, a.body); b.Error.Reason != preflight.ReasonReplay || b.Error.Code != "preflight_replay" || b.Error.AuditID != pf.AuditID {
				t.Fatalf("replay body %s", a.body)
			}
			if f := e.decisionFrames(pf.AuditID); len(f) != 2 || f[0].Outcome != "allow" || f[1].Reason != preflight.ReasonReplay {
				t.Fatalf("decision frames %+v", f)
			}
		})
	}
}

// TestHTTPCheckLimitsAndPaths: an oversized body is denied in every mode,
// requests that are not gated tool calls go to the policy alone, and the
// forwarded-method headers are what decides whether a call is gated.
func TestHTTPCheckLimitsAndPaths(t *testing.T) {
	big := []byte(`{"kind":"tool.echo","args":{"pad":"` + strings.Repeat("x", maxBody) + `"}}`)
	cases := map[string]struct {
		method string
		path   string
		h      map[string]string
		body   []byte
		status int
		reason string
	}{
		"oversized body": {http.MethodPost, "/v1/authz/v1/tool", nil, big, 403, "gate: malformed_tool_call"},
		"oversized body, forwarded": {http.MethodPost, "/v1/authz",
			map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/v1/tool"}, big, 403, "gate: malformed_tool_call"},
		// Envoy's http_service marks a body cut at max_request_bytes.
		"body marked partial": {http.MethodPost, "/v1/authz/v1/tool",
			map[string]string{"X-Envoy-Auth-Partial-Body": "true"}, []byte(`{"kind":"tool.echo","args":{}}`), 403, "gate: partial_body"},
		"gated, no body, no kind header": {http.MethodPost, "/v1/authz/v1/tool", nil, nil, 403, "gate: malformed_tool_call"},
		"not the gated path":             {http.MethodPost, "/v1/authz/v1/other", nil, echoBody(), 200, ""},
		"GET of the gated path":          {http.MethodGet, "/v1/authz/v1/tool", nil, nil, 200, ""},
		"forwarded GET of the gated path": {http.MethodPost, "/v1/authz",
			map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/v1/tool"}, echoBody(), 200, ""},
		// nginx's auth subrequest is a GET whatever the original method: a
		// proxy that forwards the URI but not the method must not turn a
		// tool call into an unchecked GET.
		"forwarded URI without its method": {http.MethodGet, "/v1/authz",
			map[string]string{"X-Original-URI": "/v1/tool"}, nil, 403, "gate: malformed_tool_call"},
		"forwarded URI without its method, with a kind": {http.MethodGet, "/v1/authz",
			map[string]string{"X-Forwarded-Uri": "/v1/tool", "X-Tool-Kind": "tool.shell"}, nil, 403, preflight.ReasonPreflightRequired},
		// A proxy that forwards the method but not the URI names no
		// request: refused, not judged as the root path.
		"forwarded method without its URI": {http.MethodPost, "/v1/authz",
			map[string]string{"X-Forwarded-Method": "POST", "Content-Type": "application/json"},
			[]byte(`{"kind":"tool.shell","args":{}}`), 403, "gate: malformed_tool_call"},
		"original method without its URI": {http.MethodGet, "/v1/authz",
			map[string]string{"X-Original-Method": "POST", "X-Tool-Kind": "tool.shell"}, nil, 403, "gate: malformed_tool_call"},
		"gated path with a query": {http.MethodPost, "/v1/authz/v1/tool?x=1",
			map[string]string{"Content-Type": "application/json"}, []byte(`{"kind":"tool.shell","args":{}}`), 403, preflight.ReasonPreflightRequired},
		// Behind nginx (which sets X-Original-*) a client may send its own
		// X-Forwarded-* to make a tool call look like a GET: two pairs that
		// disagree are refused, whichever says what.
		"client's X-Forwarded-* beside nginx's X-Original-*": {http.MethodGet, "/v1/authz",
			map[string]string{"X-Original-Method": "POST", "X-Original-URI": "/v1/tool", "X-Tool-Kind": "tool.shell",
				"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/"}, nil, 403, "gate: malformed_tool_call"},
		"client's X-Original-* beside Caddy's X-Forwarded-*": {http.MethodGet, "/v1/authz",
			map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/v1/tool", "X-Tool-Kind": "tool.shell",
				"X-Original-Method": "GET", "X-Original-URI": "/"}, nil, 403, "gate: malformed_tool_call"},
		// A proxy that appends to the client's header sends a list: one
		// line, several values. Two lines are refused; so is a list.
		"forwarded method list": {http.MethodPost, "/v1/authz",
			map[string]string{"X-Forwarded-Method": "POST, GET", "X-Forwarded-Uri": "/v1/tool"}, echoBody(), 403, "gate: malformed_tool_call"},
		"forwarded method list, GET first": {http.MethodPost, "/v1/authz",
			map[string]string{"X-Forwarded-Method": "GET,POST", "X-Forwarded-Uri": "/v1/tool"}, echoBody(), 403, "gate: malformed_tool_call"},
		"forwarded method not a token": {http.MethodPost, "/v1/authz",
			map[string]string{"X-Forwarded-Method": "post;", "X-Forwarded-Uri": "/v1/tool"}, echoBody(), 403, "gate: malformed_tool_call"},
		"original method list": {http.MethodGet, "/v1/authz",
			map[string]string{"X-Original-Method": "GET, POST", "X-Original-URI": "/v1/tool", "X-Tool-Kind": "tool.shell"}, nil, 403, "gate: malformed_tool_call"},
		"forwarded URI list": {http.MethodPost, "/v1/authz",
			map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/x, /v1/tool"}, echoBody(), 403, "gate: malformed_tool_call"},
		"forwarded URI list without a space": {http.MethodPost, "/v1/authz",
			map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/x,/v1/tool"}, echoBody(), 403, "gate: malformed_tool_call"},
		"forwarded URI not a path": {http.MethodPost, "/v1/authz",
			map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "v1/tool"}, echoBody(), 403, "gate: malformed_tool_call"},
		"forwarded GET of another path with a comma": {http.MethodPost, "/v1/authz",
			map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/docs/a,b?q=1,2"}, nil, 200, ""},
		"both pairs agreeing": {http.MethodGet, "/v1/authz",
			map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/v1/tool", "X-Tool-Kind": "tool.shell",
				"X-Original-Method": "POST", "X-Original-URI": "/v1/tool"}, nil, 403, preflight.ReasonPreflightRequired},
		// Behind Envoy's http_service the check's own line is the original
		// request: forwarded headers that make a tool call look like
		// something else may be the client's, and are refused.
		"client's X-Forwarded-Method beside Envoy's line": {http.MethodPost, "/v1/authz/v1/tool",
			map[string]string{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/v1/tool"}, echoBody(), 403, "gate: malformed_tool_call"},
		"client's X-Original-URI beside Envoy's line": {http.MethodPost, "/v1/authz/v1/tool",
			map[string]string{"X-Original-URI": "/v1/other"}, echoBody(), 403, "gate: malformed_tool_call"},
		"headers agreeing with Envoy's line": {http.MethodPost, "/v1/authz/v1/tool",
			map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/v1/tool"},
			[]byte(`{"kind":"tool.shell","args":{}}`), 403, preflight.ReasonPreflightRequired},
		// nginx's subrequest is a GET, whatever its line: the headers decide.
		"nginx's GET line with the original URI": {http.MethodGet, "/v1/authz/v1/tool",
			map[string]string{"X-Original-Method": "GET", "X-Original-URI": "/v1/other"}, nil, 200, ""},
		"nginx's GET line naming the gated call": {http.MethodGet, "/v1/authz/v1/tool",
			map[string]string{"X-Original-Method": "POST", "X-Original-URI": "/v1/tool", "X-Tool-Kind": "tool.shell"}, nil, 403, preflight.ReasonPreflightRequired},
		// Paths a runtime's router takes for the gated one are gated.
		"gated path percent-encoded": {http.MethodPost, "/v1/authz/v1/to%6Fl",
			nil, []byte(`{"kind":"tool.shell","args":{}}`), 403, preflight.ReasonPreflightRequired},
		"gated path with a trailing slash": {http.MethodPost, "/v1/authz/v1/tool/",
			nil, []byte(`{"kind":"tool.shell","args":{}}`), 403, preflight.ReasonPreflightRequired},
		"gated path with an empty segment": {http.MethodPost, "/v1/authz",
			map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/v1//tool"},
			[]byte(`{"kind":"tool.shell","args":{}}`), 403, preflight.ReasonPreflightRequired},
		"gated path in capitals": {http.MethodPost, "/v1/authz/V1/TOOL",
			nil, []byte(`{"kind":"tool.shell","args":{}}`), 403, preflight.ReasonPreflightRequired},
		"gated path with ;parameters": {http.MethodPost, "/v1/authz",
			map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/v1;x/tool;a=b"},
			[]byte(`{"kind":"tool.shell","args":{}}`), 403, preflight.ReasonPreflightRequired},
		"gated path cut by a NUL": {http.MethodPost, "/v1/authz",
			map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/v1/tool%00.txt"},
			[]byte(`{"kind":"tool.shell","args":{}}`), 403, preflight.ReasonPreflightRequired},
		"gated path in an absolute target": {http.MethodPost, "/v1/authz",
			map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "http://runtime/v1/tool"},
			[]byte(`{"kind":"tool.shell","args":{}}`), 403, preflight.ReasonPreflightRequired},
		"gated path after an authority": {http.MethodPost, "/v1/authz",
			map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "//evil/v1/tool"},
			[]byte(`{"kind":"tool.shell","args":{}}`), 403, preflight.ReasonPreflightRequired},
		"gated path with a fragment a proxy re-escaped": {http.MethodGet, "/v1/authz",
			map[string]string{"X-Original-Method": "POST", "X-Original-URI": "/v1/tool#x", "X-Tool-Kind": "tool.shell"},
			nil, 403, preflight.ReasonPreflightRequired},
		"a path that only starts like the gated one": {http.MethodPost, "/v1/authz",
			map[string]string{"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/v1/toolbox;a=b"},
			echoBody(), 200, ""},
	}
	for name, tc := range cases {
		for _, mode := range []binding.Mode{binding.ModeDisabled, binding.ModeAdvisory, binding.ModeEnforce} {
			t.Run(name+"/"+string(mode), func(t *testing.T) {
				e := newEnv(t, mode, func(o *binding.Options) { o.KindHeader = "x-tool-kind" })
				base := serveHTTP(t, e.gate)
				a := do(t, tc.method, base+tc.path, tc.h, tc.body)
				status, reason := tc.status, tc.reason
				if reason == preflight.ReasonPreflightRequired && mode != binding.ModeEnforce {
					status, reason = 200, "" // the mode governs the ladder, not the body limit
				}
				if a.status != status {
					t.Fatalf("status %d, want %d: %s", a.status, status, a.body)
				}
				if status == 200 {
					if a.header.Get("X-Autonomy-Audit-Id") == "" {
						t.Fatalf("allow without an audit id: %v", a.header)
					}
					return
				}
				if b := decodeDeny(t, a.body); b.Error.Reason != reason {
					t.Fatalf("deny body %s, want %q", a.body, reason)
				}
			})
		}
	}
}

// TestHTTPCheckRepeatedOriginHeader: a forwarded method or URI header given
// twice may be one the client sent beside the proxy's; joined, the values
// name no gated request and the call would pass as ungated. It is refused.
func TestHTTPCheckRepeatedOriginHeader(t *testing.T) {
	e := newEnv(t, binding.ModeEnforce, func(o *binding.Options) { o.KindHeader = "x-tool-kind" })
	base := serveHTTP(t, e.gate)
	for name, h := range map[string][][2]string{
		"X-Original-URI twice":     {{"X-Original-URI", "/healthz"}, {"X-Original-URI", "/v1/tool"}, {"X-Original-Method", "POST"}},
		"X-Original-Method twice":  {{"X-Original-URI", "/v1/tool"}, {"X-Original-Method", "GET"}, {"X-Original-Method", "POST"}},
		"X-Forwarded-Uri twice":    {{"X-Forwarded-Uri", "/v1/tool"}, {"X-Forwarded-Uri", "/healthz"}, {"X-Forwarded-Method", "POST"}},
		"X-Forwarded-Method twice": {{"X-Forwarded-Uri", "/v1/tool"}, {"X-Forwarded-Method", "POST"}, {"X-Forwarded-Method", "GET"}},
	} {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, base+"/v1/authz/", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("X-Tool-Kind", "tool.shell")
			for _, kv := range h {
				req.Header.Add(kv[0], kv[1])
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden || decodeDeny(t, body).Error.Reason != "gate: malformed_tool_call" {
				t.Fatalf("%d %s, want 403 gate: malformed_tool_call", resp.StatusCode, body)
			}
		})
	}
}
