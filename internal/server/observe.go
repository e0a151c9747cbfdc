package server

import (
	"context"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/internal/config"
	"github.com/contractrefine/autonomy/internal/metrics"
	"github.com/contractrefine/autonomy/internal/observe"
	"github.com/contractrefine/autonomy/internal/tracing"
	"github.com/contractrefine/autonomy/preflight/submit"
	"github.com/contractrefine/autonomy/wal"
)

// DefaultReadinessInterval is how often the server re-probes its readiness
// in the background, so grpc.health.v1 (which Kubernetes gRPC probes and
// Envoy health checks read) follows the WAL even when nobody calls /readyz.
const DefaultReadinessInterval = 5 * time.Second

// observability is what the metrics and tracing settings configure.
type observability struct {
	registry *prometheus.Registry
	metrics  *metrics.Metrics
	tracing  *tracing.Tracing
	interval time.Duration
}

// newObservability builds the metrics on the registry the caller passed
// (or a fresh one: never the global default) and the tracer provider.
func newObservability(ctx context.Context, cfg *config.Config, o *Options, pending func() (float64, error)) (observability, error) {
	obs := observability{registry: o.Registry, interval: o.ReadinessInterval}
	if obs.registry == nil {
		obs.registry = prometheus.NewRegistry()
	}
	if obs.interval == 0 {
		obs.interval = DefaultReadinessInterval
	}
	var err error
	obs.metrics, err = metrics.New(obs.registry, metrics.Options{WALPath: filepath.Join(cfg.DataDir, wal.FileName),
		PendingApprovals: pending})
	if err != nil {
		return obs, err
	}
	obs.metrics.SetMode(binding.Mode(cfg.ContractRefine.Mode))
	obs.tracing, err = tracing.New(ctx, tracing.Options{Endpoint: cfg.Tracing.OTLPEndpoint,
		SampleRatio: cfg.Tracing.SampleRatio, ServiceVersion: o.Version, TracerProvider: o.TracerProvider})
	return obs, err
}

// spans is the gate's CheckObserver: tracing when it is on, else none, so
// an untraced check makes no calls for it.
func (obs *observability) spans() binding.CheckObserver {
	if !obs.tracing.Enabled() {
		return nil
	}
	return obs.tracing
}

// preflightObservers tells each observer about a decided preflight.
type preflightObservers []submit.Observer

func (p preflightObservers) Preflight(ctx context.Context, e observe.Preflight) {
	for _, o := range p {
		o.Preflight(ctx, e)
	}
}

// metricsHandler serves the registry in the Prometheus exposition format.
func (obs *observability) metricsHandler() http.Handler {
	return promhttp.HandlerFor(obs.registry, promhttp.HandlerOpts{Registry: obs.registry})
}

// grpcOptions are the gRPC server options tracing needs (none when off).
func (obs *observability) grpcOptions() []grpc.ServerOption { return obs.tracing.GRPCServerOptions() }

// startBackground runs the readiness probe loop and the bundle watcher
// until ctx ends; stop cancels them and waits, so neither touches the WAL
// after Run closes it.
func (s *Server) startBackground(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.probeEvery(ctx, s.obs.interval) }()
	go func() { defer wg.Done(); s.watchBundle(ctx) }()
	if s.verifyPending {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select { // readiness follows the WAL's verification as soon as it ends
			case <-s.db.Verified():
				s.probe(ctx)
			case <-ctx.Done():
			}
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// probeEvery re-probes readiness every interval; a negative interval turns
// the loop off (tests that count WAL commits exactly).
func (s *Server) probeEvery(ctx context.Context, interval time.Duration) {
	if interval < 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// Not cancelled with ctx: a probe cut short at shutdown would
			// report the service unready for no reason.
			s.probe(context.WithoutCancel(ctx))
		}
	}
}

// shutdownTracing flushes spans still queued for the collector.
func (s *Server) shutdownTracing() {
	if s.obs.tracing == nil { // New failed before tracing existed
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	if err := s.obs.tracing.Shutdown(ctx); err != nil {
		s.log.Warn("tracing shutdown", "err", err)
	}
}
