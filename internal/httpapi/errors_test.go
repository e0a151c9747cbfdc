package httpapi_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/preflight/submit"
	"github.com/contractrefine/autonomy/wal"
)

// TestErrorRows drives every error row of docs/API.md#errors (and the read
// endpoints' own errors) through the real handler and checks the status,
// the code, the JSON Pointer of every listed error, the retryable flag and
// the body shape; then it checks the WAL recorded nothing and that the
// server still answers a good request the way it should.
func TestErrorRows(t *testing.T) {
	huge := append([]byte(`{"intent":{"summary":"`), bytes.Repeat([]byte("x"), 2<<20)...)
	huge = append(huge, `"}}`...)
	cases := map[string]struct {
		opts   []fixtureOption
		setup  func(t *testing.T, f *fixture)
		method string // default POST
		path   string // default /v1/preflight
		body   func(t *testing.T) []byte
		status int
		code   string
		// paths are the JSON Pointers of every listed error, in order.
		paths     []string
		retryable bool
		// after is the status of a good POST made after the error.
		after int
	}{
		"not JSON": {
			body:   func(*testing.T) []byte { return []byte(`{"intent": {summary: 1}}`) },
			status: 400, code: preflight.CodeMalformedRequest, paths: []string{"/intent"},
		},
		"not JSON at all": {
			body:   func(*testing.T) []byte { return []byte(`<xml/>`) },
			status: 400, code: preflight.CodeMalformedRequest, paths: []string{""},
		},
		"empty body": {
			body:   func(*testing.T) []byte { return []byte{} },
			status: 400, code: preflight.CodeMalformedRequest, paths: []string{""},
		},
		"top level array": {
			body:   func(*testing.T) []byte { return []byte(`[]`) },
			status: 400, code: preflight.CodeMalformedRequest, paths: []string{""},
		},
		"trailing data": {
			body:   func(t *testing.T) []byte { return append(readRequest(t, "echo_pass"), `{}`...) },
			status: 400, code: preflight.CodeMalformedRequest, paths: []string{""},
		},
		// Each of these becomes part of a WAL key, which bbolt caps at 32
		// KiB: refused as the caller's error, not a 503 to retry.
		"session id too long for a key": {
			body: func(t *testing.T) []byte {
				return edit(t, "echo_pass", map[string]any{"/context/actor/session_id": strings.Repeat("s", 40000)})
			},
			status: 400, code: preflight.CodeMalformedRequest, paths: []string{"/context/actor/session_id"},
		},
		"idempotency key too long for a key": {
			body: func(t *testing.T) []byte {
				return edit(t, "refund_pass", map[string]any{"/context/request/idempotencyKey": strings.Repeat("k", 40000)})
			},
			status: 400, code: preflight.CodeMalformedRequest, paths: []string{"/context/request/idempotencyKey"},
		},
		"wrong type intent": {
			body:   func(t *testing.T) []byte { return edit(t, "echo_pass", map[string]any{"/intent": "refund"}) },
			status: 400, code: preflight.CodeMalformedRequest, paths: []string{"/intent"},
		},
		"wrong type summary": {
			body:   func(t *testing.T) []byte { return edit(t, "echo_pass", map[string]any{"/intent/summary": 5}) },
			status: 400, code: preflight.CodeMalformedRequest, paths: []string{"/intent/summary"},
		},
		"wrong type args": {
			body:   func(t *testing.T) []byte { return edit(t, "echo_pass", map[string]any{"/plan/steps/0/args": []any{1}}) },
			status: 400, code: preflight.CodeMalformedRequest, paths: []string{"/plan/steps/0/args"},
		},
		"wrong type steps": {
			body: func(t *testing.T) []byte {
				return edit(t, "echo_pass", map[string]any{"/plan/steps": map[string]any{}})
			},
			status: 400, code: preflight.CodeMalformedRequest, paths: []string{"/plan/steps"},
		},
		"wrong type provenance value": {
			body: func(t *testing.T) []byte {
				return edit(t, "echo_pass", map[string]any{"/plan/steps/0/provenance": map[string]any{"text": 1}})
			},
			status: 400, code: preflight.CodeMalformedRequest, paths: []string{"/plan/steps/0/provenance/text"},
		},
		"wrong type envelope": {
			body:   func(t *testing.T) []byte { return edit(t, "echo_pass", map[string]any{"/context/request": "v1"}) },
			status: 400, code: preflight.CodeMalformedRequest, paths: []string{"/context/request"},
		},
		"unknown top level field": {
			body:   func(t *testing.T) []byte { return edit(t, "echo_pass", map[string]any{"/priority": "high"}) },
			status: 400, code: preflight.CodeMalformedRequest, paths: []string{"/priority"},
		},
		"unknown step field": {
			body:   func(t *testing.T) []byte { return edit(t, "echo_pass", map[string]any{"/plan/steps/0/colour": "red"}) },
			status: 400, code: preflight.CodeMalformedRequest, paths: []string{"/plan/steps/0/colour"},
		},
		"missing summary": {
			body: func(t *testing.T) []byte {
				return edit(t, "echo_pass", map[string]any{"/intent/summary": deleteValue{}})
			},
			status: 400, code: preflight.CodeMalformedRequest, paths: []string{"/intent/summary"},
		},
		"missing actor id": {
			body: func(t *testing.T) []byte {
				return edit(t, "echo_pass", map[string]any{"/context/actor/id": deleteValue{}})
			},
			status: 400, code: preflight.CodeMalformedRequest, paths: []string{"/context/actor/id"},
		},
		"deeply nested": {
			body:   func(*testing.T) []byte { return deepJSON(10000) },
			status: 400, code: preflight.CodeMalformedRequest, paths: []string{""},
		},
		"2 MiB body": {
			body:   func(*testing.T) []byte { return huge },
			status: 413, code: preflight.CodeRequestTooLarge, paths: []string{""},
		},
		"seed invalid envelope": {
			body:   func(t *testing.T) []byte { return withEnvelope(t, "refund_pass", seedEnvelope("invalid")) },
			status: 400, code: preflight.CodeValidationFailed,
			paths: []string{"/context/request/idempotencyKey", "/context/request/timestampUtc", "/context/request/riskLevel"},
		},
		"envelope missing risk level": {
			body: func(t *testing.T) []byte {
				return edit(t, "refund_pass", map[string]any{"/context/request/riskLevel": deleteValue{}})
			},
			status: 400, code: preflight.CodeValidationFailed, paths: []string{"/context/request/riskLevel"},
		},
		"envelope deadline before timestamp": {
			body: func(t *testing.T) []byte {
				return edit(t, "refund_pass", map[string]any{"/context/request/deadlineUtc": "2026-06-23T14:29:00Z"})
			},
			status: 400, code: preflight.CodeValidationFailed, paths: []string{"/context/request/deadlineUtc"},
		},
		"unsupported contract version": {
			body: func(t *testing.T) []byte {
				return edit(t, "refund_pass", map[string]any{"/context/request/contractVersion": "aruntime.runtime-request.v2"})
			},
			status: 400, code: preflight.CodeUnsupportedVersion, paths: []string{"/context/request/contractVersion"},
		},
		"deadline exceeded": {
			setup:  func(_ *testing.T, f *fixture) { f.clock.Set(decisionTime.Add(time.Minute)) },
			body:   func(t *testing.T) []byte { return readRequest(t, "refund_repair") },
			status: 400, code: preflight.CodeDeadlineExceeded, paths: []string{"/context/request/deadlineUtc"},
			after: 400, // the good request's envelope has the same deadline
		},
		"idempotency key reused": {
			setup: func(t *testing.T, f *fixture) { mustDecision(t, f.post(readRequest(t, "refund_pass"))) },
			body: func(t *testing.T) []byte {
				return edit(t, "refund_pass", map[string]any{"/intent/summary": "Refund case 882, again"})
			},
			status: 409, code: preflight.CodeIdempotencyKeyReused, paths: []string{"/context/request/idempotencyKey"},
		},
		"mode disabled": {
			opts:   []fixtureOption{func(o *submit.Options) { o.Disabled = true }},
			body:   func(t *testing.T) []byte { return readRequest(t, "refund_pass") },
			status: 503, code: preflight.CodePreflightDisabled, paths: []string{""},
			after: 503,
		},
		"WAL closed": {
			setup: func(t *testing.T, f *fixture) {
				if err := f.db.Close(); err != nil {
					t.Fatal(err)
				}
			},
			body:   func(t *testing.T) []byte { return readRequest(t, "refund_pass") },
			status: 503, code: preflight.CodeVerifierUnavailable, paths: []string{""}, retryable: true,
			after: 503,
		},
		"WAL closed without session": {
			setup: func(t *testing.T, f *fixture) {
				if err := f.db.Close(); err != nil {
					t.Fatal(err)
				}
			},
			body:   func(t *testing.T) []byte { return readRequest(t, "echo_no_session") },
			status: 503, code: preflight.CodeVerifierUnavailable, paths: []string{""}, retryable: true,
			after: 503,
		},
		"no bundle": {
			opts:   []fixtureOption{func(o *submit.Options) { o.Bundle = func() submit.Bundle { return nil } }},
			body:   func(t *testing.T) []byte { return readRequest(t, "echo_pass") },
			status: 503, code: preflight.CodeVerifierUnavailable, paths: []string{""}, retryable: true,
			after: 503,
		},
		"unknown preflight id": {
			method: http.MethodGet, path: "/v1/preflight/pf_doesnotexist0000000",
			status: 404, code: preflight.CodeNotFound, paths: []string{""},
		},
		"empty preflight id": {
			method: http.MethodGet, path: "/v1/preflight/",
			status: 404, code: preflight.CodeNotFound, paths: []string{""},
		},
		"unknown audit id": {
			method: http.MethodGet, path: "/v1/audit/au_doesnotexist0000000",
			status: 404, code: preflight.CodeNotFound, paths: []string{""},
		},
		"GET on the preflight collection": {
			method: http.MethodGet, path: "/v1/preflight",
			status: 405, code: preflight.CodeMethodNotAllowed, paths: []string{""},
		},
		"DELETE a preflight": {
			method: http.MethodDelete, path: "/v1/preflight/pf_doesnotexist0000000",
			status: 405, code: preflight.CodeMethodNotAllowed, paths: []string{""},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tc.opts...)
			if tc.setup != nil {
				tc.setup(t, f)
			}
			before := f.frames()
			method, path := tc.method, tc.path
			if method == "" {
				method = http.MethodPost
			}
			if path == "" {
				path = "/v1/preflight"
			}
			var body []byte
			if tc.body != nil {
				body = tc.body(t)
			}
			r := f.do(method, path, body)
			errs := mustError(t, r, tc.status)
			if errs[0].Code != tc.code {
				t.Errorf("code %q, want %q", errs[0].Code, tc.code)
			}
			var paths []string
			for _, e := range errs {
				paths = append(paths, *e.Path)
				if e.Code != tc.code {
					t.Errorf("listed error %s has code %q, want %q", *e.Path, e.Code, tc.code)
				}
				if *e.Retryable != tc.retryable {
					t.Errorf("error %s retryable %v, want %v", *e.Path, *e.Retryable, tc.retryable)
				}
			}
			if !slices.Equal(paths, tc.paths) {
				t.Errorf("paths %q, want %q", paths, tc.paths)
			}
			if tc.status == 503 && r.header.Get("Retry-After") == "" && tc.retryable {
				t.Errorf("retryable 503 without Retry-After")
			}
			if tc.status == 405 && r.header.Get("Allow") == "" {
				t.Errorf("405 without an Allow header")
			}
			if got := f.frames(); got != before {
				t.Errorf("an error answer wrote %d frames", got-before)
			}

			// The server keeps serving: a good request gets what it should.
			after := tc.after
			if after == 0 {
				after = http.StatusOK
			}
			good := f.post(readRequest(t, "refund_repair"))
			if after == http.StatusOK {
				mustDecision(t, good)
			} else if good.status != after {
				t.Errorf("good request after the error: status %d, want %d: %s", good.status, after, good.body)
			}
		})
	}
}

// TestClosedWALRecordsNothing reopens the log a failed preflight could not
// write, and finds it empty: a 503 never leaves half a decision behind.
func TestClosedWALRecordsNothing(t *testing.T) {
	f := newFixture(t)
	mustDecision(t, f.post(readRequest(t, "read_repair")))
	if err := f.db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"read_pass", "refund_pass", "echo_no_session"} {
		mustError(t, f.post(readRequest(t, name)), http.StatusServiceUnavailable)
	}
	db, err := wal.Open(f.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if seq, _ := db.Head(); seq != 1 {
		t.Errorf("after reopening, the WAL holds %d frames, want the 1 recorded before it closed", seq)
	}
	s, err := db.Session(t.Context(), `["user:example","session:read","plan-read-v1"]`)
	if err != nil || s.Attempts != 1 {
		t.Errorf("session attempts %d (%v), want 1", s.Attempts, err)
	}
	if _, err := db.Idempotency(t.Context(), `["tenant:demo","user:example","idem_refund_case_882"]`); err == nil {
		t.Errorf("an idempotency key was recorded by a request that got 503")
	}
}

// TestBadBodiesOverOneConnection sends the bad bodies one after another to
// one server, then a good one: no bad body leaves the server unable to
// decide.
func TestBadBodiesOverOneConnection(t *testing.T) {
	f := newFixture(t)
	bad := [][]byte{
		[]byte(`{`), []byte(`null`), []byte(`"x"`), deepJSON(100000),
		append([]byte(`{"intent":{"summary":"`+strings.Repeat("y", 3<<20)), `"}}`...),
		[]byte("\xff\xfe"), []byte(`{"intent":{"summary":"a"},"intent":{"summary":"b"}}`),
	}
	for i, b := range bad {
		r := f.post(b)
		if r.status != 400 && r.status != 413 {
			t.Errorf("bad body %d: status %d: %s", i, r.status, r.body)
		}
	}
	d := mustDecision(t, f.post(readRequest(t, "refund_pass")))
	if d.Outcome != "pass" {
		t.Errorf("good request after bad bodies: %s (%s)", d.Outcome, d.Reason)
	}
}

// TestOversizedDeclaredLengthRefusedAtOnce: a client that declares a body
// over the limit and waits on Expect: 100-continue gets 413 without being
// asked for the body.
func TestOversizedDeclaredLengthRefusedAtOnce(t *testing.T) {
	f := newFixture(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/preflight HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 50000000\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413 before the body is sent", resp.StatusCode)
	}
}
