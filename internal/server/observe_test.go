package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/extauthz"
	"github.com/contractrefine/autonomy/internal/config"
	"github.com/contractrefine/autonomy/internal/tracing"
	"github.com/contractrefine/autonomy/wal"
)

// TestMetricsMoveByExactlyTheSequence is the "Done when" test: after
// 3 preflights, 2 allows, 1 replay and 1 deny for a missing header, every
// counter and histogram count has moved by exactly that much.
func TestMetricsMoveByExactlyTheSequence(t *testing.T) {
	// No background readiness probes: they would add WAL commits.
	e := obsStart(t, nil, Options{ReadinessInterval: -1})
	before := e.scrape(t)
	// A deny's decision frame may be committed just after the answer (the
	// gate queues it), so each step waits for its write to be committed
	// before the next: then every write is a commit of its own, and the
	// commit counts below are exact rather than a range.
	writes := 0.0
	committed := func(t *testing.T) {
		t.Helper()
		writes++
		eventually(t, fmt.Sprintf("%v WAL writes", writes), func() bool {
			return histogramSum(e.scrape(t), "autonomy_wal_commit_batch_size", nil)-
				histogramSum(before, "autonomy_wal_commit_batch_size", nil) >= writes
		})
	}

	var pf [3]preflightAnswer
	for i := range pf {
		pf[i] = e.preflight(t, preflightBody("session-"+string(rune('a'+i)), "hello"), nil)
		if pf[i].Outcome != "pass" {
			t.Fatalf("preflight %d: outcome %s", i, pf[i].Outcome)
		}
		committed(t)
	}
	echo := toolBody("tool.echo", map[string]any{"msg": "hello"})
	steps := map[string]struct {
		headers map[string]string
		body    string
		status  int
		reason  string
	}{
		"allow 1": {map[string]string{binding.HeaderPreflightID: pf[0].PreflightID, "x-request-id": "r1"}, echo, 200, "contract: passed"},
		"allow 2": {map[string]string{binding.HeaderPreflightID: pf[1].PreflightID, "x-request-id": "r2"}, echo, 200, "contract: passed"},
		"replay":  {map[string]string{binding.HeaderPreflightID: pf[0].PreflightID, "x-request-id": "r3"}, echo, 403, "contract: preflight_replay"},
		"no header": {map[string]string{"x-request-id": "r4"}, toolBody("tool.shell", map[string]any{"cmd": "true"}),
			403, "contract: preflight_required"},
	}
	// In order: the replay must come after the first allow.
	for _, name := range []string{"allow 1", "allow 2", "replay", "no header"} {
		s := steps[name]
		got := e.mustCheck(t, s.body, s.headers)
		if got.Status != s.status || got.Reason != s.reason {
			t.Fatalf("%s: got %d %q, want %d %q", name, got.Status, got.Reason, s.status, s.reason)
		}
		committed(t)
	}
	after := e.scrape(t)

	type L = map[string]string
	want := map[string]struct {
		metric string
		labels L
		delta  float64
	}{
		"preflight pass":          {"autonomy_preflight_decisions_total", L{"outcome": "pass", "reason": "contract: passed"}, 3},
		"preflight repair":        {"autonomy_preflight_decisions_total", L{"outcome": "repair_required"}, 0},
		"preflight latency count": {"autonomy_preflight_duration_seconds", L{"outcome": "pass"}, 3},
		"check allows": {"autonomy_check_decisions_total",
			L{"outcome": "allow", "reason": "contract: passed", "mode": "enforce", "enforced": "true"}, 2},
		"check replay": {"autonomy_check_decisions_total",
			L{"outcome": "deny", "reason": "contract: preflight_replay", "mode": "enforce", "enforced": "true"}, 1},
		"check no header": {"autonomy_check_decisions_total",
			L{"outcome": "deny", "reason": "contract: preflight_required", "mode": "enforce", "enforced": "true"}, 1},
		"check latency allow": {"autonomy_check_duration_seconds", L{"outcome": "allow", "status": "200"}, 2},
		"check latency deny":  {"autonomy_check_duration_seconds", L{"outcome": "deny", "status": "403"}, 2},
		// The preflight API hands the gate each binding it records: the
		// three lookups (two allows, the replay) are hits.
		"cache misses":          {"autonomy_binding_cache_lookups_total", L{"result": "miss"}, 0},
		"cache hits":            {"autonomy_binding_cache_lookups_total", L{"result": "hit"}, 3},
		"wal commits":           {"autonomy_wal_commit_duration_seconds", nil, 7},
		"wal batches":           {"autonomy_wal_commit_batch_size", nil, 7},
		"wal commit errors":     {"autonomy_wal_commit_errors_total", nil, 0},
		"repair sessions":       {"autonomy_repair_sessions_total", nil, 0},
		"unavailable checks":    {"autonomy_errors_total", L{"code": "verifier_unavailable"}, 0},
		"active mode unchanged": {"autonomy_mode", L{"mode": "enforce"}, 0},
	}
	for name, w := range want {
		t.Run(name, func(t *testing.T) {
			if d := sample(after, w.metric, w.labels) - sample(before, w.metric, w.labels); d != w.delta {
				t.Errorf("%s%v moved by %v, want %v", w.metric, w.labels, d, w.delta)
			}
		})
	}
	// Seven sequential writes are seven commits of one write each.
	if d := histogramSum(after, "autonomy_wal_commit_batch_size", nil) - histogramSum(before, "autonomy_wal_commit_batch_size", nil); d != 7 {
		t.Errorf("WAL writes moved by %v, want 7", d)
	}
	if v := sample(after, "autonomy_mode", map[string]string{"mode": "enforce"}); v != 1 {
		t.Errorf("autonomy_mode{mode=enforce} = %v, want 1", v)
	}
	if v := sample(after, "autonomy_mode", map[string]string{"mode": "advisory"}); v != 0 {
		t.Errorf("autonomy_mode{mode=advisory} = %v, want 0", v)
	}
	st, err := os.Stat(filepath.Join(e.cfg.DataDir, wal.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if v := sample(after, "autonomy_wal_size_bytes", nil); v != float64(st.Size()) {
		t.Errorf("autonomy_wal_size_bytes = %v, want the file's %d", v, st.Size())
	}
	rev := e.srv.BundleRevision()
	if v := sample(after, "autonomy_bundle_info", map[string]string{"revision": rev}); v != 1 {
		t.Errorf("autonomy_bundle_info{revision=%s} = %v, want 1", rev, v)
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if after[name] == nil {
			t.Errorf("%s missing: the Go and process collectors belong on the registry", name)
		}
	}
}

// TestReadyzFollowsTheWAL moves the WAL file away (the log can no longer
// write durably: wal.ErrFileGone) and back, and watches /readyz and
// grpc.health.v1 follow.
func TestReadyzFollowsTheWAL(t *testing.T) {
	e := obsStart(t, nil, Options{ReadinessInterval: -1})
	path := filepath.Join(e.cfg.DataDir, wal.FileName)
	aside := path + ".aside"

	expect := func(t *testing.T, wantHTTP int, wantGRPC healthpb.HealthCheckResponse_ServingStatus, wantReason string) {
		t.Helper()
		status, body := e.get(t, "/readyz")
		if status != wantHTTP || !strings.Contains(string(body), wantReason) {
			t.Fatalf("/readyz = %d %s, want %d containing %q", status, body, wantHTTP, wantReason)
		}
		for _, service := range []string{"", authzServiceName, extprocServiceName} {
			resp, err := e.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetStatus() != wantGRPC {
				t.Fatalf("grpc health %q = %s, want %s", service, resp.GetStatus(), wantGRPC)
			}
		}
	}
	steps := []struct {
		name       string
		fault      func() error
		wantHTTP   int
		wantGRPC   healthpb.HealthCheckResponse_ServingStatus
		wantReason string
	}{
		{"ready at start", func() error { return nil }, 200, healthpb.HealthCheckResponse_SERVING, `"ready"`},
		{"file moved away", func() error { return os.Rename(path, aside) }, 503, healthpb.HealthCheckResponse_NOT_SERVING,
			wal.ErrFileGone.Error()},
		{"file back", func() error { return os.Rename(aside, path) }, 200, healthpb.HealthCheckResponse_SERVING, `"ready"`},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if err := s.fault(); err != nil {
				t.Fatal(err)
			}
			expect(t, s.wantHTTP, s.wantGRPC, s.wantReason)
		})
	}
	logs := e.logs.lines(t)
	if len(withMsg(logs, "service unready")) != 1 || len(withMsg(logs, "service ready again")) != 1 {
		t.Errorf("want one unready and one ready-again log line, got logs:\n%s", e.logs)
	}
}

// TestReadyzProbesInTheBackground checks that grpc.health.v1 follows the
// WAL without anyone calling /readyz (Kubernetes gRPC probes only read it).
func TestReadyzProbesInTheBackground(t *testing.T) {
	e := obsStart(t, nil, Options{ReadinessInterval: 20 * time.Millisecond})
	path := filepath.Join(e.cfg.DataDir, wal.FileName)
	status := func() healthpb.HealthCheckResponse_ServingStatus {
		resp, err := e.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: authzServiceName})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	if err := os.Rename(path, path+".aside"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "NOT_SERVING", func() bool { return status() == healthpb.HealthCheckResponse_NOT_SERVING })
	if err := os.Rename(path+".aside", path); err != nil {
		t.Fatal(err)
	}
	eventually(t, "SERVING", func() bool { return status() == healthpb.HealthCheckResponse_SERVING })
}

// TestTracing records spans in memory and checks that each entry point
// continues the caller's W3C trace, that the decision span carries the
// audit id, and that the decision's log line carries the trace id.
func TestTracing(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	e := obsStart(t, nil, Options{TracerProvider: tp, ReadinessInterval: -1})

	echo := toolBody("tool.echo", map[string]any{"msg": "hi"})
	tests := map[string]struct {
		traceID, parentID string
		// call makes the request with traceparent and returns the audit id.
		call     func(t *testing.T, traceparent string) string
		spanName string
		// serverSpan, when set, is the name the span's parent (the HTTP
		// server's span) must have: its route.
		serverSpan string
		logMsg     string
	}{
		"grpc check": {traceID: "0af7651916cd43dd8448eb211c80319c", parentID: "b7ad6b7169203331",
			call: func(t *testing.T, tp string) string {
				a, err := e.check(context.Background(), echo, map[string]string{"x-request-id": "t1"}, "traceparent", tp)
				if err != nil || a.Status != 200 {
					t.Fatalf("check: %+v %v", a, err)
				}
				return a.AuditID
			}, spanName: tracing.SpanCheck, logMsg: "decision"},
		"http check": {traceID: "4bf92f3577b34da6a3ce929d0e0e4736", parentID: "00f067aa0ba902b7",
			call: func(t *testing.T, tp string) string {
				req, _ := http.NewRequest(http.MethodPost, e.base+"/v1/authz/v1/tool", strings.NewReader(echo))
				req.Header.Set("traceparent", tp)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("http check: %d", resp.StatusCode)
				}
				return resp.Header.Get(binding.HeaderAuditID)
			}, spanName: tracing.SpanCheck, serverSpan: "POST /v1/authz/", logMsg: "decision"},
		"preflight": {traceID: "5b8efff798038103d269b633813fc60c", parentID: "eee19b7ec3c1b174",
			call: func(t *testing.T, tp string) string {
				return e.preflight(t, preflightBody("traced", "hi"), http.Header{"Traceparent": {tp}}).AuditID
			}, spanName: "POST /v1/preflight", logMsg: "preflight decided"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			auditID := tc.call(t, "00-"+tc.traceID+"-"+tc.parentID+"-01")
			if auditID == "" {
				t.Fatal("no audit id in the answer")
			}
			// The caller has its answer before the server's own span (the
			// gRPC or HTTP one, parent of the gate's) has ended and reached
			// the exporter; wait until the chain is there, or time runs out.
			var found *tracetest.SpanStub
			var spans tracetest.SpanStubs
			for deadline := time.Now().Add(5 * time.Second); ; {
				found, spans = nil, exp.GetSpans()
				for i := range spans {
					if spans[i].Name != tc.spanName {
						continue
					}
					for _, kv := range spans[i].Attributes {
						if kv.Key == tracing.AttrAuditID && kv.Value.AsString() == auditID {
							found = &spans[i]
						}
					}
				}
				if (found != nil && leadsTo(spans, found, tc.parentID)) || time.Now().After(deadline) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			if found == nil {
				t.Fatalf("no %q span with %s=%s among %d spans", tc.spanName, tracing.AttrAuditID, auditID, len(spans))
			}
			if got := found.SpanContext.TraceID().String(); got != tc.traceID {
				t.Errorf("span trace id %s, want the traceparent's %s", got, tc.traceID)
			}
			// The chain of parents leads back to the caller's span.
			if !leadsTo(spans, found, tc.parentID) {
				t.Errorf("span %s does not descend from the caller's span %s", found.Name, tc.parentID)
			}
			if tc.serverSpan != "" {
				var parent string
				for i := range spans {
					if spans[i].SpanContext.SpanID() == found.Parent.SpanID() {
						parent = spans[i].Name
					}
				}
				if parent != tc.serverSpan {
					t.Errorf("the server span is named %q, want %q (its route)", parent, tc.serverSpan)
				}
			}
			var logged bool
			for _, l := range withMsg(e.logs.lines(t), tc.logMsg) {
				if l["audit_id"] == auditID {
					logged = true
					if l["trace_id"] != tc.traceID || l["span_id"] == nil {
						t.Errorf("log line %v lacks trace_id %s", l, tc.traceID)
					}
				}
			}
			if !logged {
				t.Errorf("no %q log line for audit id %s", tc.logMsg, auditID)
			}
		})
	}
	for _, s := range exp.GetSpans() {
		if strings.Contains(s.Name, "/readyz") || strings.Contains(s.Name, "Health") {
			t.Errorf("probe traffic was traced: %s", s.Name)
		}
	}
}

// leadsTo reports whether following s's parents through spans reaches a
// span whose parent is the remote span id.
func leadsTo(spans tracetest.SpanStubs, s *tracetest.SpanStub, remoteParent string) bool {
	for depth := 0; depth < 8; depth++ {
		parent := s.Parent.SpanID()
		if parent.String() == remoteParent {
			return s.Parent.IsRemote()
		}
		var next *tracetest.SpanStub
		for i := range spans {
			if spans[i].SpanContext.SpanID() == parent {
				next = &spans[i]
			}
		}
		if next == nil {
			return false
		}
		s = next
	}
	return false
}

// TestTracingOffByDefault checks that nothing is instrumented without an
// endpoint: the log lines carry no trace ids even when the caller sends a
// traceparent.
func TestTracingOffByDefault(t *testing.T) {
	e := obsStart(t, nil, Options{ReadinessInterval: -1})
	if e.srv.obs.tracing.Enabled() {
		t.Fatal("tracing is on without tracing.otlp_endpoint")
	}
	a, err := e.check(context.Background(), toolBody("tool.echo", nil), nil,
		"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	if err != nil || a.Status != 200 {
		t.Fatalf("check: %+v %v", a, err)
	}
	for _, l := range withMsg(e.logs.lines(t), "decision") {
		if _, ok := l["trace_id"]; ok {
			t.Errorf("untraced service logged a trace id: %v", l)
		}
	}
}

// TestDecisionLogs checks one info line per decision, with the audit id,
// outcome and reason, and that no raw args reach the log on any path.
func TestDecisionLogs(t *testing.T) {
	e := obsStart(t, nil, Options{ReadinessInterval: -1})
	const secret = "s3cr3t-do-not-log-4711"
	pf := e.preflight(t, preflightBody("logs", secret), nil)
	body := toolBody("tool.echo", map[string]any{"msg": secret})
	calls := map[string]struct {
		headers                 map[string]string
		body                    string
		wantOutcome, wantReason string
	}{
		"bound allow":  {map[string]string{binding.HeaderPreflightID: pf.PreflightID, "x-request-id": "a"}, body, "allow", "contract: passed"},
		"policy allow": {map[string]string{"x-request-id": "b"}, body, "allow", "policy: allowed"},
		"unknown kind": {nil, toolBody("tool.unknown", map[string]any{"token": secret}), "deny", "policy: unknown_tool_kind"},
		"bad header": {map[string]string{binding.HeaderPreflightID: "nope"}, toolBody("tool.shell", map[string]any{"cmd": secret}),
			"deny", "contract: preflight_required"},
		"malformed": {nil, `{"kind":"tool.echo","args":"` + secret + `"}`, "deny", "gate: malformed_tool_call"},
	}
	byAudit := map[string]string{}
	for name, c := range calls {
		a := e.mustCheck(t, c.body, c.headers)
		byAudit[a.AuditID] = name
	}
	if len(byAudit) != len(calls) {
		t.Fatalf("want %d distinct audit ids, got %v", len(calls), byAudit)
	}
	if strings.Contains(e.logs.String(), secret) {
		t.Fatalf("raw args reached the log:\n%s", e.logs)
	}
	lines := withMsg(e.logs.lines(t), "decision")
	if len(lines) != len(calls) {
		t.Fatalf("%d decision lines for %d decisions:\n%s", len(lines), len(calls), e.logs)
	}
	for _, l := range lines {
		name, ok := byAudit[l["audit_id"].(string)]
		if !ok {
			t.Errorf("decision line with an unknown audit id: %v", l)
			continue
		}
		c := calls[name]
		if l["level"] != "INFO" || l["outcome"] != c.wantOutcome || l["reason"] != c.wantReason {
			t.Errorf("%s: line %v, want INFO %s %q", name, l, c.wantOutcome, c.wantReason)
		}
		delete(byAudit, l["audit_id"].(string))
	}
	if n := len(withMsg(e.logs.lines(t), "preflight decided")); n != 1 {
		t.Errorf("%d preflight lines for one preflight", n)
	}
}

// TestDecisionLogsOff: with log.decisions false no decision or preflight
// line is logged, and the decisions are in the WAL all the same.
func TestDecisionLogsOff(t *testing.T) {
	e := obsStart(t, func(c *config.Config) { c.Log.Decisions = false }, Options{ReadinessInterval: -1})
	pf := e.preflight(t, preflightBody("quiet", "hi"), nil)
	allow := e.mustCheck(t, toolBody("tool.echo", map[string]any{"msg": "hi"}),
		map[string]string{binding.HeaderPreflightID: pf.PreflightID, "x-request-id": "q1"})
	deny := e.mustCheck(t, toolBody("tool.shell", map[string]any{"cmd": "ls"}), nil)
	for _, msg := range []string{"decision", "preflight decided"} {
		if n := len(withMsg(e.logs.lines(t), msg)); n != 0 {
			t.Errorf("%d %q lines with log.decisions false:\n%s", n, msg, e.logs)
		}
	}
	for _, id := range []string{allow.AuditID, deny.AuditID} {
		frames, err := e.srv.db.AuditFrames(context.Background(), id)
		if err != nil || len(frames) == 0 || frames[len(frames)-1].Kind != wal.KindDecision {
			t.Errorf("audit %s: frames %+v, %v; want its decision frame", id, frames, err)
		}
	}
}

// TestErrorAnswersAreCounted shows that every error answer of the HTTP
// listener is JSON and counted in autonomy_errors_total by its code: a
// path no endpoint has, and a read refused for want of a token.
func TestErrorAnswersAreCounted(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(tokens, []byte("tokens:\n  - {name: ops, tenant: '*', token: ops-token-0123456789abcdef}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := obsStart(t, func(c *config.Config) { c.Access.TokensFile = tokens }, Options{ReadinessInterval: -1})
	before := e.scrape(t)
	for _, tc := range []struct {
		path   string
		status int
		code   string
	}{
		{"/v1/nonexistent", http.StatusNotFound, "not-found"},
		{"/metrics/x", http.StatusNotFound, "not-found"},
		{"/v1/audit/au_0123456789abcdef", http.StatusUnauthorized, "unauthorized"},
	} {
		status, body := e.get(t, tc.path)
		var got struct {
			Error struct{ Code string } `json:"error"`
		}
		if status != tc.status || json.Unmarshal(body, &got) != nil || got.Error.Code != tc.code {
			t.Errorf("GET %s: %d %s, want %d with code %s", tc.path, status, body, tc.status, tc.code)
		}
	}
	if status, h, _ := e.do(t, http.MethodPost, "/healthz", ""); status != http.StatusMethodNotAllowed || h.Get("Allow") != "GET, HEAD" ||
		h.Get("Content-Type") != "application/json" {
		t.Errorf("POST /healthz: %d, Allow %q, Content-Type %q", status, h.Get("Allow"), h.Get("Content-Type"))
	}
	after := e.scrape(t)
	for code, want := range map[string]float64{"not-found": 2, "unauthorized": 1, "method-not-allowed": 1} {
		l := map[string]string{"code": code}
		if d := sample(after, "autonomy_errors_total", l) - sample(before, "autonomy_errors_total", l); d != want {
			t.Errorf("autonomy_errors_total{code=%s} moved by %v, want %v", code, d, want)
		}
	}
}

// TestCheckBodyFollowsTheBodyLimit: a CheckRequest carrying a body within
// http.max_body_bytes is decided even above grpc's own 4 MiB default, and
// one far above the limit is refused by the transport, never allowed.
func TestCheckBodyFollowsTheBodyLimit(t *testing.T) {
	e := obsStart(t, func(c *config.Config) { c.HTTP.MaxBodyBytes = 6 << 20 }, Options{ReadinessInterval: -1})
	pad := strings.Repeat("x", 5<<20)
	got := e.mustCheck(t, toolBody("tool.shell", map[string]any{"pad": pad}), map[string]string{"x-request-id": "big"})
	if got.Status != http.StatusForbidden || got.Reason != "contract: preflight_required" {
		t.Errorf("5 MiB body: %d %q, want the ladder's deny", got.Status, got.Reason)
	}
	huge := strings.Repeat("x", 8<<20)
	if a, err := e.check(context.Background(), toolBody("tool.echo", map[string]any{"pad": huge}), nil); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("8 MiB body: %+v, %v; want ResourceExhausted from the transport", a, err)
	}
}

// TestNoRedirects: the HTTP listener answers every path itself. A path the
// ServeMux would clean (doubled slashes, dot segments) gets the JSON 404,
// not a 307 with an HTML body, and under the HTTP check's prefix it is
// decided like any other checked path: a redirect there would reach the
// client through the proxy, with no decision and no audit id.
func TestNoRedirects(t *testing.T) {
	e := obsStart(t, nil, Options{ReadinessInterval: -1})
	type errorBody struct {
		Error struct {
			Code    string `json:"code"`
			Reason  string `json:"reason"`
			AuditID string `json:"audit_id"`
		} `json:"error"`
	}
	for _, p := range []string{"/v1/preflight//pf_x", "/v1/./audit/au_x", "//v1/audit/au_x", "/v1/audit", "/v1/preflight/pf_x/../pf_y"} {
		status, h, b := e.do(t, http.MethodGet, p, "")
		var got errorBody
		if status != http.StatusNotFound || h.Get("Content-Type") != "application/json" || json.Unmarshal(b, &got) != nil || got.Error.Code != "not-found" {
			t.Errorf("GET %s: %d %s %s, want the JSON 404", p, status, h.Get("Location"), b)
		}
	}
	if status, h, _ := e.do(t, http.MethodPut, "/ui/audit/au_x", ""); status != http.StatusMethodNotAllowed || h.Get("Allow") != "GET, HEAD" {
		t.Errorf("PUT /ui/audit/au_x: %d, Allow %q; want 405 with Allow: GET, HEAD", status, h.Get("Allow"))
	}
	call := `{"kind":"tool.shell","args":{"cmd":"id"}}`
	for _, p := range []string{"/v1/tool", "/v1//tool", "//v1/tool", "/v1/./tool", "/v1/x/../tool"} {
		status, _, b := e.do(t, http.MethodPost, extauthz.HTTPPrefix+p, call)
		var got errorBody
		if status != http.StatusForbidden || json.Unmarshal(b, &got) != nil ||
			got.Error.Reason != "contract: preflight_required" || got.Error.AuditID == "" {
			t.Errorf("check of POST %s: %d %s, want the gate's 403 preflight_required with an audit id", p, status, b)
		}
	}
}

// TestGRPCHandshakeTimeout: a connection to the gRPC listener that never
// finishes its HTTP/2 handshake is closed after http.read_header_timeout,
// as a slow client of the HTTP listener is, not held for grpc's 120 s.
func TestGRPCHandshakeTimeout(t *testing.T) {
	e := obsStart(t, func(c *config.Config) { c.HTTP.ReadHeaderTimeout = 200 * time.Millisecond }, Options{ReadinessInterval: -1})
	conn, err := net.Dial("tcp", e.addrs.GRPC)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("PRI * HTTP/2.0\r\n")); err != nil { // half a preface
		t.Fatal(err)
	}
	// Far above the timeout, far below grpc's default.
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err = io.Copy(io.Discard, conn)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the server still held the stalled connection after 30s")
	}
}

// TestAnswerWindow: the gateway gives up on the upstream's answer, and a
// preflight on the other submissions of its session, a second before
// http.write_timeout cuts the client off, so their own answer can be
// written; half of it when the timeout is that short.
func TestAnswerWindow(t *testing.T) {
	for write, want := range map[time.Duration]time.Duration{
		30 * time.Second: 29 * time.Second, time.Second: 500 * time.Millisecond, 0: 0,
	} {
		if got := answerWindow(write); got != want {
			t.Errorf("answerWindow(%v) = %v, want %v", write, got, want)
		}
	}
}

// TestConcurrentProbesShareOne: readiness probes that arrive while one
// runs (a /readyz beside the background probe) share its answer rather
// than each waiting to run its own: eight at once on a slow policy make
// far fewer than eight probe writes to the WAL.
func TestConcurrentProbesShareOne(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"policy.rego": "package autonomy\n\nimport rego.v1\n\nallow if count(numbers.range(1, 400000)) > 0\n",
		"data.yaml":   "autonomy:\n  capabilities:\n    tool.echo: {zones: [\"*\"]}\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e := obsStart(t, func(c *config.Config) { c.Bundle, c.Policy.Timeout = dir, 10*time.Second },
		Options{ReadinessInterval: -1})
	before := histogramSum(e.scrape(t), "autonomy_wal_commit_batch_size", nil)
	const n = 8
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := e.srv.probe(context.Background()); err != nil {
				t.Errorf("probe: %v", err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if writes := histogramSum(e.scrape(t), "autonomy_wal_commit_batch_size", nil) - before; writes < 1 || writes >= n {
		t.Fatalf("%d concurrent probes made %.0f probe writes, want at least one and fewer than %d", n, writes, n)
	}
}
