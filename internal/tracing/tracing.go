package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"

	"github.com/contractrefine/autonomy/internal/observe"
)

var (
	// ErrEndpoint reports an otlp_endpoint that is not an http:// or
	// https:// URL with a host.
	ErrEndpoint = errors.New("tracing: otlp_endpoint must be an http:// or https:// URL with a host")
)

// Span attribute keys the service sets. They are part of what operators
// query on, so they do not change.
const (
	AttrAuditID        = attribute.Key("autonomy.audit_id")
	AttrPreflightID    = attribute.Key("autonomy.preflight_id")
	AttrOutcome        = attribute.Key("autonomy.outcome")
	AttrReason         = attribute.Key("autonomy.reason")
	AttrEnforced       = attribute.Key("autonomy.enforced")
	AttrMode           = attribute.Key("autonomy.mode")
	AttrToolKind       = attribute.Key("autonomy.tool_kind")
	AttrStatus         = attribute.Key("autonomy.status")
	AttrAttempt        = attribute.Key("autonomy.attempt")
	AttrBundleRevision = attribute.Key("autonomy.bundle_revision")
)

// SpanCheck is the name of the span around one gate decision.
const SpanCheck = "autonomy.check"

// ServiceName is the service.name resource attribute.
const ServiceName = "autonomy"

const scopeName = "github.com/contractrefine/autonomy"

// Options configures New. The zero value is tracing off.
type Options struct {
	// Endpoint is tracing.otlp_endpoint, the OTLP/gRPC collector as a URL:
	// http://host:4317 for plaintext, https://host:4317 for TLS. Empty means
	// tracing is off (unless TracerProvider is set).
	Endpoint string
	// SampleRatio is the share of new traces sampled, 0 to 1. A request that
	// arrives with a sampled traceparent is always sampled (parent-based),
	// so 0 means "trace only what the caller traces".
	SampleRatio float64
	// ServiceVersion is the service.version resource attribute.
	ServiceVersion string
	// TracerProvider, when set, is used instead of an exporter to Endpoint;
	// tests pass an SDK provider that records spans in memory. Shutdown
	// leaves it alone: its owner shuts it down.
	TracerProvider trace.TracerProvider
}

// Tracing holds the tracer provider and propagator and instruments the
// service's entry points with them.
type Tracing struct {
	enabled  bool
	tp       trace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	shutdown func(context.Context) error
}

// New returns tracing as configured: off (nothing is instrumented) when
// neither Endpoint nor TracerProvider is set. The OTLP exporter connects
// lazily, so a collector that is down delays nothing here; spans are
// exported in batches in the background.
func New(ctx context.Context, o Options) (*Tracing, error) {
	t := &Tracing{tp: tracenoop.NewTracerProvider(), prop: propagation.TraceContext{},
		shutdown: func(context.Context) error { return nil }}
	switch {
	case o.TracerProvider != nil:
		t.enabled, t.tp = true, o.TracerProvider
	case o.Endpoint != "":
		if err := CheckEndpoint(o.Endpoint); err != nil {
			return nil, err
		}
		exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(o.Endpoint))
		if err != nil {
			return nil, fmt.Errorf("tracing: otlp exporter %s: %w", o.Endpoint, err)
		}
		res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
			attribute.String("service.name", ServiceName),
			attribute.String("service.version", o.ServiceVersion)))
		if err != nil {
			return nil, fmt.Errorf("tracing: resource: %w", err)
		}
		sdk := sdktrace.NewTracerProvider(
			sdktrace.WithBatcher(exp),
			sdktrace.WithResource(res),
			sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.SampleRatio))))
		t.enabled, t.tp, t.shutdown = true, sdk, sdk.Shutdown
	}
	t.tracer = t.tp.Tracer(scopeName)
	return t, nil
}

// CheckEndpoint validates an otlp_endpoint value.
func CheckEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w, got %q", ErrEndpoint, endpoint)
	}
	return nil
}

// Enabled reports whether spans are being made.
func (t *Tracing) Enabled() bool { return t.enabled }

// Shutdown flushes the spans still queued and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error { return t.shutdown(ctx) }

// Propagator returns the W3C trace-context propagator in use.
func (t *Tracing) Propagator() propagation.TextMapPropagator { return t.prop }

// untraced are the HTTP paths probes and scrapers hit every few seconds;
// spans for them would drown the ones that matter.
var untraced = map[string]bool{"/metrics": true, "/healthz": true, "/readyz": true}

// Handler wraps an HTTP handler so each request gets a server span, a child
// of the caller's span when the request carries a traceparent header.
func (t *Tracing) Handler(h http.Handler) http.Handler {
	if !t.enabled {
		return h
	}
	return otelhttp.NewHandler(h, "http",
		otelhttp.WithTracerProvider(t.tp),
		otelhttp.WithPropagators(t.prop),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelhttp.WithFilter(func(r *http.Request) bool { return !untraced[r.URL.Path] }),
		otelhttp.WithSpanNameFormatter(spanName))
}

// spanName names a server span by its route pattern once the mux has
// matched one, never by the raw path: paths carry ids, and span names must
// stay a small set.
func spanName(_ string, r *http.Request) string {
	if r.Pattern == "" {
		return r.Method
	}
	if strings.Contains(r.Pattern, " ") {
		return r.Pattern
	}
	return r.Method + " " + r.Pattern
}

// GRPCServerOptions returns the options that give every gRPC call except
// health checks a server span, continuing the trace in the call's
// traceparent metadata. It is nil when tracing is off.
func (t *Tracing) GRPCServerOptions() []grpc.ServerOption {
	if !t.enabled {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(t.tp),
		otelgrpc.WithPropagators(t.prop),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithFilter(filters.Not(filters.HealthCheck()))))}
}

// StartCheck starts the autonomy.check span of one gate decision
// (binding.CheckObserver). The gate runs with the span in its context, so
// its log lines carry the span's ids.
func (t *Tracing) StartCheck(ctx context.Context) context.Context {
	if !t.enabled {
		return ctx
	}
	ctx, _ = t.tracer.Start(ctx, SpanCheck, trace.WithSpanKind(trace.SpanKindInternal))
	return ctx
}

// EndCheck puts the verdict on the span StartCheck started and ends it.
func (t *Tracing) EndCheck(ctx context.Context, c observe.Check) {
	if !t.enabled {
		return // ctx holds the caller's span, not one of StartCheck's
	}
	span := trace.SpanFromContext(ctx)
	defer span.End()
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(
		AttrAuditID.String(c.AuditID),
		AttrOutcome.String(c.Outcome),
		AttrReason.String(c.Reason),
		AttrEnforced.Bool(c.Enforced),
		AttrMode.String(c.Mode),
		AttrStatus.Int(c.Status),
		AttrToolKind.String(c.ToolKind))
	if c.PreflightID != "" {
		span.SetAttributes(AttrPreflightID.String(c.PreflightID))
	}
	if c.Status >= http.StatusInternalServerError {
		span.SetStatus(codes.Error, c.Reason)
	}
}

// Preflight puts a preflight verdict on the span in ctx (the HTTP server
// span of POST /v1/preflight; submit.Observer). Without a recording span it
// does nothing, so callers need not know whether tracing is on.
func (t *Tracing) Preflight(ctx context.Context, p observe.Preflight) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(
		AttrAuditID.String(p.AuditID),
		AttrPreflightID.String(p.PreflightID),
		AttrOutcome.String(p.Outcome),
		AttrReason.String(p.Reason),
		AttrAttempt.Int(p.Attempt),
		AttrBundleRevision.String(p.BundleRevision))
}
