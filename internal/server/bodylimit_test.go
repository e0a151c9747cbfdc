package server

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"

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
	if _, err := slow.Write([]byte("POST /v1/preflight?dry_run=true HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"intent\":")); err != nil {
		t.Fatal(err)
	}
	post := func() (int, http.Header, string) {
		resp, err := http.Post(e.base+"/v1/preflight?dry_run=true", "application/json", strings.NewReader(preflightBody("session:limit", "x")))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Error struct{ Code string } `json:"error"`
		}
		json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, resp.Header, body.Error.Code
	}
	refused := false
	for range 500 { // until the slow request holds the one place
		status, h, code := post()
		if status == http.StatusServiceUnavailable {
			if code != preflight.CodeOverloaded || h.Get("Retry-After") == "" {
				t.Fatalf("503 with code %q, Retry-After %q; want overloaded and a Retry-After", code, h.Get("Retry-After"))
			}
			refused = true
			break
		}
	}
	if !refused {
		t.Fatal("no POST was refused while a slow body held the only place")
	}
	slow.Close()
	for range 500 {
		if status, _, _ := post(); status == http.StatusOK {
			return
		}
	}
	t.Fatal("POSTs were still refused after the slow connection closed")
}
