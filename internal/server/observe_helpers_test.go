package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/contractrefine/autonomy/internal/config"
	"github.com/contractrefine/autonomy/internal/tracing"
)

// syncBuffer is a log sink the server writes from many goroutines while the
// test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the JSON log lines written so far, decoded.
func (b *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	text := b.buf.String()
	b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// withMsg returns the log lines whose msg is msg.
func withMsg(lines []map[string]any, msg string) []map[string]any {
	var out []map[string]any
	for _, l := range lines {
		if l["msg"] == msg {
			out = append(out, l)
		}
	}
	return out
}

// obsEnv is a running server with clients for both listeners.
type obsEnv struct {
	srv    *Server
	addrs  Addrs
	base   string
	logs   *syncBuffer
	cfg    config.Config
	authz  authv3.AuthorizationClient
	health healthpb.HealthClient
}

// obsStart runs a server on loopback ports in enforce mode until the test
// ends. mutate adjusts the configuration; o.Logger is set here.
func obsStart(t *testing.T, mutate func(*config.Config), o Options) *obsEnv {
	t.Helper()
	cfg := config.Default()
	cfg.HTTPAddr, cfg.GRPCAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
	cfg.ContractRefine.Mode = config.ModeEnforce
	if mutate != nil {
		mutate(&cfg)
	}
	logs := &syncBuffer{}
	o.Logger = slog.New(tracing.NewLogHandler(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	bound := make(chan Addrs, 1)
	o.Listening = func(a Addrs) { bound <- a }
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := New(ctx, cfg, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var addrs Addrs
	select {
	case addrs = <-bound:
	case err := <-done:
		cancel()
		t.Fatalf("server stopped before listening: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("server did not listen within 30s")
	}
	conn, err := grpc.NewClient(addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return &obsEnv{srv: srv, addrs: addrs, base: "http://" + addrs.HTTP, logs: logs, cfg: cfg,
		authz: authv3.NewAuthorizationClient(conn), health: healthpb.NewHealthClient(conn)}
}

// preflightBody is a one-step tool.echo plan that passes; secret lands in
// the step's args so tests can look for leaks.
func preflightBody(session, secret string) string {
	return fmt.Sprintf(`{"intent":{"summary":"echo for a test","plan_hash":"plan-%[1]s"},
"plan":{"steps":[{"id":"s1","kind":"tool.echo","zone":"any","args":{"msg":%[2]q}}]},
"context":{"actor":{"id":"user:test","session_id":%[1]q}}}`, session, secret)
}

type preflightAnswer struct {
	PreflightID string `json:"preflight_id"`
	AuditID     string `json:"audit_id"`
	Outcome     string `json:"outcome"`
}

// preflight posts body and returns the decision; it fails the test unless
// the answer is 200.
func (e *obsEnv) preflight(t *testing.T, body string, header http.Header) preflightAnswer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.base+"/v1/preflight", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("preflight: %d %s", resp.StatusCode, b)
	}
	var a preflightAnswer
	if err := json.Unmarshal(b, &a); err != nil {
		t.Fatal(err)
	}
	return a
}

// checkAnswer is what a Check answered.
type checkAnswer struct {
	Status  int // 200, 403 or 503, as Envoy would answer the client
	AuditID string
	Reason  string
}

// toolBody is the gated request body for kind with args.
func toolBody(kind string, args map[string]any) string {
	b, _ := json.Marshal(map[string]any{"kind": kind, "args": args})
	return string(b)
}

// check calls ext_authz Check over gRPC for POST /v1/tool with body and
// headers; md is sent as gRPC metadata (a traceparent, say).
func (e *obsEnv) check(ctx context.Context, body string, headers map[string]string, md ...string) (checkAnswer, error) {
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	resp, err := e.authz.Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: http.MethodPost, Path: "/v1/tool", Headers: headers, Body: body}}}})
	if err != nil {
		return checkAnswer{}, err
	}
	a := checkAnswer{Status: http.StatusOK}
	if meta := resp.GetDynamicMetadata().GetFields()["autonomy"].GetStructValue().GetFields(); meta != nil {
		a.AuditID, a.Reason = meta["audit_id"].GetStringValue(), meta["reason"].GetStringValue()
	}
	if codes.Code(resp.GetStatus().GetCode()) != codes.OK {
		a.Status = int(resp.GetDeniedResponse().GetStatus().GetCode())
	}
	return a, nil
}

// mustCheck is check that fails the test on a transport error.
func (e *obsEnv) mustCheck(t *testing.T, body string, headers map[string]string) checkAnswer {
	t.Helper()
	a, err := e.check(context.Background(), body, headers)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// get fetches path from the HTTP listener.
func (e *obsEnv) get(t *testing.T, path string) (int, []byte) {
	t.Helper()
	status, _, b := e.do(t, http.MethodGet, path, "")
	return status, b
}

// noRedirects is a client that hands back a redirect instead of following
// it, so a test sees the listener's own answer.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// do sends one request to the HTTP listener, path as given (no cleaning,
// no redirect followed), and reads the answer whole.
func (e *obsEnv) do(t *testing.T, method, path, body string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

// scrape reads /metrics and parses it with the Prometheus text parser.
func (e *obsEnv) scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	status, body := e.get(t, "/metrics")
	if status != http.StatusOK {
		t.Fatalf("/metrics: %d %s", status, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// sample finds the series of name whose labels include want. For a
// histogram it returns the sample count, otherwise the value; a series that
// does not exist is 0.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
next:
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	return 0
}

// histogramSum is the sample sum of the histogram series of name with
// labels want.
func histogramSum(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f := fams[name]
	if f == nil {
		return 0
	}
next:
	for _, m := range f.GetMetric() {
		for _, lp := range m.GetLabel() {
			if v, ok := want[lp.GetName()]; ok && v != lp.GetValue() {
				continue next
			}
		}
		return m.GetHistogram().GetSampleSum()
	}
	return 0
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
