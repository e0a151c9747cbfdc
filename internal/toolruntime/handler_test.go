package toolruntime_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/contractrefine/autonomy/internal/toolruntime"
)

// lockedBuffer lets the server goroutine write log lines while the test
// reads them.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the JSON log records written so far.
func (b *lockedBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", sc.Text(), err)
		}
		out = append(out, rec)
	}
	return out
}

func newServer(t *testing.T, opts toolruntime.Options) (*httptest.Server, *lockedBuffer) {
	t.Helper()
	logs := &lockedBuffer{}
	opts.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	srv := httptest.NewServer(toolruntime.New(opts))
	t.Cleanup(srv.Close)
	return srv, logs
}

type response struct {
	status int
	header http.Header
	body   map[string]any
}

func post(t *testing.T, srv *httptest.Server, body string, header map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/tool", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return do(t, srv, req)
}

func do(t *testing.T, srv *httptest.Server, req *http.Request) response {
	t.Helper()
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", raw, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: body}
}

func errorCode(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

func TestToolCalls(t *testing.T) {
	rcpt := regexp.MustCompile(`^rcpt_[0-9a-f]{24}$`)
	tests := map[string]struct {
		body       string
		wantStatus int
		wantCode   string                               // error code, for non-200 answers
		check      func(t *testing.T, b map[string]any) // for 200 answers
	}{
		"echo returns the args": {
			body:       `{"kind":"tool.echo","args":{"text":"hi","n":3,"nested":{"a":[1,2]}}}`,
			wantStatus: http.StatusOK,
			check: func(t *testing.T, b map[string]any) {
				want := map[string]any{"text": "hi", "n": 3.0, "nested": map[string]any{"a": []any{1.0, 2.0}}}
				if !equalJSON(b, want) {
					t.Errorf("echo = %v, want %v", b, want)
				}
			},
		},
		"echo without args returns an empty object": {
			body:       `{"kind":"tool.echo"}`,
			wantStatus: http.StatusOK,
			check: func(t *testing.T, b map[string]any) {
				if len(b) != 0 {
					t.Errorf("echo = %v, want {}", b)
				}
			},
		},
		"sleep for a millisecond": {
			body:       `{"kind":"tool.sleep","args":{"ms":1}}`,
			wantStatus: http.StatusOK,
			check: func(t *testing.T, b map[string]any) {
				if b["slept_ms"] != 1.0 {
					t.Errorf("slept_ms = %v, want 1", b["slept_ms"])
				}
			},
		},
		"sleep over the limit": {
			body:       `{"kind":"tool.sleep","args":{"ms":5001}}`,
			wantStatus: http.StatusBadRequest,
			wantCode:   toolruntime.CodeInvalidArgs,
		},
		"sleep with a negative duration": {
			body:       `{"kind":"tool.sleep","args":{"ms":-1}}`,
			wantStatus: http.StatusBadRequest,
			wantCode:   toolruntime.CodeInvalidArgs,
		},
		"sleep with a string duration": {
			body:       `{"kind":"tool.sleep","args":{"ms":"10"}}`,
			wantStatus: http.StatusBadRequest,
			wantCode:   toolruntime.CodeInvalidArgs,
		},
		"customer read": {
			body:       `{"kind":"customer.read.v3","args":{"caseRef":"case:882"}}`,
			wantStatus: http.StatusOK,
			check: func(t *testing.T, b map[string]any) {
				c, _ := b["customer"].(map[string]any)
				if c["caseRef"] != "case:882" {
					t.Errorf("customer.caseRef = %v, want case:882", c["caseRef"])
				}
				if id, _ := c["id"].(string); !strings.HasPrefix(id, "cust_") {
					t.Errorf("customer.id = %q, want prefix cust_", id)
				}
			},
		},
		"customer read without a case": {
			body:       `{"kind":"customer.read.v3","args":{}}`,
			wantStatus: http.StatusBadRequest,
			wantCode:   toolruntime.CodeInvalidArgs,
		},
		"refund create": {
			body:       `{"kind":"refund.create.v2","args":{"caseRef":"case:882","amountUsd":125}}`,
			wantStatus: http.StatusOK,
			check: func(t *testing.T, b map[string]any) {
				r, _ := b["receipt"].(map[string]any)
				if id, _ := r["id"].(string); !rcpt.MatchString(id) {
					t.Errorf("receipt.id = %q, want %s", id, rcpt)
				}
				if r["amountUsd"] != 125.0 || r["caseRef"] != "case:882" {
					t.Errorf("receipt = %v, want amountUsd 125 and caseRef case:882", r)
				}
			},
		},
		"refund of nothing": {
			body:       `{"kind":"refund.create.v2","args":{"caseRef":"case:882","amountUsd":0}}`,
			wantStatus: http.StatusBadRequest,
			wantCode:   toolruntime.CodeInvalidArgs,
		},
		"shell runs nothing": {
			body:       `{"kind":"tool.shell","args":{"command":"rm -rf /"}}`,
			wantStatus: http.StatusOK,
			check: func(t *testing.T, b map[string]any) {
				if !equalJSON(b, map[string]any{"simulated": true}) {
					t.Errorf("shell = %v, want {\"simulated\":true}", b)
				}
			},
		},
		"unknown kind": {
			body:       `{"kind":"tool.nope","args":{}}`,
			wantStatus: http.StatusNotFound,
			wantCode:   toolruntime.CodeUnknownTool,
		},
		"not JSON": {
			body:       `{"kind":`,
			wantStatus: http.StatusBadRequest,
			wantCode:   toolruntime.CodeMalformedRequest,
		},
		"empty body": {
			body:       ``,
			wantStatus: http.StatusBadRequest,
			wantCode:   toolruntime.CodeMalformedRequest,
		},
		"trailing data": {
			body:       `{"kind":"tool.echo"} {}`,
			wantStatus: http.StatusBadRequest,
			wantCode:   toolruntime.CodeMalformedRequest,
		},
		"kind missing": {
			body:       `{"args":{}}`,
			wantStatus: http.StatusBadRequest,
			wantCode:   toolruntime.CodeMalformedRequest,
		},
		"kind not a string": {
			body:       `{"kind":7}`,
			wantStatus: http.StatusBadRequest,
			wantCode:   toolruntime.CodeMalformedRequest,
		},
		"args not an object": {
			body:       `{"kind":"tool.echo","args":[1]}`,
			wantStatus: http.StatusBadRequest,
			wantCode:   toolruntime.CodeMalformedRequest,
		},
	}
	srv, _ := newServer(t, toolruntime.Options{})
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := post(t, srv, tc.body, nil)
			if got.status != tc.wantStatus {
				t.Fatalf("status = %d, want %d (body %v)", got.status, tc.wantStatus, got.body)
			}
			if tc.wantStatus != http.StatusOK {
				if code := errorCode(got.body); code != tc.wantCode {
					t.Errorf("error.code = %q, want %q", code, tc.wantCode)
				}
				return
			}
			tc.check(t, got.body)
		})
	}
}

func TestDeterministicIDs(t *testing.T) {
	srv, _ := newServer(t, toolruntime.Options{})
	receipt := func(args string) string {
		b := post(t, srv, `{"kind":"refund.create.v2","args":`+args+`}`, nil).body
		r, _ := b["receipt"].(map[string]any)
		id, _ := r["id"].(string)
		if id == "" {
			t.Fatalf("no receipt id in %v", b)
		}
		return id
	}
	customer := func(caseRef string) string {
		b := post(t, srv, `{"kind":"customer.read.v3","args":{"caseRef":"`+caseRef+`"}}`, nil).body
		c, _ := b["customer"].(map[string]any)
		id, _ := c["id"].(string)
		return id
	}
	base := receipt(`{"caseRef":"case:882","amountUsd":125}`)
	tests := map[string]struct {
		got      string
		wantSame bool
	}{
		"same args":                 {receipt(`{"caseRef":"case:882","amountUsd":125}`), true},
		"other key order":           {receipt(`{"amountUsd":125,"caseRef":"case:882"}`), true},
		"same number written 125.0": {receipt(`{"caseRef":"case:882","amountUsd":125.0}`), true},
		"other amount":              {receipt(`{"caseRef":"case:882","amountUsd":126}`), false},
		"other case":                {receipt(`{"caseRef":"case:883","amountUsd":125}`), false},
		"extra arg":                 {receipt(`{"caseRef":"case:882","amountUsd":125,"note":"x"}`), false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if same := tc.got == base; same != tc.wantSame {
				t.Errorf("receipt %q vs %q: same = %v, want %v", tc.got, base, same, tc.wantSame)
			}
		})
	}
	t.Run("customer id follows the case", func(t *testing.T) {
		a, b, c := customer("case:1"), customer("case:1"), customer("case:2")
		if a != b || a == c {
			t.Errorf("customer ids %q, %q, %q: want the first two equal and the third different", a, b, c)
		}
	})
}

func TestLogLine(t *testing.T) {
	srv, logs := newServer(t, toolruntime.Options{})
	header := map[string]string{
		"X-Autonomy-Audit-Id":        "au_audit0123456789",
		"X-Request-Id":               "req-42",
		"X-Autonomy-Preflight-Id":    "pf_preflight0123456",
		"X-Autonomy-Advisory-Reason": "contract: preflight_required",
	}
	got := post(t, srv, `{"kind":"tool.echo","args":{"x":1}}`, header)
	if got.status != http.StatusOK {
		t.Fatalf("status = %d, want 200", got.status)
	}
	if echoed := got.header.Get("X-Autonomy-Audit-Id"); echoed != "au_audit0123456789" {
		t.Errorf("response X-Autonomy-Audit-Id = %q, want the request's", echoed)
	}
	post(t, srv, `{"kind":"tool.nope"}`, map[string]string{"X-Request-Id": "req-43"})

	lines := logs.lines(t)
	if len(lines) != 2 {
		t.Fatalf("got %d log lines, want one per call (2): %v", len(lines), lines)
	}
	want := map[string]any{
		"msg":                        "tool call",
		"method":                     "POST",
		"kind":                       "tool.echo",
		"status":                     200.0,
		"x-autonomy-audit-id":        "au_audit0123456789",
		"x-request-id":               "req-42",
		"x-autonomy-preflight-id":    "pf_preflight0123456",
		"x-autonomy-advisory-reason": "contract: preflight_required",
	}
	for k, v := range want {
		if lines[0][k] != v {
			t.Errorf("first line %s = %v, want %v", k, lines[0][k], v)
		}
	}
	if lines[1]["kind"] != "tool.nope" || lines[1]["status"] != 404.0 || lines[1]["x-request-id"] != "req-43" {
		t.Errorf("second line = %v, want kind tool.nope, status 404, x-request-id req-43", lines[1])
	}
	if lines[1]["x-autonomy-audit-id"] != "" {
		t.Errorf("second line x-autonomy-audit-id = %v, want empty", lines[1]["x-autonomy-audit-id"])
	}
}

func TestOtherRequests(t *testing.T) {
	srv, logs := newServer(t, toolruntime.Options{MaxBodyBytes: 64})
	tests := map[string]struct {
		method, path, body string
		kindHeader         string
		wantStatus         int
		wantCode           string
		wantLogged         bool
	}{
		"GET /v1/tool": {
			method: http.MethodGet, path: "/v1/tool",
			wantStatus: http.StatusMethodNotAllowed, wantCode: toolruntime.CodeMethodNotAllowed, wantLogged: true,
		},
		"body over the limit": {
			method: http.MethodPost, path: "/v1/tool",
			body:       `{"kind":"tool.echo","args":{"pad":"` + strings.Repeat("x", 64) + `"}}`,
			wantStatus: http.StatusRequestEntityTooLarge, wantCode: toolruntime.CodeRequestTooLarge, wantLogged: true,
		},
		"health": {
			method: http.MethodGet, path: "/healthz",
			wantStatus: http.StatusOK,
		},
		// Behind a check that saw only the kind header, the body must not
		// name another tool.
		"kind header and body disagree": {
			method: http.MethodPost, path: "/v1/tool", kindHeader: "tool.echo",
			body:       `{"kind":"tool.shell","args":{}}`,
			wantStatus: http.StatusBadRequest, wantCode: toolruntime.CodeKindMismatch, wantLogged: true,
		},
		"kind header and body agree": {
			method: http.MethodPost, path: "/v1/tool", kindHeader: "tool.echo",
			body:       `{"kind":"tool.echo","args":{}}`,
			wantStatus: http.StatusOK, wantLogged: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			before := len(logs.lines(t))
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.kindHeader != "" {
				req.Header.Set(toolruntime.HeaderToolKind, tc.kindHeader)
			}
			got := do(t, srv, req)
			if got.status != tc.wantStatus {
				t.Fatalf("status = %d, want %d", got.status, tc.wantStatus)
			}
			if code := errorCode(got.body); code != tc.wantCode {
				t.Errorf("error.code = %q, want %q", code, tc.wantCode)
			}
			if logged := len(logs.lines(t)) > before; logged != tc.wantLogged {
				t.Errorf("logged = %v, want %v", logged, tc.wantLogged)
			}
		})
	}
}

// TestSleepHonoursContext calls the handler with a context that is already
// over: tool.sleep must return at once, not after its 5 seconds, and the
// call is logged with the 499 status of a client that went away.
func TestSleepHonoursContext(t *testing.T) {
	logs := &lockedBuffer{}
	h := toolruntime.New(toolruntime.Options{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/tool",
		strings.NewReader(`{"kind":"tool.sleep","args":{"ms":5000}}`))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)

	lines := logs.lines(t)
	if len(lines) != 1 || lines[0]["status"] != 499.0 || lines[0]["kind"] != "tool.sleep" {
		t.Errorf("log = %v, want one tool.sleep line with status 499", lines)
	}
	if rec.Body.Len() != 0 {
		t.Errorf("wrote %q to a client that went away", rec.Body.String())
	}
}

func TestKinds(t *testing.T) {
	want := []string{"customer.read.v3", "ledger.debit.buggy.v1", "ledger.debit.v1", "payment.send.v1", "refund.create.v2", "tool.echo", "tool.shell", "tool.sleep"}
	if got := toolruntime.New(toolruntime.Options{}).Kinds(); !slices.Equal(got, want) {
		t.Errorf("Kinds() = %v, want %v", got, want)
	}
}

func equalJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}
