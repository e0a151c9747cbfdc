package e2e

// Hostile HTTP and gRPC input against the real binary (issue 6): a
// slow-loris client is cut off by http.read_header_timeout while others are
// served, idle keep-alive connections are closed by http.idle_timeout,
// oversized headers and bodies are refused, JSON nested past any sane depth
// is a 400 (or a deny at the gate) without exhausting the stack, and
// non-UTF-8 or huge header values at the gate are denied cleanly. After all
// of it the process is still up and logged no panic.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
)

// hostileConfig keeps the limits small so the tests can pass them quickly.
const hostileConfig = `contract_refine:
  mode: enforce
http:
  max_header_bytes: 8192
  max_body_bytes: 65536
  read_header_timeout: 1s
  idle_timeout: 2s
`

func startHostile(t *testing.T) *Server {
	t.Helper()
	cfg := t.TempDir() + "/autonomy.yaml"
	if err := os.WriteFile(cfg, []byte(hostileConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	s := StartServer(t, ServeOptions{Config: cfg})
	t.Cleanup(func() {
		if strings.Contains(s.Logs(), "panic") {
			t.Errorf("the process logged a panic:\n%s", s.Logs())
		}
	})
	return s
}

// TestHostileSlowLoris opens connections that send their request headers a
// byte at a time. Each is cut off by read_header_timeout before it could
// finish, and the server answers ordinary requests all the while.
func TestHostileSlowLoris(t *testing.T) {
	s := startHostile(t)
	const conns = 16
	header := "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 600) + "\r\n\r\n"
	var wg sync.WaitGroup
	results := make(chan string, conns)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- slowLoris(s.HTTPAddr, header, i)
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	served := 0
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		default:
			resp, err := http.Get(s.URL("/healthz"))
			if err != nil {
				t.Fatalf("an ordinary request failed while slow clients were connected: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("/healthz answered %d while slow clients were connected", resp.StatusCode)
			}
			served++
			time.Sleep(50 * time.Millisecond)
		}
	}
	close(results)
	for r := range results {
		if r != "" {
			t.Error(r)
		}
	}
	if served == 0 {
		t.Fatal("no ordinary request was made while the slow clients were connected")
	}
}

// slowLoris trickles header over a new connection, one byte every 100 ms,
// and reports a problem unless the server closes the connection before the
// header is complete (with or without a 408 first).
func slowLoris(addr, header string, n int) string {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return fmt.Sprintf("slow client %d: dial: %v", n, err)
	}
	defer conn.Close()
	closed := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(conn)
		closed <- string(b)
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(fltWait)
	for i := 0; i < len(header); i++ {
		select {
		case answer := <-closed:
			if strings.Contains(answer, " 200 ") {
				return fmt.Sprintf("slow client %d: served after %d bytes: %q", n, i, answer)
			}
			return ""
		case <-deadline:
			return fmt.Sprintf("slow client %d: still connected after %s and %d bytes", n, fltWait, i)
		case <-tick.C:
			if _, err := conn.Write([]byte{header[i]}); err != nil {
				return "" // the server closed it
			}
		}
	}
	return fmt.Sprintf("slow client %d: sent its whole header without being cut off", n)
}

// TestHostileIdleConnectionClosed: a keep-alive connection left idle is
// closed by idle_timeout.
func TestHostileIdleConnectionClosed(t *testing.T) {
	s := startHostile(t)
	conn, err := net.Dial("tcp", s.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("keep-alive request: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	conn.SetReadDeadline(time.Now().Add(fltWait))
	if _, err := r.ReadByte(); err != io.EOF {
		t.Fatalf("idle connection: read %v, want EOF (closed by the server)", err)
	}
}

// TestHostileLimits sends oversized and malformed requests to the preflight
// API and both checks. None is allowed, each gets its refusal status, and
// the process stays up.
func TestHostileLimits(t *testing.T) {
	s := startHostile(t)
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	toolBody := func(args string) string { return `{"kind":"tool.echo","args":{"a":` + args + `}}` }
	tests := map[string]struct {
		method, path string
		headers      map[string]string
		body         string
		status       int
		code         string
	}{
		"header over max_header_bytes": {method: "GET", path: "/healthz",
			headers: map[string]string{"X-Big": strings.Repeat("a", 64<<10)}, status: http.StatusRequestHeaderFieldsTooLarge},
		"huge preflight id at the HTTP check": {method: "POST", path: "/v1/authz/v1/tool",
			headers: map[string]string{"X-Autonomy-Preflight-Id": strings.Repeat("A", 64<<10)}, body: toolBody("1"),
			status: http.StatusRequestHeaderFieldsTooLarge},
		"preflight id just under the header limit": {method: "POST", path: "/v1/authz/v1/tool",
			headers: map[string]string{"X-Autonomy-Preflight-Id": strings.Repeat("A", 6000)}, body: toolBody("1"),
			status: http.StatusForbidden, code: "preflight_required"},
		"non-UTF-8 preflight id at the HTTP check": {method: "POST", path: "/v1/authz/v1/tool",
			headers: map[string]string{"X-Autonomy-Preflight-Id": "pf_\xff\xfe\xfd\xc3\x28AAAAAAAAAAAAAAAA"}, body: toolBody("1"),
			status: http.StatusForbidden, code: "preflight_required"},
		"non-UTF-8 kind at the HTTP check": {method: "POST", path: "/v1/authz/v1/tool",
			body: "{\"kind\":\"tool.\xff\xfe\",\"args\":{}}", status: http.StatusForbidden},
		"body over max_body_bytes at the HTTP check": {method: "POST", path: "/v1/authz/v1/tool",
			body: toolBody(`"` + strings.Repeat("a", 70000) + `"`), status: http.StatusForbidden, code: "malformed_tool_call"},
		"deeply nested args at the HTTP check": {method: "POST", path: "/v1/authz/v1/tool",
			body: toolBody(deep(30000)), status: http.StatusForbidden},
		"preflight body over max_body_bytes": {method: "POST", path: "/v1/preflight",
			body: `{"intent":{"summary":"` + strings.Repeat("a", 70000) + `"}}`, status: http.StatusRequestEntityTooLarge, code: "request-too-large"},
		"deeply nested preflight": {method: "POST", path: "/v1/preflight",
			body:   `{"intent":{"summary":"s"},"plan":{"steps":[{"id":"s1","kind":"tool.echo","zone":"z","args":{"a":` + deep(30000) + `}}]},"context":{"actor":{"id":"a"}}}`,
			status: http.StatusBadRequest, code: "malformed-request"},
		"deeply nested preflight, objects": {method: "POST", path: "/v1/preflight",
			body: strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000), status: http.StatusBadRequest, code: "malformed-request"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			status, body, err := rawRequest(s.HTTPAddr, tc.method, tc.path, tc.headers, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			if status != tc.status {
				t.Fatalf("status %d, want %d: %.300s", status, tc.status, body)
			}
			if tc.code != "" && !strings.Contains(body, tc.code) {
				t.Fatalf("body %.300s, want code %s", body, tc.code)
			}
		})
	}
	authz := s.Authz(t)
	grpcTests := map[string]*authv3.CheckRequest{
		"non-UTF-8 preflight id in header_map": hostileCheck(map[string][]byte{"x-autonomy-preflight-id": []byte("pf_\xff\xfe\xc3\x28AAAAAAAAAAAAAAAAAA")}, toolBody("1")),
		"1 MiB preflight id":                   hostileCheck(map[string][]byte{"x-autonomy-preflight-id": bytes.Repeat([]byte("A"), 1<<20)}, toolBody("1")),
		"1 MiB of nesting in the body":         hostileCheck(nil, toolBody(deep(512<<10))),
		"non-UTF-8 tool kind in the body":      hostileCheck(map[string][]byte{"x-autonomy-preflight-id": []byte("pf_AAAAAAAAAAAAAAAAAAAAAA")}, "{\"kind\":\"tool.\xff\",\"args\":{}}"),
	}
	for name, req := range grpcTests {
		t.Run("gRPC "+name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), fltWait)
			defer cancel()
			resp, err := authz.Check(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if codes.Code(resp.GetStatus().GetCode()) == codes.OK {
				t.Fatal("allowed")
			}
			if resp.GetDeniedResponse().GetStatus().GetCode() != 403 {
				t.Fatalf("denied with %v, want 403: %s", resp.GetDeniedResponse().GetStatus(), resp.GetDeniedResponse().GetBody())
			}
		})
	}
	if status, body, err := rawRequest(s.HTTPAddr, "GET", "/readyz", nil, ""); err != nil || status != http.StatusOK {
		t.Fatalf("/readyz after the hostile requests: %d %s %v", status, body, err)
	}
}

// hostileCheck is a CheckRequest for POST /v1/tool with raw header values
// in header_map (bytes, so not bound to be UTF-8) and the body as raw_body.
func hostileCheck(headers map[string][]byte, body string) *authv3.CheckRequest {
	hm := &corev3.HeaderMap{}
	for k, v := range headers {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: k, RawValue: v})
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: "POST", Path: "/v1/tool", HeaderMap: hm, RawBody: []byte(body)}},
	}}
}

// rawRequest writes one HTTP/1.1 request byte for byte (net/http's client
// would refuse some of these headers) and reads the answer.
func rawRequest(addr, method, path string, headers map[string]string, body string) (int, string, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(fltWait))
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: autonomy\r\nConnection: close\r\n", method, path)
	for k, v := range headers {
		fmt.Fprintf(&b, "%s: %s\r\n", k, v)
	}
	if body != "" {
		fmt.Fprintf(&b, "Content-Type: application/json\r\nContent-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	// The server may answer (431, 413) and close before reading it all.
	go conn.Write(b.Bytes())
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out), nil
}
