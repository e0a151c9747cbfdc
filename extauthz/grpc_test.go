package extauthz_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/extauthz"
	"github.com/contractrefine/autonomy/preflight"
)

// serveGRPC serves the Authorization service for gate on 127.0.0.1:0 and
// returns a client connected to it.
func serveGRPC(t testing.TB, gate extauthz.Checker) authv3.AuthorizationClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(extauthz.CodecOption())
	extauthz.NewServer(gate).Register(srv)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return authv3.NewAuthorizationClient(conn)
}

// envoyCheck is a CheckRequest as Envoy's ext_authz filter sends it for
// POST /v1/tool with with_request_body: the source peer with its mTLS
// principal, the HTTP attributes with lower-case headers (pseudo headers
// included), the request id, and the body as raw_body (pack_as_bytes).
func envoyCheck(kind string, args map[string]any, preflightID, requestID string) *authv3.CheckRequest {
	body, _ := json.Marshal(map[string]any{"kind": kind, "args": args})
	headers := map[string]string{
		":authority": "tools.internal", ":method": "POST", ":path": "/v1/tool", ":scheme": "http",
		"content-type": "application/json", "content-length": fmt.Sprint(len(body)),
		"user-agent": "agent/1.0", "x-forwarded-proto": "http", "x-request-id": requestID,
	}
	if preflightID != "" {
		headers["x-autonomy-preflight-id"] = preflightID
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Principal: principal,
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address: "10.0.0.7", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 51234}}}}},
		Destination: &authv3.AttributeContext_Peer{Principal: "spiffe://cluster.local/ns/tools/sa/runtime"},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: requestID, Method: "POST", Path: "/v1/tool", Host: "tools.internal", Scheme: "http",
			Protocol: "HTTP/1.1", Headers: headers, RawBody: body, Size: int64(len(body))}},
	}}
}

func check(t testing.TB, c authv3.AuthorizationClient, req *authv3.CheckRequest) *authv3.CheckResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Check(ctx, req)
	if err != nil {
		t.Fatalf("Check: %v (a deny must be a response, not an error)", err)
	}
	return resp
}

func headerValues(hs []*corev3.HeaderValueOption) map[string]string {
	m := map[string]string{}
	for _, h := range hs {
		m[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
	}
	return m
}

func metadata(resp *authv3.CheckResponse) map[string]any {
	return resp.GetDynamicMetadata().AsMap()["autonomy"].(map[string]any)
}

// wantAllowed checks an OK response: the upstream headers and the dynamic
// metadata.
func wantAllowed(t testing.TB, resp *authv3.CheckResponse, auditID, mode, reason, advisory string) {
	t.Helper()
	if codes.Code(resp.GetStatus().GetCode()) != codes.OK || resp.GetOkResponse() == nil || resp.GetDeniedResponse() != nil {
		t.Fatalf("want OK, got %v", resp)
	}
	h := headerValues(resp.GetOkResponse().GetHeaders())
	want := map[string]string{"x-autonomy-audit-id": auditID}
	if advisory != "" {
		want["x-autonomy-advisory-reason"] = advisory
	}
	if fmt.Sprint(h) != fmt.Sprint(want) {
		t.Fatalf("upstream headers %v, want %v", h, want)
	}
	// A client-sent advisory reason never reaches the runtime: the service's
	// own overwrites it, or the allow removes it.
	wantRemoved := []string{"x-autonomy-advisory-reason"}
	if advisory != "" {
		wantRemoved = nil
	}
	if got := resp.GetOkResponse().GetHeadersToRemove(); !slices.Equal(got, wantRemoved) {
		t.Fatalf("headers_to_remove %q, want %q", got, wantRemoved)
	}
	for _, o := range resp.GetOkResponse().GetHeaders() {
		if o.GetAppendAction() != corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD {
			t.Fatalf("header %s would be appended to a client-sent value", o.GetHeader().GetKey())
		}
	}
	md := metadata(resp)
	if md["audit_id"] != auditID || md["mode"] != mode || md["reason"] != reason || len(md) != 3 {
		t.Fatalf("dynamic metadata %v", md)
	}
}

// wantDenied checks a deny: gRPC code, HTTP status, JSON body and headers.
func wantDenied(t testing.TB, resp *authv3.CheckResponse, code codes.Code, status typev3.StatusCode, reason string) denyBody {
	t.Helper()
	dr := resp.GetDeniedResponse()
	if codes.Code(resp.GetStatus().GetCode()) != code || dr == nil || resp.GetOkResponse() != nil {
		t.Fatalf("want %v deny, got %v", code, resp)
	}
	if dr.GetStatus().GetCode() != status {
		t.Fatalf("denied HTTP status %v, want %v", dr.GetStatus().GetCode(), status)
	}
	body := decodeDeny(t, []byte(dr.GetBody()))
	if _, sub, _ := strings.Cut(reason, ": "); body.Error.Reason != reason || body.Error.Code != sub || body.Error.AuditID == "" {
		t.Fatalf("deny body %s, want reason %q", dr.GetBody(), reason)
	}
	h := headerValues(dr.GetHeaders())
	if h["content-type"] != "application/json" || h["x-autonomy-audit-id"] != body.Error.AuditID {
		t.Fatalf("deny headers %v", h)
	}
	if md := metadata(resp); md["audit_id"] != body.Error.AuditID || md["reason"] != reason {
		t.Fatalf("dynamic metadata %v", md)
	}
	return body
}

// TestGRPCCheckAsEnvoySendsIt: the shapes a CheckRequest takes, depending on
// how Envoy is configured, all reach the same decision.
func TestGRPCCheckAsEnvoySendsIt(t *testing.T) {
	shapes := map[string]func(r *authv3.CheckRequest){
		"headers map, raw_body": func(*authv3.CheckRequest) {},
		"body as a string (no pack_as_bytes)": func(r *authv3.CheckRequest) {
			h := r.Attributes.Request.Http
			h.Body, h.RawBody = string(h.RawBody), nil
		},
		"header_map with raw values (encode_raw_headers)": func(r *authv3.CheckRequest) {
			h := r.Attributes.Request.Http
			for k, v := range h.Headers {
				h.HeaderMap = &corev3.HeaderMap{Headers: append(h.GetHeaderMap().GetHeaders(),
					&corev3.HeaderValue{Key: k, RawValue: []byte(v)})}
			}
			h.Headers = nil
		},
		"method and path only as pseudo headers": func(r *authv3.CheckRequest) {
			h := r.Attributes.Request.Http
			h.Method, h.Path = "", ""
		},
		"request id only as the http id": func(r *authv3.CheckRequest) {
			delete(r.Attributes.Request.Http.Headers, "x-request-id")
		},
		"mixed-case header names": func(r *authv3.CheckRequest) {
			h := r.Attributes.Request.Http
			h.Headers["X-Autonomy-Preflight-Id"] = h.Headers["x-autonomy-preflight-id"]
			delete(h.Headers, "x-autonomy-preflight-id")
		},
	}
	for name, shape := range shapes {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, binding.ModeEnforce)
			c := serveGRPC(t, e.gate)
			pf := e.record("tool.echo", map[string]any{"msg": "hi"})
			req := envoyCheck("tool.echo", map[string]any{"msg": "hi"}, pf.PreflightID, "req-1")
			shape(req)
			wantAllowed(t, check(t, c, req), pf.AuditID, "enforce", preflight.ReasonPassed, "")

			// The same request again (an Envoy retry) is the same allow.
			wantAllowed(t, check(t, c, req), pf.AuditID, "enforce", preflight.ReasonPassed, "")
			// Another request under the id is a replay.
			again := envoyCheck("tool.echo", map[string]any{"msg": "hi"}, pf.PreflightID, "req-2")
			shape(again)
			body := wantDenied(t, check(t, c, again), codes.PermissionDenied, typev3.StatusCode_Forbidden, preflight.ReasonReplay)
			if body.Error.AuditID != pf.AuditID || body.Error.Code != "preflight_replay" {
				t.Fatalf("deny body %+v", body)
			}
			frames := e.decisionFrames(pf.AuditID)
			if len(frames) != 3 || frames[0].RequestID != "req-1" || frames[0].StepID != "s1" || frames[2].RequestID != "req-2" {
				t.Fatalf("decision frames %+v", frames)
			}
		})
	}
}

// TestGRPCDenies: ladder and policy denies arrive as PERMISSION_DENIED with
// a 403 and the JSON body; advisory lets a failed ladder through with the
// advisory header.
func TestGRPCDenies(t *testing.T) {
	e := newEnv(t, binding.ModeEnforce)
	c := serveGRPC(t, e.gate)
	pf := e.record("tool.echo", map[string]any{"msg": "hi"})

	other := envoyCheck("tool.echo", map[string]any{"msg": "hi"}, pf.PreflightID, "req-1")
	other.Attributes.Source.Principal = "spiffe://cluster.local/ns/agents/sa/mallory"
	wantDenied(t, check(t, c, other), codes.PermissionDenied, typev3.StatusCode_Forbidden, preflight.ReasonBindingMismatch)

	noHeader := envoyCheck("tool.shell", map[string]any{"cmd": "ls"}, "", "req-2")
	wantDenied(t, check(t, c, noHeader), codes.PermissionDenied, typev3.StatusCode_Forbidden, preflight.ReasonPreflightRequired)

	unknownKind := envoyCheck("tool.unlisted", nil, "", "req-3")
	wantDenied(t, check(t, c, unknownKind), codes.PermissionDenied, typev3.StatusCode_Forbidden, "policy: denied")

	adv := newEnv(t, binding.ModeAdvisory)
	ac := serveGRPC(t, adv.gate)
	resp := check(t, ac, envoyCheck("tool.shell", map[string]any{"cmd": "ls"}, "", "req-4"))
	wantAllowed(t, resp, metadata(resp)["audit_id"].(string), "advisory", preflight.ReasonPreflightRequired, preflight.ReasonPreflightRequired)
}

// TestGRPCGatesEverySpelling: a Check whose path is a spelling of the gate
// path that a runtime routes to it (Go's net/http routes the absolute-form
// target "http:/v1/tool" to /v1/tool) runs the ladder: without a preflight
// the call is refused, never judged ungated and allowed.
func TestGRPCGatesEverySpelling(t *testing.T) {
	e := newEnv(t, binding.ModeEnforce)
	c := serveGRPC(t, e.gate)
	for _, p := range []string{"http:/v1/tool", "HTTPS:/v1/tool", "http:v1/tool", "http://runtime/v1/tool", "//runtime/v1/tool"} {
		t.Run(p, func(t *testing.T) {
			req := envoyCheck("tool.shell", map[string]any{"cmd": "ls"}, "", "req-"+p)
			req.Attributes.Request.Http.Path = p
			req.Attributes.Request.Http.Headers[":path"] = p
			wantDenied(t, check(t, c, req), codes.PermissionDenied, typev3.StatusCode_Forbidden, preflight.ReasonPreflightRequired)
		})
	}
}

// TestGRPCDeniesWhatItCannotDescribe: a CheckRequest with no HTTP request
// in it (the shape Envoy's network-level ext_authz filter sends), and one
// whose method or path fields name another request than its :method and
// :path headers, are refused as malformed in every mode, never taken for
// an ungated call.
func TestGRPCDeniesWhatItCannotDescribe(t *testing.T) {
	conflict := func(field, header, value string) *authv3.CheckRequest {
		req := envoyCheck("tool.shell", map[string]any{"cmd": "ls"}, "", "req-1")
		h := req.Attributes.Request.Http
		h.Headers[header] = value
		if field == "method" {
			h.Method = "GET"
		} else {
			h.Path = "/v1/echo"
		}
		return req
	}
	cases := map[string]*authv3.CheckRequest{
		"empty":              {},
		"no request":         {Attributes: &authv3.AttributeContext{}},
		"no http":            {Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{}}},
		"method and :method": conflict("method", ":method", "POST"),
		"path and :path":     conflict("path", ":path", "/v1/tool"),
		"only :method and :path": {Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Headers: map[string]string{":method": "GET", ":path": "/v1/echo", "x-request-id": "req-1"}}}}},
		// Envoy puts '!' for bytes that are not UTF-8 in the path field,
		// and header_map's raw_value keeps them: one request, not two.
		"raw :path not UTF-8": {Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: "GET", Path: "/v1/echo?q=!",
			HeaderMap: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				{Key: ":method", RawValue: []byte("GET")}, {Key: ":path", RawValue: []byte("/v1/echo?q=\xff")},
				{Key: "x-request-id", RawValue: []byte("req-1")}}}}}}},
	}
	for _, mode := range []binding.Mode{binding.ModeDisabled, binding.ModeAdvisory, binding.ModeEnforce} {
		e := newEnv(t, mode)
		c := serveGRPC(t, e.gate)
		for name, req := range cases {
			t.Run(string(mode)+"/"+name, func(t *testing.T) {
				resp := check(t, c, req)
				if name == "only :method and :path" || name == "raw :path not UTF-8" {
					// Described once: an ungated GET.
					if resp.GetOkResponse() == nil {
						t.Fatalf("want OK, got %v", resp)
					}
					return
				}
				wantDenied(t, resp, codes.PermissionDenied, typev3.StatusCode_Forbidden, "gate: malformed_tool_call")
			})
		}
	}
}

// TestGRPCUnavailable: when the gate cannot decide, Envoy is told
// PERMISSION_DENIED with a 503 and contract: verifier_unavailable, never OK.
func TestGRPCUnavailable(t *testing.T) {
	for _, mode := range []binding.Mode{binding.ModeDisabled, binding.ModeAdvisory, binding.ModeEnforce} {
		t.Run("wal closed/"+string(mode), func(t *testing.T) {
			e := newEnv(t, mode)
			c := serveGRPC(t, e.gate)
			pf := e.record("tool.echo", map[string]any{"msg": "hi"})
			e.db.Close()
			wantDenied(t, check(t, c, envoyCheck("tool.echo", map[string]any{"msg": "hi"}, pf.PreflightID, "req-1")),
				codes.PermissionDenied, typev3.StatusCode_ServiceUnavailable, preflight.ReasonVerifierUnavailable)
			wantDenied(t, check(t, c, envoyCheck("tool.echo", nil, "", "req-2")),
				codes.PermissionDenied, typev3.StatusCode_ServiceUnavailable, preflight.ReasonVerifierUnavailable)
		})
		t.Run("policy error/"+string(mode), func(t *testing.T) {
			e := newEnv(t, mode)
			c := serveGRPC(t, e.gate)
			wantDenied(t, check(t, c, envoyCheck("tool.nonbool", nil, "", "req-1")),
				codes.PermissionDenied, typev3.StatusCode_ServiceUnavailable, preflight.ReasonVerifierUnavailable)
		})
	}
}

// TestGRPCConcurrentChecksOneAllow: 64 requests race on a one-step
// preflight over real gRPC; exactly one is allowed.
func TestGRPCConcurrentChecksOneAllow(t *testing.T) {
	for _, mode := range []binding.Mode{binding.ModeEnforce, binding.ModeAdvisory} {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnv(t, mode)
			c := serveGRPC(t, e.gate)
			pf := e.record("tool.echo", map[string]any{"msg": "hi"})
			const n = 64
			resps := make([]*authv3.CheckResponse, n)
			errs := make([]error, n)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					resps[i], errs[i] = c.Check(ctx, envoyCheck("tool.echo", map[string]any{"msg": "hi"},
						pf.PreflightID, fmt.Sprintf("req-%02d", i)))
				}()
			}
			close(start)
			wg.Wait()
			allowed, replays := 0, 0
			winner := ""
			for i, resp := range resps {
				if errs[i] != nil {
					t.Fatalf("Check %d: %v", i, errs[i])
				}
				switch mode {
				case binding.ModeEnforce:
					if codes.Code(resp.GetStatus().GetCode()) == codes.OK {
						allowed++
						winner = fmt.Sprintf("req-%02d", i)
						continue
					}
					wantDenied(t, resp, codes.PermissionDenied, typev3.StatusCode_Forbidden, preflight.ReasonReplay)
					replays++
				case binding.ModeAdvisory:
					// Everyone gets through; only the consumer without an advisory reason.
					adv := headerValues(resp.GetOkResponse().GetHeaders())["x-autonomy-advisory-reason"]
					switch adv {
					case "":
						allowed++
						winner = fmt.Sprintf("req-%02d", i)
						wantAllowed(t, resp, pf.AuditID, "advisory", preflight.ReasonPassed, "")
					case preflight.ReasonReplay:
						replays++
						wantAllowed(t, resp, pf.AuditID, "advisory", preflight.ReasonReplay, preflight.ReasonReplay)
					default:
						t.Fatalf("advisory reason %q", adv)
					}
				}
			}
			if allowed != 1 || replays != n-1 {
				t.Fatalf("%d allowed, %d replays, want 1 and %d", allowed, replays, n-1)
			}
			frames := e.decisionFrames(pf.AuditID)
			allows := 0
			for _, f := range frames {
				if f.Outcome == "allow" {
					allows++
					if f.RequestID != winner || f.StepID != "s1" {
						t.Fatalf("allow frame %+v, the allowed request was %s", f, winner)
					}
				}
			}
			if len(frames) != n || allows != 1 {
				t.Fatalf("%d decision frames, %d allows, want %d and 1", len(frames), allows, n)
			}
		})
	}
}

// TestRequestFromCheckFoldsHeaderNames: header names that differ only in
// case (Envoy sends none) are joined in one value whatever the map's order,
// so a repeated x-request-id can neither pick a consumed request's id by
// chance nor change from one call to the next.
func TestRequestFromCheckFoldsHeaderNames(t *testing.T) {
	for range 50 {
		req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
			Http: &authv3.AttributeContext_HttpRequest{Method: "POST", Path: "/v1/tool", Headers: map[string]string{
				"X-Request-Id": "req-b", "x-request-id": "req-a", "X-REQUEST-ID": "req-c", "content-type": "application/json",
			}}}}}
		r := extauthz.RequestFromCheck(req)
		if got := r.Headers["x-request-id"]; got != "req-a,req-b,req-c" {
			t.Fatalf("x-request-id = %q, want the three values joined in order", got)
		}
		if r.Headers["content-type"] != "application/json" || len(r.Headers) != 2 {
			t.Fatalf("headers = %v", r.Headers)
		}
	}
}
