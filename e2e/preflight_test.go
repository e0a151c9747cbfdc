package e2e

// The preflight API from the outside (issue 3), against the real binary:
// a repair round trip whose budget survives a restart, idempotency keys
// that survive a restart, GET /v1/preflight/{id} returning the POST's
// bytes, a passing preflight admitting its kind once through gRPC Check
// with the audit join showing both frames, bad bodies, and a race on one
// idempotency key. Helpers here carry a pf prefix.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// pfIDShape is the shape docs/API.md#preflightdecision gives for preflight and audit ids.
var pfIDShape = regexp.MustCompile(`^[A-Za-z0-9_-]{16,128}$`)

// pfReasonShape is the shape of every reason, <layer>: <subreason>.
var pfReasonShape = regexp.MustCompile(`^[a-z][a-z0-9_]*: [a-z0-9_]+$`)

// pfDecision is the part of a PreflightDecision these tests read.
type pfDecision struct {
	PreflightID     string `json:"preflight_id"`
	AuditID         string `json:"audit_id"`
	Outcome         string `json:"outcome"`
	Reason          string `json:"reason"`
	Attempt         int    `json:"attempt"`
	ContractResults []struct {
		Contract    string `json:"contract"`
		Outcome     string `json:"outcome"`
		Reason      string `json:"reason"`
		RepairHints []struct {
			Field      string `json:"field"`
			Suggestion any    `json:"suggestion"`
			Bounded    bool   `json:"bounded"`
		} `json:"repair_hints"`
	} `json:"contract_results"`
	Eligibility struct {
		Allowed        bool     `json:"allowed"`
		BoundToolKinds []string `json:"bound_tool_kinds"`
	} `json:"eligibility"`
}

// pfAnswer is one HTTP answer of the API.
type pfAnswer struct {
	status int
	body   []byte
	header http.Header
}

func pfPost(t *testing.T, s *Server, body []byte) pfAnswer {
	t.Helper()
	status, b, h := PostJSON(t, s.URL("/v1/preflight"), body)
	return pfAnswer{status, b, h}
}

func pfGet(t *testing.T, s *Server, path string) pfAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL(path), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return pfAnswer{resp.StatusCode, b, resp.Header}
}

// pfMustDecide checks a 200 decision: seven rows, reasons of the <layer>: <subreason>
// shape, ids of the SPEC shape; it returns the decision.
func pfMustDecide(t *testing.T, a pfAnswer) pfDecision {
	t.Helper()
	if a.status != http.StatusOK {
		t.Fatalf("preflight: status %d: %s", a.status, a.body)
	}
	var d pfDecision
	if err := json.Unmarshal(a.body, &d); err != nil {
		t.Fatalf("decode decision: %v\n%s", err, a.body)
	}
	if len(d.ContractResults) != 7 {
		t.Errorf("%d contract rows, want 7", len(d.ContractResults))
	}
	if !pfReasonShape.MatchString(d.Reason) {
		t.Errorf("reason %q breaks the reason shape", d.Reason)
	}
	for _, r := range d.ContractResults {
		if r.Reason != "" && !pfReasonShape.MatchString(r.Reason) {
			t.Errorf("row %s reason %q breaks the reason shape", r.Contract, r.Reason)
		}
	}
	if !pfIDShape.MatchString(d.PreflightID) || !pfIDShape.MatchString(d.AuditID) || d.PreflightID == d.AuditID {
		t.Errorf("ids %q, %q", d.PreflightID, d.AuditID)
	}
	return d
}

// pfMustFail checks an error answer's status and code and returns its first
// error's path and retryable flag.
func pfMustFail(t *testing.T, a pfAnswer, status int, code string) (path string, retryable bool) {
	t.Helper()
	var body struct {
		Error struct {
			Code      string `json:"code"`
			Path      string `json:"path"`
			Retryable bool   `json:"retryable"`
		} `json:"error"`
		Errors []json.RawMessage `json:"errors"`
	}
	if err := json.Unmarshal(a.body, &body); err != nil || a.status != status || body.Error.Code != code || len(body.Errors) == 0 {
		t.Fatalf("want %d %s, got %d: %s (%v)", status, code, a.status, a.body, err)
	}
	return body.Error.Path, body.Error.Retryable
}

// pfRead is a one-step customer.read.v3 plan (no side effects) in zone.
func pfRead(session, zone string) []byte {
	b, _ := json.Marshal(map[string]any{
		"intent": map[string]any{"summary": "read case 882", "plan_hash": "plan-read-" + session},
		"plan": map[string]any{"steps": []any{map[string]any{
			"id": "r1", "kind": "customer.read.v3", "zone": zone, "args": map[string]any{"caseRef": "case:882"}}}},
		"context": map[string]any{"actor": map[string]any{"id": "user:example", "session_id": session}},
	})
	return b
}

// pfApplyHint applies a bounded hint to a request, as an agent would: the
// hint's field is a JSON Pointer into the request, its suggestion the value.
func pfApplyHint(t *testing.T, body []byte, field string, suggestion any) []byte {
	t.Helper()
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	tokens := strings.Split(strings.TrimPrefix(field, "/"), "/")
	cur := doc
	for i, tok := range tokens {
		last := i == len(tokens)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				c[tok] = suggestion
			} else {
				cur = c[tok]
			}
		case []any:
			var n int
			if _, err := fmt.Sscan(tok, &n); err != nil || n >= len(c) {
				t.Fatalf("hint field %s: bad index %q", field, tok)
			}
			if last {
				c[n] = suggestion
			} else {
				cur = c[n]
			}
		default:
			t.Fatalf("hint field %s does not resolve in the request", field)
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// pfEnvelopeRead is a customer.read.v3 plan carrying the example high-risk
// envelope, re-dated to now so its deadline is ahead, under key.
func pfEnvelopeRead(t *testing.T, session, key, summary string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "preflight", "envelope", "testdata", "high-risk.json"))
	if err != nil {
		t.Fatal(err)
	}
	var env map[string]any
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	env["idempotencyKey"] = key
	env["timestampUtc"] = now.Add(-time.Second).Format(time.RFC3339)
	env["deadlineUtc"] = now.Add(time.Hour).Format(time.RFC3339)
	var req map[string]any
	json.Unmarshal(pfRead(session, "payments"), &req)
	req["intent"].(map[string]any)["summary"] = summary
	req["context"].(map[string]any)["request"] = env
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPreflightRepairRoundTripSurvivesRestart: repair_required with a
// bounded hint, the hint applied passes, a third submission is
// repair_exhausted; a session half spent before a restart is still half
// spent after it, and stored decisions read back byte for byte.
func TestPreflightRepairRoundTripSurvivesRestart(t *testing.T) {
	srv := StartServer(t, ServeOptions{Mode: "enforce"})

	// Session A: the whole round trip before the restart.
	first := pfRead("session:a", "billing")
	d1 := pfMustDecide(t, pfPost(t, srv, first))
	if d1.Outcome != "repair_required" || d1.Reason != "contract: repair_required" || d1.Attempt != 1 {
		t.Fatalf("first submission: %s %s attempt %d", d1.Outcome, d1.Reason, d1.Attempt)
	}
	hint := d1.ContractResults[2].RepairHints
	if d1.ContractResults[2].Contract != "capability_in_zone" || len(hint) != 1 || !hint[0].Bounded ||
		hint[0].Field != "/plan/steps/0/zone" || hint[0].Suggestion != "payments" {
		t.Fatalf("want one bounded zone hint on capability_in_zone, got %+v", d1.ContractResults[2])
	}
	repaired := pfApplyHint(t, first, hint[0].Field, hint[0].Suggestion)
	pass := pfPost(t, srv, repaired)
	d2 := pfMustDecide(t, pass)
	if d2.Outcome != "pass" || d2.Attempt != 2 || len(d2.Eligibility.BoundToolKinds) != 1 {
		t.Fatalf("repaired submission: %s %s attempt %d", d2.Outcome, d2.Reason, d2.Attempt)
	}
	d3 := pfMustDecide(t, pfPost(t, srv, repaired))
	if d3.Outcome != "deny" || d3.Reason != "contract: repair_exhausted" || d3.Attempt != 3 {
		t.Fatalf("third submission: %s %s attempt %d", d3.Outcome, d3.Reason, d3.Attempt)
	}

	// Session B: a repair before the restart, the rest after it.
	firstB := pfRead("session:b", "billing")
	if d := pfMustDecide(t, pfPost(t, srv, firstB)); d.Outcome != "repair_required" {
		t.Fatalf("session b first submission: %s", d.Outcome)
	}

	if code := srv.Stop(); code != 0 {
		t.Fatalf("autonomy serve exited %d after SIGTERM", code)
	}
	srv = srv.Restart()

	if d := pfMustDecide(t, pfPost(t, srv, repaired)); d.Reason != "contract: repair_exhausted" || d.Attempt != 4 {
		t.Errorf("session a after restart: %s attempt %d, want repair_exhausted attempt 4", d.Reason, d.Attempt)
	}
	repairedB := pfRead("session:b", "payments")
	if d := pfMustDecide(t, pfPost(t, srv, repairedB)); d.Outcome != "pass" || d.Attempt != 2 {
		t.Errorf("session b repaired after restart: %s %s attempt %d, want pass attempt 2", d.Outcome, d.Reason, d.Attempt)
	}
	if d := pfMustDecide(t, pfPost(t, srv, repairedB)); d.Reason != "contract: repair_exhausted" || d.Attempt != 3 {
		t.Errorf("session b third submission: %s attempt %d, want repair_exhausted attempt 3", d.Reason, d.Attempt)
	}

	got := pfGet(t, srv, "/v1/preflight/"+d2.PreflightID)
	if got.status != http.StatusOK || !bytes.Equal(got.body, pass.body) {
		t.Errorf("GET /v1/preflight/%s after restart: %d, bytes differ:\n%s\n%s", d2.PreflightID, got.status, got.body, pass.body)
	}
	pfMustFail(t, pfGet(t, srv, "/v1/preflight/pf_unknownunknownunknown"), http.StatusNotFound, "not-found")
}

// TestPreflightIdempotencySurvivesRestart: the same key and body replay the
// recorded decision with Idempotent-Replayed: true; the same key with
// another body is 409; both hold after a restart.
func TestPreflightIdempotencySurvivesRestart(t *testing.T) {
	srv := StartServer(t, ServeOptions{Mode: "enforce"})
	body := pfEnvelopeRead(t, "session:idem", "idem-e2e-1", "read case 882")
	other := pfEnvelopeRead(t, "session:idem", "idem-e2e-1", "read case 882, but differently")

	first := pfPost(t, srv, body)
	d := pfMustDecide(t, first)
	if d.Outcome != "pass" || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %s %s, Idempotent-Replayed %q", d.Outcome, d.Reason, first.header.Get("Idempotent-Replayed"))
	}
	check := func(t *testing.T, srv *Server) {
		t.Helper()
		again := pfPost(t, srv, body)
		if again.status != http.StatusOK || again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.body, first.body) {
			t.Errorf("same key, same body: %d replayed=%q\n%s\nwant\n%s", again.status, again.header.Get("Idempotent-Replayed"), again.body, first.body)
		}
		path, retryable := pfMustFail(t, pfPost(t, srv, other), http.StatusConflict, "idempotency-key-reused")
		if path != "/context/request/idempotencyKey" || retryable {
			t.Errorf("reused key: path %q retryable %v", path, retryable)
		}
		got := pfGet(t, srv, "/v1/preflight/"+d.PreflightID)
		if got.status != http.StatusOK || !bytes.Equal(got.body, first.body) {
			t.Errorf("GET /v1/preflight/%s: %d, bytes differ from the POST answer", d.PreflightID, got.status)
		}
	}
	check(t, srv)
	srv.Kill() // no graceful shutdown: the record was durable before the answer
	srv = srv.Restart()
	check(t, srv)
}

// TestPreflightAdmitsOnceThroughCheck: a passing preflight's id admits its
// tool kind once through the real gRPC Check; the audit join then shows
// the autonomy.preflight frame followed by the autonomy.decision frame.
func TestPreflightAdmitsOnceThroughCheck(t *testing.T) {
	srv := StartServer(t, ServeOptions{Mode: "enforce"})
	body, _ := json.Marshal(map[string]any{
		"intent": map[string]any{"summary": "echo once", "plan_hash": "plan-echo-once"},
		"plan": map[string]any{"steps": []any{map[string]any{
			"id": "e1", "kind": "tool.echo", "args": map[string]any{"text": "hello"}}}},
		"context": map[string]any{"actor": map[string]any{"id": "user:example", "session_id": "session:echo-once"}},
	})
	d := pfMustDecide(t, pfPost(t, srv, body))
	if d.Outcome != "pass" {
		t.Fatalf("preflight: %s %s", d.Outcome, d.Reason)
	}
	authz := srv.Authz(t)
	check := func(requestID string) (codes.Code, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := authz.Check(ctx, ToolCheck("tool.echo", map[string]any{"text": "hello"}, requestID,
			map[string]string{"x-autonomy-preflight-id": d.PreflightID}))
		if err != nil {
			t.Fatalf("Check %s: %v", requestID, err)
		}
		return codes.Code(resp.GetStatus().GetCode()), resp.GetDeniedResponse().GetBody()
	}
	if code, deny := check("req-pf-1"); code != codes.OK {
		t.Fatalf("first Check: %v %s", code, deny)
	}
	if code, deny := check("req-pf-2"); code != codes.PermissionDenied || !strings.Contains(deny, "contract: preflight_replay") {
		t.Errorf("second Check: %v %s, want a replay deny", code, deny)
	}

	a := pfGet(t, srv, "/v1/audit/"+d.AuditID)
	if a.status != http.StatusOK {
		t.Fatalf("GET /v1/audit/%s: %d %s", d.AuditID, a.status, a.body)
	}
	var join struct {
		AuditID string `json:"audit_id"`
		Frames  []struct {
			Seq       uint64 `json:"seq"`
			Kind      string `json:"kind"`
			Timestamp string `json:"timestamp"`
			AuditID   string `json:"audit_id"`
			Attrs     struct {
				Outcome     string `json:"outcome"`
				PreflightID string `json:"preflight_id"`
				ToolKind    string `json:"tool_kind"`
				RequestID   string `json:"request_id"`
			} `json:"attrs"`
		} `json:"frames"`
	}
	if err := json.Unmarshal(a.body, &join); err != nil {
		t.Fatal(err)
	}
	if join.AuditID != d.AuditID || len(join.Frames) < 2 {
		t.Fatalf("audit join: %s", a.body)
	}
	pf, dec := join.Frames[0], join.Frames[1]
	if pf.Kind != "autonomy.preflight" || pf.Attrs.Outcome != "pass" || pf.Attrs.PreflightID != d.PreflightID {
		t.Errorf("first frame: %+v", pf)
	}
	if dec.Kind != "autonomy.decision" || dec.Attrs.Outcome != "allow" || dec.Attrs.PreflightID != d.PreflightID ||
		dec.Attrs.ToolKind != "tool.echo" || dec.Attrs.RequestID != "req-pf-1" {
		t.Errorf("second frame: %+v", dec)
	}
	var prev time.Time
	for i, f := range join.Frames {
		ts, err := time.Parse(time.RFC3339Nano, f.Timestamp)
		if err != nil || f.AuditID != d.AuditID || ts.Before(prev) {
			t.Errorf("frame %d (seq %d): timestamp %q, audit id %q: not in timestamp order under the audit id", i, f.Seq, f.Timestamp, f.AuditID)
		}
		prev = ts
	}
}

// TestPreflightBadBodiesKeepServing: bad bodies get their status and code
// over real HTTP, and the process keeps deciding afterwards.
func TestPreflightBadBodiesKeepServing(t *testing.T) {
	srv := StartServer(t, ServeOptions{Mode: "enforce"})
	huge := append([]byte(`{"intent":{"summary":"`), bytes.Repeat([]byte("x"), 2<<20)...)
	huge = append(huge, `"}}`...)
	cases := map[string]struct {
		body   []byte
		status int
		code   string
	}{
		"not JSON":       {[]byte(`{"intent":`), 400, "malformed-request"},
		"wrong type":     {[]byte(`{"intent":{"summary":1}}`), 400, "malformed-request"},
		"unknown field":  {[]byte(`{"intent":{"summary":"s"},"extra":true}`), 400, "malformed-request"},
		"2 MiB body":     {huge, 413, "request-too-large"},
		"deeply nested":  {[]byte(`{"intent":{"summary":"s"},"plan":{"steps":[{"id":"s1","kind":"tool.echo","args":{"x":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}}]}}`), 400, "malformed-request"},
		"envelope fault": {[]byte(`{"intent":{"summary":"s"},"plan":{"steps":[]},"context":{"actor":{"id":"u"},"request":{"contractVersion":"aruntime.runtime-request.v9"}}}`), 400, "unsupported-contract-version"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pfMustFail(t, pfPost(t, srv, tc.body), tc.status, tc.code)
		})
	}
	if d := pfMustDecide(t, pfPost(t, srv, pfRead("session:after-bad", "payments"))); d.Outcome != "pass" {
		t.Errorf("good request after bad bodies: %s %s", d.Outcome, d.Reason)
	}
}

// TestPreflightDisabledMode: with mode disabled the API answers 503
// preflight-disabled and records nothing.
func TestPreflightDisabledMode(t *testing.T) {
	srv := StartServer(t, ServeOptions{Mode: "disabled"})
	a := pfPost(t, srv, pfRead("session:disabled", "payments"))
	_, retryable := pfMustFail(t, a, http.StatusServiceUnavailable, "preflight-disabled")
	if retryable || a.header.Get("Retry-After") != "" {
		t.Errorf("preflight-disabled is retryable (body %v, Retry-After %q): it lasts until the mode changes", retryable, a.header.Get("Retry-After"))
	}
}

// TestPreflightSameKeyRace races two POSTs with one idempotency key against
// the real process: never two different preflight ids.
func TestPreflightSameKeyRace(t *testing.T) {
	srv := StartServer(t, ServeOptions{Mode: "enforce"})
	for i := range 10 {
		body := pfEnvelopeRead(t, fmt.Sprintf("session:race:%d", i), fmt.Sprintf("idem-race-%d", i), "race")
		var wg sync.WaitGroup
		var as [2]pfAnswer
		start := make(chan struct{})
		for j := range as {
			wg.Go(func() { <-start; as[j] = pfPost(t, srv, body) })
		}
		close(start)
		wg.Wait()
		ids := map[string]bool{}
		for _, a := range as {
			switch a.status {
			case http.StatusOK:
				ids[pfMustDecide(t, a).PreflightID] = true
			case http.StatusConflict:
				if _, retryable := pfMustFail(t, a, http.StatusConflict, "idempotency-in-progress"); !retryable {
					t.Errorf("round %d: idempotency-in-progress not retryable", i)
				}
			default:
				t.Errorf("round %d: status %d %s", i, a.status, a.body)
			}
		}
		if len(ids) != 1 {
			t.Errorf("round %d: %d distinct preflight ids, want 1", i, len(ids))
		}
	}
}
