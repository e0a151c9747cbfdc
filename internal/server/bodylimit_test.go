package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/internal/config"
	"github.com/contractrefine/autonomy/preflight"
)

// TestBodyRequestsBounded scripts the slow-body attack: a connection sends
// the head of a POST and part of its body, never the rest. With room for
// one body-carrying request, every other POST is refused at once with 503
// overloaded and Retry-After, before its body is read; once the slow
// connection is gone, POSTs are served again. Before the bound every slow
// body was held (500 connections × 900 KB held 1.07 GB).
func TestBodyRequestsBounded(t *testing.T) {
	e := obsStart(t, func(c *config.Config) { c.HTTP.MaxBodyRequests = 1 }, Options{ReadinessInterval: -1})
	slow, err := net.Dial("tcp", e.addrs.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := slow.Write([]byte("POST /v1/preflight?dry_run=true HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"intent\":")); err != nil {
		t.Fatal(err)
	}
	// Nothing else is sent meanwhile, so the slow request takes the one
	// place as soon as the server reads its head.
	for deadline := time.Now().Add(10 * time.Second); e.srv.bodies.held() != 1; {
		if time.Now().After(deadline) {
			t.Fatal("the slow request never took the place")
		}
		time.Sleep(time.Millisecond)
	}
	status, h, code := postDryRun(t, e.base)
	if status != http.StatusServiceUnavailable || code != preflight.CodeOverloaded+" retryable" || h.Get("Retry-After") == "" {
		t.Fatalf("a POST while a slow body holds the only place: %d, code %q, Retry-After %q; want 503 overloaded, retryable, and a Retry-After",
			status, code, h.Get("Retry-After"))
	}
	slow.Close()
	for range 500 {
		if status, _, _ := postDryRun(t, e.base); status == http.StatusOK {
			return
		}
	}
	t.Fatal("POSTs were still refused after the slow connection closed")
}

// held is how many requests hold a place of http.max_body_requests.
func (l *bodyLimiter) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.requests
}

// postDryRun posts a dry-run preflight to base and returns the status, the
// headers and the error code of the answer, followed by " retryable" when
// the error says so.
func postDryRun(t *testing.T, base string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Post(base+"/v1/preflight?dry_run=true", "application/json", strings.NewReader(preflightBody("session:limit", "x")))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var answer struct {
		Error struct {
			Code      string
			Retryable bool
		} `json:"error"`
	}
	json.NewDecoder(resp.Body).Decode(&answer)
	code := answer.Error.Code
	if answer.Error.Retryable {
		code += " retryable"
	}
	return resp.StatusCode, resp.Header, code
}

// holdBody opens a connection to addr that sends the head of a POST
// declaring length body bytes and never sends them; closed at cleanup.
func holdBody(t *testing.T, addr, path string, length int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", path, length)
	if _, err := c.Write([]byte(head)); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestGatewayBodiesShareTheBudget: the gateway's bodies count against the
// same http.max_bytes_in_flight as the HTTP listener's, so bodies held on
// the gateway leave either front no room past the budget; but a gateway
// request, held while its tool runs, takes no place of
// http.max_body_requests.
func TestGatewayBodiesShareTheBudget(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(upstream.Close)
	const budget = 64 << 10
	e := obsStart(t, func(c *config.Config) {
		c.Upstream, c.GatewayAddr = upstream.URL, "127.0.0.1:0"
		c.HTTP.MaxBodyBytes, c.HTTP.MaxBytesInFlight, c.HTTP.MaxBodyRequests = budget, budget, 1
	}, Options{ReadinessInterval: -1})
	gateway := "http://" + e.addrs.Gateway

	small := holdBody(t, e.addrs.Gateway, "/ungated", 100)
	waitHeld(t, e.srv.bodies, 0, 100)
	if status, _, code := postDryRun(t, e.base); status != http.StatusOK {
		t.Fatalf("a dry run while a 100-byte gateway body is held: %d %s, want 200 (the one place is free)", status, code)
	}
	rest := holdBody(t, e.addrs.Gateway, "/ungated", budget-100)
	waitHeld(t, e.srv.bodies, 0, budget)
	for name, base := range map[string]string{"the API": e.base, "the gateway": gateway} {
		status, h, code := postDryRun(t, base)
		if status != http.StatusServiceUnavailable || code != preflight.CodeOverloaded+" retryable" || h.Get("Retry-After") == "" {
			t.Errorf("a body to %s while the gateway holds the budget: %d %q Retry-After %q, want 503 overloaded",
				name, status, code, h.Get("Retry-After"))
		}
	}
	small.Close()
	rest.Close()
	waitHeld(t, e.srv.bodies, 0, 0)
	if status, _, code := postDryRun(t, gateway); status != http.StatusOK {
		t.Fatalf("a dry run through the gateway after the held bodies went: %d %s, want 200", status, code)
	}
}

// TestGatewayAPICountsAgainstBodyRequests: the API routes behind the
// gateway take a place of http.max_body_requests like the API on the HTTP
// listener, so a body held there leaves the other front none.
func TestGatewayAPICountsAgainstBodyRequests(t *testing.T) {
	upstream := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(upstream.Close)
	e := obsStart(t, func(c *config.Config) {
		c.Upstream, c.GatewayAddr, c.HTTP.MaxBodyRequests = upstream.URL, "127.0.0.1:0", 1
	}, Options{ReadinessInterval: -1})
	holdBody(t, e.addrs.Gateway, "/v1/preflight?dry_run=true", 100)
	waitHeld(t, e.srv.bodies, 1, 100)
	if status, _, code := postDryRun(t, e.base); status != http.StatusServiceUnavailable || code != preflight.CodeOverloaded+" retryable" {
		t.Fatalf("a dry run while the gateway's API holds the one place: %d %s, want 503 overloaded", status, code)
	}
}

// waitHeld waits until l holds exactly requests places and bytes bytes:
// a held connection's head reaches its handler after the dial returns.
func waitHeld(t *testing.T, l *bodyLimiter, requests int, bytes int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		l.mu.Lock()
		r, b := l.requests, l.bytes
		l.mu.Unlock()
		if r == requests && b == bytes {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the body bounds hold %d places and %d bytes, want %d and %d", r, b, requests, bytes)
		}
		time.Sleep(time.Millisecond)
	}
}
