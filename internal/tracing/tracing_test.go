package tracing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/contractrefine/autonomy/internal/observe"
)

func TestLogHandlerAddsTraceIDs(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	spanCtx, span := tp.Tracer("test").Start(context.Background(), "op")
	defer span.End()
	tests := map[string]struct {
		ctx      context.Context
		log      func(l *slog.Logger, ctx context.Context)
		wantIDs  bool
		wantAttr string
	}{
		"context with a span": {spanCtx, func(l *slog.Logger, ctx context.Context) { l.InfoContext(ctx, "m", "k", "v") }, true, "k"},
		"logger with attrs":   {spanCtx, func(l *slog.Logger, ctx context.Context) { l.With("w", 1).InfoContext(ctx, "m") }, true, "w"},
		"no span":             {context.Background(), func(l *slog.Logger, ctx context.Context) { l.InfoContext(ctx, "m", "k", "v") }, false, "k"},
		"no context":          {spanCtx, func(l *slog.Logger, _ context.Context) { l.Info("m", "k", "v") }, false, "k"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			l := slog.New(NewLogHandler(slog.NewJSONHandler(&buf, nil)))
			tc.log(l, tc.ctx)
			var line map[string]any
			if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
				t.Fatal(err)
			}
			if _, ok := line[tc.wantAttr]; !ok {
				t.Errorf("line %v lost attribute %s", line, tc.wantAttr)
			}
			sc := span.SpanContext()
			gotTrace, hasTrace := line["trace_id"]
			if hasTrace != tc.wantIDs {
				t.Fatalf("line %v: trace_id present %v, want %v", line, hasTrace, tc.wantIDs)
			}
			if tc.wantIDs && (gotTrace != sc.TraceID().String() || line["span_id"] != sc.SpanID().String()) {
				t.Errorf("line %v, want trace %s span %s", line, sc.TraceID(), sc.SpanID())
			}
		})
	}
}

func TestCheckEndpoint(t *testing.T) {
	tests := map[string]struct {
		endpoint string
		ok       bool
	}{
		"plaintext":        {"http://otel-collector:4317", true},
		"tls":              {"https://collector.example:4317", true},
		"host and port":    {"otel-collector:4317", false},
		"other scheme":     {"grpc://collector:4317", false},
		"no host":          {"http://", false},
		"not a URL at all": {"::", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := CheckEndpoint(tc.endpoint)
			if (err == nil) != tc.ok {
				t.Fatalf("CheckEndpoint(%q) = %v, want ok %v", tc.endpoint, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrEndpoint) {
				t.Errorf("error %v is not ErrEndpoint", err)
			}
		})
	}
}

func TestOffByDefault(t *testing.T) {
	tr, err := New(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Enabled() {
		t.Fatal("tracing on with no endpoint")
	}
	type key struct{}
	ctx := context.WithValue(context.Background(), key{}, 1)
	if got := tr.StartCheck(ctx); got != ctx {
		t.Error("StartCheck changed the context with tracing off")
	}
	if tr.GRPCServerOptions() != nil {
		t.Error("gRPC options with tracing off")
	}
}

// check runs gate as the gate runs a check with tr as its CheckObserver.
func check(tr *Tracing, ctx context.Context, gate func(ctx context.Context) observe.Check) {
	ctx = tr.StartCheck(ctx)
	tr.EndCheck(ctx, gate(ctx))
}

func TestCheckerSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	tr, err := New(context.Background(), Options{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	var inner trace.SpanContext
	gate := func(ctx context.Context) observe.Check {
		inner = trace.SpanContextFromContext(ctx)
		return observe.Check{Status: 503, Outcome: "deny", Reason: "contract: verifier_unavailable",
			Enforced: true, AuditID: "au_0123456789abcdef", Mode: "enforce"}
	}
	// The caller's W3C context, as the gRPC or HTTP layer would extract it.
	carrier := propagation.MapCarrier{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	ctx := tr.Propagator().Extract(context.Background(), carrier)
	check(tr, ctx, gate)
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if s.Name != SpanCheck || s.SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" ||
		s.Parent.SpanID().String() != "b7ad6b7169203331" {
		t.Errorf("span %s trace %s parent %s", s.Name, s.SpanContext.TraceID(), s.Parent.SpanID())
	}
	if inner.SpanID() != s.SpanContext.SpanID() {
		t.Error("the gate did not run inside the check span")
	}
	attrs := map[string]string{}
	for _, kv := range s.Attributes {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	if attrs[string(AttrAuditID)] != "au_0123456789abcdef" || attrs[string(AttrOutcome)] != "deny" ||
		attrs[string(AttrStatus)] != "503" {
		t.Errorf("attributes %v", attrs)
	}
	if s.Status.Code.String() != "Error" {
		t.Errorf("status %v, want Error for a 503", s.Status)
	}
}

// collector is an OTLP/gRPC trace collector that keeps what it receives.
type collector struct {
	collectorpb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names []string
	attrs map[string]string
}

func (c *collector) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, kv := range rs.GetResource().GetAttributes() {
			c.attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.names = append(c.names, s.GetName())
			}
		}
	}
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// TestExportsToTheConfiguredEndpoint runs a real OTLP/gRPC collector on
// loopback and checks what reaches it through tracing.otlp_endpoint by
// Shutdown: the span, with the service's resource attributes, sampled as
// tracing.sample_ratio and the caller's traceparent say.
func TestExportsToTheConfiguredEndpoint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := &collector{}
	g := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(g, col)
	go g.Serve(ln)
	defer g.Stop()

	const sampledParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	tests := map[string]struct {
		ratio       float64
		traceparent string
		wantSpans   int
	}{
		"ratio 1 starts traces":                {1, "", 1},
		"ratio 0 starts none":                  {0, "", 0},
		"ratio 0 continues a sampled caller":   {0, sampledParent, 1},
		"ratio 1 respects an unsampled caller": {1, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			col.mu.Lock()
			col.names, col.attrs = nil, map[string]string{}
			col.mu.Unlock()
			tr, err := New(context.Background(), Options{Endpoint: "http://" + ln.Addr().String(),
				SampleRatio: tc.ratio, ServiceVersion: "v-test"})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if tc.traceparent != "" {
				ctx = tr.Propagator().Extract(ctx, propagation.MapCarrier{"traceparent": tc.traceparent})
			}
			check(tr, ctx, func(context.Context) observe.Check {
				return observe.Check{Outcome: "allow", Status: 200, AuditID: "au_exported000000000"}
			})
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			col.mu.Lock()
			defer col.mu.Unlock()
			if len(col.names) != tc.wantSpans {
				t.Fatalf("collector got spans %v, want %d", col.names, tc.wantSpans)
			}
			if tc.wantSpans == 0 {
				return
			}
			if col.names[0] != SpanCheck {
				t.Errorf("span %q, want %s", col.names[0], SpanCheck)
			}
			if col.attrs["service.name"] != ServiceName || col.attrs["service.version"] != "v-test" {
				t.Errorf("resource attributes %v", col.attrs)
			}
		})
	}
}

// BenchmarkChecker measures what tracing adds to one decision: a sampled
// autonomy.check span with its attributes (no exporter, so only the
// span's own cost is counted).
func BenchmarkChecker(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	tr, err := New(context.Background(), Options{TracerProvider: tp})
	if err != nil {
		b.Fatal(err)
	}
	c := observe.Check{Outcome: "allow", Status: 200, Reason: "contract: passed", AuditID: "au_0123456789abcdef",
		PreflightID: "pf_0123456789abcdef", Mode: "enforce", ToolKind: "tool.echo"}
	gate := func(context.Context) observe.Check { return c }
	b.ReportAllocs()
	for b.Loop() {
		check(tr, context.Background(), gate)
	}
}

// BenchmarkLogHandler measures the decision log line through the trace-id
// handler, with a span in the context.
func BenchmarkLogHandler(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("bench").Start(context.Background(), "op")
	defer span.End()
	l := slog.New(NewLogHandler(slog.NewJSONHandler(io.Discard, nil)))
	b.ReportAllocs()
	for b.Loop() {
		l.LogAttrs(ctx, slog.LevelInfo, "decision", slog.String("audit_id", "au_0123456789abcdef"),
			slog.String("outcome", "allow"), slog.String("reason", "contract: passed"), slog.Bool("enforced", true),
			slog.Int("status", 200), slog.String("mode", "enforce"), slog.String("preflight_id", "pf_0123456789abcdef"),
			slog.String("tool_kind", "tool.echo"), slog.String("request_id", "r-1"))
	}
}
