// Package tracing sets up OpenTelemetry tracing for the service: an OTLP/gRPC
// exporter when tracing.otlp_endpoint is configured, W3C trace-context
// propagation on the HTTP and gRPC listeners, a span around every gate
// decision and preflight carrying the audit id, and a slog handler that puts
// the current trace and span ids on every log line written with a context.
//
// Tracing is off by default. Off means no wrapping at all: the handlers and
// the gate are returned as they are, so an untraced service pays nothing.
// The tracer provider and propagator are passed around explicitly; the
// package never installs OpenTelemetry globals, so tests can record spans in
// memory with their own provider.
package tracing
