package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/internal/bundle"
	"github.com/contractrefine/autonomy/internal/httpapi"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/preflight/submit"
	"github.com/contractrefine/autonomy/wal"
)

// decisionTime is the injected clock: inside the example envelopes' window
// (timestampUtc 14:30:00Z, deadlineUtc 14:30:20Z) and 65 s after their
// attestation was issued.
var decisionTime = time.Date(2026, 6, 23, 14, 30, 5, 0, time.UTC)

// reasonShape is the shape of every reason, <layer>: <subreason>.
var reasonShape = regexp.MustCompile(`^[a-z][a-z0-9_]*: [a-z0-9_]+$`)

// loadBundle loads the embedded default bundle once: it is immutable, and
// compiling its Rego and CEL for every test would dominate the run time.
var loadBundle = sync.OnceValues(func() (*bundle.Bundle, error) {
	return bundle.Load(context.Background(), "", nil)
})

// clock is a settable injected clock.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.Set(t)
	return c
}

func (c *clock) Now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) Set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *clock) Add(d time.Duration) { c.ns.Add(int64(d)) }

// fixture is the real handler on a real httptest server, over a real WAL in
// a temporary directory, with the embedded bundle, a fixed clock and
// sequential ids.
type fixture struct {
	t     *testing.T
	srv   *httptest.Server
	db    *wal.DB
	dir   string
	clock *clock
	api   *httpapi.API
}

// fixtureOption changes the API options before the handler is built; it
// may also wrap the store.
type fixtureOption func(o *submit.Options)

func newFixture(t *testing.T, opts ...fixtureOption) *fixture {
	t.Helper()
	b, err := loadBundle()
	if err != nil {
		t.Fatalf("load embedded bundle: %v", err)
	}
	dir := t.TempDir()
	db, err := wal.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	c := newClock(decisionTime)
	var pf, au atomic.Int64
	o := submit.Options{
		Verifier:          preflight.NewVerifier(preflight.Options{Chain: db, Now: c.Now}),
		Store:             db,
		Bundle:            func() submit.Bundle { return b },
		BindingWindow:     5 * time.Minute,
		MaxRepairAttempts: 1,
		Now:               c.Now,
		NewPreflightID:    func() string { return fmt.Sprintf("pf_test%013d", pf.Add(1)) },
		NewAuditID:        func() string { return fmt.Sprintf("au_test%013d", au.Add(1)) },
	}
	for _, opt := range opts {
		opt(&o)
	}
	api := httpapi.New(httpapi.Options{Submit: submit.New(o), Store: o.Store, Log: db})
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	return &fixture{t: t, srv: srv, db: db, dir: dir, clock: c, api: api}
}

// response is one HTTP answer, read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (f *fixture) do(method, path string, body []byte) response {
	f.t.Helper()
	return doHTTP(f.t, method, f.srv.URL+path, body)
}

func (f *fixture) post(body []byte) response {
	f.t.Helper()
	return f.do(http.MethodPost, "/v1/preflight", body)
}

func doHTTP(t testing.TB, method, url string, body []byte) response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return send(t, req)
}

// send makes the request and reads the answer whole.
func send(t testing.TB, req *http.Request) response {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", req.Method, req.URL, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// frames is how many frames the WAL holds (seqs start at 1, no gaps).
func (f *fixture) frames() uint64 {
	seq, _ := f.db.Head()
	return seq
}

// readRequest returns testdata/requests/<name>.json.
func readRequest(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "requests", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// deleteValue, as an edit's value, removes the member.
type deleteValue struct{}

// edit returns request name with each JSON Pointer in edits set to its
// value (or removed, for deleteValue{}). Pointers name existing parents;
// the tokens used here need no ~ escapes.
func edit(t testing.TB, name string, edits map[string]any) []byte {
	t.Helper()
	var doc any
	if err := json.Unmarshal(readRequest(t, name), &doc); err != nil {
		t.Fatal(err)
	}
	for ptr, v := range edits {
		tokens := strings.Split(strings.TrimPrefix(ptr, "/"), "/")
		parent := doc
		for _, tok := range tokens[:len(tokens)-1] {
			parent = child(t, parent, tok, ptr)
		}
		last := tokens[len(tokens)-1]
		switch p := parent.(type) {
		case map[string]any:
			if _, del := v.(deleteValue); del {
				delete(p, last)
			} else {
				p[last] = v
			}
		case []any:
			i, err := strconv.Atoi(last)
			if err != nil || i >= len(p) {
				t.Fatalf("edit %s: bad index", ptr)
			}
			p[i] = v
		default:
			t.Fatalf("edit %s: parent is not a container", ptr)
		}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func child(t testing.TB, v any, tok, ptr string) any {
	t.Helper()
	switch c := v.(type) {
	case map[string]any:
		if n, ok := c[tok]; ok {
			return n
		}
	case []any:
		if i, err := strconv.Atoi(tok); err == nil && i < len(c) {
			return c[i]
		}
	}
	t.Fatalf("edit %s: no member %q", ptr, tok)
	return nil
}

// withEnvelope returns request name with context.request replaced by the
// envelope in file (relative to this package), its members kept in the
// file's order: error lists are in document order.
func withEnvelope(t testing.TB, name, file string) []byte {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return edit(t, name, map[string]any{"/context/request": json.RawMessage(raw)})
}

// seedEnvelope is the path of one of the three example envelopes.
func seedEnvelope(name string) string {
	return filepath.Join("..", "..", "preflight", "envelope", "testdata", name+".json")
}

// decision is the PreflightDecision as a client reads it.
type decision struct {
	PreflightID     string `json:"preflight_id"`
	AuditID         string `json:"audit_id"`
	Outcome         string `json:"outcome"`
	Reason          string `json:"reason"`
	ContractResults []row  `json:"contract_results"`
	ClauseResults   []row  `json:"clause_results"`
	Eligibility     struct {
		Allowed          bool     `json:"allowed"`
		RequiredRollback string   `json:"required_rollback"`
		BoundToolKinds   []string `json:"bound_tool_kinds"`
		ExpiresAt        string   `json:"expires_at"`
	} `json:"eligibility"`
	Attempt   int    `json:"attempt"`
	DecidedAt string `json:"decided_at"`
}

type row struct {
	Contract    string `json:"contract"`
	Outcome     string `json:"outcome"`
	Severity    string `json:"severity"`
	Reason      string `json:"reason"`
	RepairHints []struct {
		Field      string `json:"field"`
		Suggestion any    `json:"suggestion"`
		Bounded    bool   `json:"bounded"`
	} `json:"repair_hints"`
	Evidence map[string]any `json:"evidence"`
}

// mustDecision checks that r is a 200 decision with the invariants every
// decision has (docs/API.md#preflightdecision; every reason <layer>: <subreason>), and returns it.
// wantUncached checks that an answer may be neither sniffed as HTML nor
// kept by a cache: it carries agents' text.
func wantUncached(t testing.TB, r response) {
	t.Helper()
	if r.header.Get("X-Content-Type-Options") != "nosniff" || r.header.Get("Cache-Control") != "no-store" {
		t.Errorf("X-Content-Type-Options %q, Cache-Control %q; want nosniff, no-store",
			r.header.Get("X-Content-Type-Options"), r.header.Get("Cache-Control"))
	}
}

func mustDecision(t testing.TB, r response) decision {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	wantUncached(t, r)
	var d decision
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("decode decision: %v\n%s", err, r.body)
	}
	checkDecision(t, d)
	return d
}

func checkDecision(t testing.TB, d decision) {
	t.Helper()
	if !slices.Contains([]string{"pass", "repair_required", "deny"}, d.Outcome) {
		t.Errorf("outcome %q is outside the closed enum", d.Outcome)
	}
	if !reasonShape.MatchString(d.Reason) {
		t.Errorf("reason %q breaks the reason shape", d.Reason)
	}
	var names []string
	for _, r := range d.ContractResults {
		names = append(names, r.Contract)
	}
	if !slices.Equal(names, preflight.Catalog()) {
		t.Errorf("contract_results %v, want exactly the catalog %v", names, preflight.Catalog())
	}
	for _, r := range slices.Concat(d.ContractResults, d.ClauseResults) {
		if r.Reason != "" && !reasonShape.MatchString(r.Reason) {
			t.Errorf("row %s reason %q breaks the reason shape", r.Contract, r.Reason)
		}
		if !slices.Contains([]string{"pass", "fail", "not_applicable"}, r.Outcome) {
			t.Errorf("row %s outcome %q", r.Contract, r.Outcome)
		}
		wantSeverities := []string{"blocking", "advisory"}
		if r.Outcome == "not_applicable" {
			wantSeverities = []string{"info"}
		}
		if !slices.Contains(wantSeverities, r.Severity) {
			t.Errorf("row %s (%s) severity %q", r.Contract, r.Outcome, r.Severity)
		}
		for _, h := range r.RepairHints {
			if !strings.HasPrefix(h.Field, "/") {
				t.Errorf("row %s hint field %q is not a JSON Pointer", r.Contract, h.Field)
			}
		}
	}
	if d.Outcome == "pass" {
		if !d.Eligibility.Allowed || len(d.Eligibility.BoundToolKinds) == 0 {
			t.Errorf("pass without eligibility: %+v", d.Eligibility)
		}
	} else if d.Eligibility.Allowed || len(d.Eligibility.BoundToolKinds) != 0 {
		t.Errorf("%s binds %+v", d.Outcome, d.Eligibility)
	}
}

// apiErr is one entry of the error body.
type apiErr struct {
	Code              string   `json:"code"`
	ContractVersion   string   `json:"contractVersion"`
	Path              *string  `json:"path"`
	Message           string   `json:"message"`
	Retryable         *bool    `json:"retryable"`
	SupportedVersions []string `json:"supportedVersions"`
}

// mustError checks that r is an error answer with the body of docs/API.md#errors:
// exactly "error" and "errors", the first entry of errors equal to error,
// every entry complete. It returns the entries.
func mustError(t testing.TB, r response, status int) []apiErr {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	wantUncached(t, r)
	var top map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &top); err != nil {
		t.Fatalf("error body is not a JSON object: %v\n%s", err, r.body)
	}
	if len(top) != 2 || top["error"] == nil || top["errors"] == nil {
		t.Fatalf("error body members: want exactly error and errors, got %s", r.body)
	}
	var first apiErr
	var all []apiErr
	if err := json.Unmarshal(top["error"], &first); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(top["errors"], &all); err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 {
		t.Fatalf("errors is empty: %s", r.body)
	}
	var allRaw []json.RawMessage
	json.Unmarshal(top["errors"], &allRaw)
	if !bytes.Equal(allRaw[0], top["error"]) {
		t.Errorf("error is not errors[0]:\n%s\n%s", top["error"], allRaw[0])
	}
	for i, e := range all {
		if e.Code == "" || e.Message == "" || e.Path == nil || e.Retryable == nil {
			t.Errorf("errors[%d] lacks code, path, message or retryable: %+v", i, e)
		}
		if e.ContractVersion != "aruntime.runtime-request.v1" || !slices.Equal(e.SupportedVersions, []string{"aruntime.runtime-request.v1"}) {
			t.Errorf("errors[%d] contractVersion %q supportedVersions %v", i, e.ContractVersion, e.SupportedVersions)
		}
	}
	return all
}

// deepJSON is a request whose args nest depth levels deep.
func deepJSON(depth int) []byte {
	return []byte(`{"intent":{"summary":"deep"},"plan":{"steps":[{"id":"s1","kind":"tool.echo","args":{"x":` +
		strings.Repeat("[", depth) + strings.Repeat("]", depth) +
		`}}]},"context":{"actor":{"id":"user:example"}}}`)
}
