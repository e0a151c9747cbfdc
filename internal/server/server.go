package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/extauthz"
	"github.com/contractrefine/autonomy/internal/bundle"
	"github.com/contractrefine/autonomy/internal/config"
	"github.com/contractrefine/autonomy/internal/etcdstore"
	"github.com/contractrefine/autonomy/internal/explain"
	"github.com/contractrefine/autonomy/internal/gateway"
	"github.com/contractrefine/autonomy/internal/httpapi"
	"github.com/contractrefine/autonomy/internal/ids"
	"github.com/contractrefine/autonomy/internal/webhook"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/preflight/submit"
	"github.com/contractrefine/autonomy/wal"
)

// ShutdownTimeout bounds how long in-flight requests get to finish.
const ShutdownTimeout = 10 * time.Second

// Options are the parts of a Server that tests inject.
type Options struct {
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Listen has New bind the configured addresses (ListenAll) once it has
	// read the configuration's files and the bundle, and before it opens
	// the WAL: a bad file or bundle stops serve before it listens, a port
	// in use before it creates anything in the data directory. Without it
	// Run binds them.
	Listen bool
	// Listening, when set, is called once every listener is bound, with the
	// addresses actually bound (so ":0" can be used).
	Listening func(Addrs)
	// Registry receives the service's metrics, served at /metrics; nil means
	// a fresh registry (never the global default).
	Registry *prometheus.Registry
	// TracerProvider, when set, turns tracing on with it instead of an OTLP
	// exporter to tracing.otlp_endpoint (tests record spans in memory).
	TracerProvider trace.TracerProvider
	// ReadinessInterval is how often readiness is re-probed in the
	// background; zero means DefaultReadinessInterval, negative never.
	ReadinessInterval time.Duration
	// Version is reported as the service.version of traces.
	Version string
}

// Addrs are the bound listener addresses; Gateway is "" without --upstream.
type Addrs struct {
	HTTP, GRPC, Gateway string
}

// Server is a configured, not yet listening service.
type Server struct {
	cfg    config.Config
	log    *slog.Logger
	now    func() time.Time
	db     *wal.DB
	etcd   *etcdstore.Store // the shared store; nil on bbolt
	bundle atomic.Pointer[bundle.Bundle]
	gate   *binding.Gate
	api    *httpapi.API
	grpc   *grpc.Server
	health *health.Server

	probes singleflight.Group // probe
	ready  atomic.Bool
	// firstReady is set while a replica on etcd, which listens unready
	// (firstProbe), has not been ready yet: its first readiness is not
	// logged as a return.
	firstReady atomic.Bool
	listening  func(Addrs)
	lns        *Listeners
	sec        security
	obs        observability
	reloadMu   sync.Mutex
	notifier   *webhook.Notifier
	// bodies bounds the requests with a body, and their bytes, across the
	// HTTP listener and the gateway together (bodylimit.go).
	bodies *bodyLimiter
	// verifyPending: the WAL was still being verified when New returned.
	verifyPending bool
}

// LoadBundle loads the configured bundle with the configured limits.
func LoadBundle(ctx context.Context, cfg *config.Config) (*bundle.Bundle, error) {
	return bundle.Load(ctx, cfg.Bundle, &bundle.Options{PolicyTimeout: cfg.Policy.Timeout,
		ClauseCostLimit: cfg.Clauses.CostLimit, Kinds: kindRule(cfg)})
}

// kindRule is the rule kinds follow under cfg's gate.protocol.
func kindRule(cfg *config.Config) preflight.KindRule {
	if cfg.Gate.Protocol == config.ProtocolMCP {
		return preflight.KindRuleMCP
	}
	return preflight.KindRuleTool
}

// New opens the WAL and loads the bundle. The caller must Run or Close it.
func New(ctx context.Context, cfg config.Config, o Options) (_ *Server, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: o.Logger, now: o.Now, listening: o.Listening}
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if s.now == nil {
		s.now = time.Now
	}
	// Refused reads are counted once the metrics exist, before any request.
	sec, err := loadSecurity(&cfg, s.log, func(code string) { s.obs.metrics.APIError(code) })
	if err != nil {
		return nil, err
	}
	s.sec = sec
	s.obs, err = newObservability(ctx, &cfg, &o, s.pendingApprovals)
	s.bodies = newBodyLimiter(&cfg, func(code string) { s.obs.metrics.APIError(code) })
	// What New has started is stopped again when a later step fails: the
	// tracing exporter (its connection to the collector), the WAL.
	defer func() {
		if err != nil {
			s.shutdownTracing()
		}
	}()
	if err != nil {
		return nil, err
	}
	b, err := LoadBundle(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	s.bundle.Store(b)
	s.obs.metrics.SetBundle(b.Revision(), b.Source())
	for _, note := range b.Unenforced() {
		s.log.Warn("clause not enforced", "note", note)
	}
	for _, w := range b.Warnings() {
		s.log.Warn("policy bundle", "warning", w)
	}
	if o.Listen {
		if s.lns, err = ListenAll(&cfg); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				s.lns.Close()
			}
		}()
	}
	store, err := s.openStores(ctx, &cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			s.closeStores()
		}
	}()
	s.gate = s.newGate(&cfg, store)
	s.api = s.newAPI(&cfg, store)
	s.grpc = s.newGRPC(&cfg)
	s.awaitVerification()
	return s, nil
}

// openStores opens the WAL and, with store.backend: etcd, the shared
// store; it returns the store that decides answers. On an error it closes
// what it opened.
func (s *Server) openStores(ctx context.Context, cfg *config.Config) (stateStore, error) {
	db, err := wal.Open(cfg.DataDir, &wal.Options{Logger: s.log, OnCommit: s.obs.metrics.WALCommit,
		VerifyOnOpen: true, OnVerify: s.obs.metrics.WALVerify, Replica: walReplica(cfg)})
	if err != nil {
		return nil, err
	}
	s.db = db
	if cfg.StoreBackend() != config.BackendEtcd {
		return db, nil
	}
	if s.etcd, err = s.openShared(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	return s.etcd, nil
}

// closeStores closes what openStores opened, the shared store first.
func (s *Server) closeStores() {
	if s.etcd != nil {
		s.etcd.Close()
	}
	s.db.Close()
}

// newGate builds the gate on store.
func (s *Server) newGate(cfg *config.Config, store stateStore) *binding.Gate {
	// Outcomes are judged from what every replica wrote on a shared store.
	var outcomes binding.OutcomeStore = s.db
	if s.etcd != nil {
		outcomes = s.etcd
	}
	return binding.New(binding.Options{
		Store:            store,
		PeekInConsume:    s.etcd != nil,
		Log:              store,
		Outcomes:         outcomes,
		Policy:           func() binding.Policy { return s.bundle.Load() },
		Mode:             binding.Mode(cfg.ContractRefine.Mode),
		Protocol:         binding.Protocol(cfg.Gate.Protocol),
		Path:             cfg.Gate.Path,
		KindPointer:      cfg.Gate.KindPointer,
		ArgsPointer:      cfg.Gate.ArgsPointer,
		KindHeader:       cfg.Gate.KindHeader,
		ActorHeader:      cfg.Gate.ActorHeader,
		MaxBodyBytes:     cfg.HTTP.MaxBodyBytes,
		CacheTTL:         cfg.ContractRefine.BindingCacheTTL,
		CacheSize:        cfg.ContractRefine.BindingCacheSize,
		StoreRawRequests: cfg.WAL.StoreRawRequests,
		Now:              s.now,
		NewID:            ids.Audit,
		Logger:           s.log,
		NoDecisionLog:    !cfg.Log.Decisions,
		Observer:         s.obs.metrics,
		Spans:            s.obs.spans(),
	})
}

// newAPI builds the HTTP API and the preflight core behind it on store.
func (s *Server) newAPI(cfg *config.Config, store stateStore) *httpapi.API {
	verifier := preflight.NewVerifier(preflight.Options{Chain: store, BindingWindow: cfg.ContractRefine.BindingWindow,
		Offline: cfg.ContractRefine.Offline, Now: s.now, Kinds: kindRule(cfg)})
	return httpapi.New(httpapi.Options{
		Submit: submit.New(submit.Options{
			Verifier:           verifier,
			Store:              store,
			Bundle:             func() submit.Bundle { return s.bundle.Load() },
			Disabled:           binding.Mode(cfg.ContractRefine.Mode) == binding.ModeDisabled,
			BindingWindow:      cfg.ContractRefine.BindingWindow,
			MaxRepairAttempts:  cfg.ContractRefine.MaxRepairAttempts,
			SessionWait:        answerWindow(cfg.HTTP.WriteTimeout),
			StoreRawRequests:   cfg.WAL.StoreRawRequests,
			Now:                s.now,
			NewPreflightID:     ids.Preflight,
			NewAuditID:         ids.Audit,
			Logger:             s.log,
			NoDecisionLog:      !cfg.Log.Decisions,
			Observer:           preflightObservers{s.obs.metrics, s.obs.tracing},
			ApprovalsRequested: s.startNotifier(),
			Recorded:           s.gate.Recorded,
		}),
		Store:        store,
		Log:          store,
		MaxBodyBytes: cfg.HTTP.MaxBodyBytes,
		Logger:       s.log,
		Access:       s.sec.access,
		Observer:     s.obs.metrics,
		Approvers:    s.sec.access,
		Outcomes:     s.gate,
		Now:          s.now,
		Replica:      walReplica(cfg),
	})
}

// newGRPC builds the gRPC server with its limits and registers the
// ext_authz, ext_proc and health services (and reflection when asked).
func (s *Server) newGRPC(cfg *config.Config) *grpc.Server {
	s.health = health.NewServer()
	opts := append(s.sec.grpcOptions(), s.obs.grpcOptions()...)
	// Long-lived stream workers keep the stacks they have grown, so a Check
	// does not pay for growing a fresh goroutine's stack through the gate,
	// the policy and the log handler (8 % of a deny's CPU in a profile of
	// the load command). grpc still starts a goroutine when all are busy.
	opts = append(opts, grpc.NumStreamWorkers(uint32(streamWorkers())))
	// A CheckRequest carries the body Envoy buffered (with_request_body)
	// and the headers: room for http.max_body_bytes and a MiB besides, so
	// raising the limit in both places keeps them in step (grpc's own
	// default, 4 MiB, would refuse bigger bodies, closed but unexplained).
	opts = append(opts, grpc.MaxRecvMsgSize(int(cfg.HTTP.MaxBodyBytes)+1<<20)) // at most 1 GiB: config.MaxBodyBytesLimit
	// A connection that has not finished its TLS and HTTP/2 handshakes by
	// then is closed, as the HTTP listener closes one that has not sent its
	// request head (grpc's own default holds it for 120 s).
	opts = append(opts, grpc.ConnectionTimeout(cfg.HTTP.ReadHeaderTimeout))
	opts = append(opts, grpcLimitOptions(cfg)...)
	// Check responses are marshalled by go-control-plane's generated code.
	opts = append(opts, extauthz.CodecOption())
	g := grpc.NewServer(opts...)
	extauthz.NewServer(s.gate).Register(g)
	extauthz.NewProcessor(s.gate, extauthz.ProcessorOptions{Timeout: cfg.HTTP.WriteTimeout,
		MaxBodyBytes: cfg.HTTP.MaxBodyBytes}).Register(g)
	healthpb.RegisterHealthServer(g, s.health)
	if cfg.GRPC.Reflection {
		reflection.Register(g)
	}
	return g
}

// awaitVerification waits a moment for the WAL's verification, then sets
// readiness from it.
func (s *Server) awaitVerification() {
	db := s.db
	// A log small enough to verify in moments is verified before the
	// server listens; a bigger one goes on in the background while the
	// listeners answer unready and decide nothing (503), until it verifies
	// (startBackground probes readiness again then).
	select {
	case <-db.Verified():
	case <-time.After(verifyWait):
		s.verifyPending = true
		s.log.Info("wal verification continues in the background; unready until it ends", "wal", db.Path())
	}
	s.ready.Store(db.Trusted() == nil)
}

// verifyWait is how long New waits for the WAL's verification before it
// lets the server listen unready (docs/PERFORMANCE.md has the cost per
// frame).
const verifyWait = 2 * time.Second

// Handler serves the HTTP listener: the API, the HTTP check, the explain
// page, health and metrics, behind the access rules and the body bounds.
func (s *Server) Handler() http.Handler {
	return s.obs.tracing.Handler(s.sec.access.Handler(s.bodies.wrap(s.routes())))
}

// routes are the HTTP listener's endpoints without the access rules and
// the body bounds; the gateway serves them too.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/preflight", s.api)
	mux.Handle("/v1/preflight/", s.api)
	mux.Handle("/v1/audit", s.api) // else the ServeMux redirects it to /v1/audit/
	mux.Handle("/v1/audit/", s.api)
	mux.Handle("/v1/approvals", s.api)
	mux.Handle("/v1/approvals/", s.api)
	mux.Handle("/v1/outcome", s.api)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"status":"ok"}`))
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	page := explain.New(explain.Options{Store: s.db, Access: s.sec.access, Logger: s.log, Decide: s.api, Now: s.now})
	mux.Handle(explain.Pattern, page)
	mux.Handle(explain.DecidePattern, page.DecideHandler())
	mux.Handle("GET /metrics", s.obs.metricsHandler())
	// Another method on those paths, and any other path, gets the API's
	// JSON error body, not Go's plain text.
	for _, p := range []string{"/healthz", "/readyz", "/metrics", explain.PathPattern} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			s.obs.metrics.APIError(preflight.CodeMethodNotAllowed)
			httpapi.WriteMethodNotAllowed(w, r, "GET, HEAD")
		})
	}
	mux.HandleFunc(explain.DecidePathPattern, func(w http.ResponseWriter, r *http.Request) {
		s.obs.metrics.APIError(preflight.CodeMethodNotAllowed)
		httpapi.WriteMethodNotAllowed(w, r, "POST")
	})
	notFound := func(w http.ResponseWriter, r *http.Request) {
		s.obs.metrics.APIError(preflight.CodeNotFound)
		httpapi.WriteError(w, http.StatusNotFound, preflight.CodeNotFound, "No endpoint has this path.")
	}
	mux.HandleFunc("/", notFound)
	check := extauthz.NewHTTPHandler(s.gate, s.cfg.HTTP.MaxBodyBytes)
	root := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		switch {
		case p == extauthz.HTTPPrefix || strings.HasPrefix(p, extauthz.HTTPPrefix+"/"):
			// What follows the prefix is the checked request's own path,
			// which the gate reads as a runtime would (dot segments, doubled
			// slashes): the ServeMux would answer a 307 to the cleaned path
			// instead, a redirect the proxy hands the client, and no
			// decision. The pattern names the server span, as the
			// ServeMux would.
			r.Pattern = extauthz.HTTPPrefix + "/"
			check.ServeHTTP(w, r)
		case p != cleanPath(p) && httpapi.IsStepApproval(r):
			s.api.ServeHTTP(w, r)
		case p != cleanPath(p):
			// The ServeMux would redirect; no endpoint is named so.
			notFound(w, r)
		default:
			mux.ServeHTTP(w, r)
		}
	})
	return root
}

// answerWindow is how long a handler may wait on something else (the
// gateway on the upstream's answer, a preflight on the other submissions
// of its repair session) and still write its own answer: a second less
// than http.write_timeout, after which the client's connection is cut.
func answerWindow(writeTimeout time.Duration) time.Duration {
	if writeTimeout <= 0 {
		return 0
	}
	return max(writeTimeout-time.Second, writeTimeout/2)
}

// cleanPath is p as the ServeMux routes it: dot segments and doubled
// slashes resolved, a trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// readyz reports whether the WAL can write and a bundle is loaded whose
// policy can decide.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	err := s.probe(r.Context())
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"status":"unready","reason":%q}`, err.Error())
		return
	}
	w.Write([]byte(`{"status":"ready"}`))
}

// probe checks readiness and mirrors it into grpc.health.v1.
func (s *Server) probe(ctx context.Context) error {
	// A caller that arrives while a probe runs (a /readyz beside the
	// background probe) shares its answer rather than waiting to run one
	// of its own: with etcd down each takes up to its request timeout, and
	// the two in turn outlasted the health checks' timeouts.
	_, err, _ := s.probes.Do("probe", func() (any, error) { return nil, s.probeOnce(context.WithoutCancel(ctx)) })
	return err
}

// firstProbe sets readiness before the listeners open. On etcd it does
// not wait: etcd may take its request timeout to answer, or not answer,
// and the listeners, /healthz among them, answer meanwhile, unready until
// the probe hears from it.
func (s *Server) firstProbe(ctx context.Context) {
	if s.etcd == nil {
		s.probe(ctx)
		return
	}
	s.ready.Store(false)
	s.firstReady.Store(true)
	go s.probe(ctx)
}

// probeOnce is one probe, never two at once (probe).
func (s *Server) probeOnce(ctx context.Context) error {
	var err error
	if b := s.bundle.Load(); b == nil {
		err = errors.New("no policy bundle loaded")
	} else if derr := b.Decides(ctx, string(s.cfg.ContractRefine.Mode), s.cfg.Gate.Path); derr != nil {
		err = derr
	} else {
		perr := s.db.Probe(ctx)
		var eerr error
		if s.etcd != nil {
			eerr = s.etcd.Probe(ctx)
		}
		switch {
		case eerr != nil && perr != nil:
			// A log held until etcd settles its copies is etcd's doing:
			// name the cause first.
			err = fmt.Errorf("etcd: %w (the wal cannot write meanwhile: %v)", eerr, perr)
		case eerr != nil:
			err = fmt.Errorf("etcd: %w", eerr)
		case perr != nil:
			err = fmt.Errorf("wal cannot write: %w", perr)
		}
	}
	s.setReady(err)
	return err
}

// setReady records readiness, err nil for ready or why not: the flag,
// one log line per change and grpc.health.v1.
func (s *Server) setReady(err error) {
	was := s.ready.Swap(err == nil)
	status := healthpb.HealthCheckResponse_SERVING
	if err != nil {
		status = healthpb.HealthCheckResponse_NOT_SERVING
		if was {
			s.log.Error("service unready", "err", err)
		}
	} else if !was {
		msg := "service ready again"
		if s.firstReady.CompareAndSwap(true, false) {
			msg = "service ready" // a replica on etcd, which starts unready
		}
		s.log.Info(msg)
	}
	for _, name := range healthServices {
		s.health.SetServingStatus(name, status)
	}
}

const (
	authzServiceName   = "envoy.service.auth.v3.Authorization"
	extprocServiceName = "envoy.service.ext_proc.v3.ExternalProcessor"
)

// healthServices are the names grpc.health.v1 answers for: the server as
// a whole and each Envoy service on the gRPC listener, so an Envoy health
// check that names the service it calls gets an answer.
var healthServices = []string{"", authzServiceName, extprocServiceName}

// Gate returns the gate (tests and benchmarks drive it directly).
func (s *Server) Gate() *binding.Gate { return s.gate }

// WAL returns the open log.
func (s *Server) WAL() *wal.DB { return s.db }

// Listen opens a listener for addr: "unix:/path" or "unix:///path" is a Unix
// socket (a stale socket file is replaced; one a live server listens on
// is in use, as a TCP port would be), anything else TCP.
func Listen(addr string) (net.Listener, error) {
	if path, ok := config.SocketPath(addr); ok {
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return nil, err
		}
		if st, err := os.Stat(path); err == nil && st.Mode()&os.ModeSocket != 0 {
			if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
				c.Close()
				return nil, &net.OpError{Op: "listen", Net: "unix", Addr: &net.UnixAddr{Name: path, Net: "unix"},
					Err: fmt.Errorf("%w: a server listens on this socket", syscall.EADDRINUSE)}
			}
			os.Remove(path)
		}
		return net.Listen("unix", path)
	}
	return net.Listen("tcp", addr)
}

// Listeners are the service's listeners. serve binds them before New
// opens the WAL, so that a port in use stops it before it creates
// anything in the data directory.
type Listeners struct {
	HTTP, GRPC net.Listener
	// Gateway is nil without an upstream.
	Gateway net.Listener
}

// ListenAll binds the listeners cfg names: HTTP, gRPC and, with an
// upstream, the gateway's. On an error none stays open.
func ListenAll(cfg *config.Config) (*Listeners, error) {
	l := &Listeners{}
	var err error
	if l.HTTP, err = Listen(cfg.HTTPAddr); err != nil {
		return nil, fmt.Errorf("listen http_addr %s: %w", cfg.HTTPAddr, err)
	}
	if l.GRPC, err = Listen(cfg.GRPCAddr); err != nil {
		l.Close()
		return nil, fmt.Errorf("listen grpc_addr %s: %w", cfg.GRPCAddr, err)
	}
	if cfg.Upstream != "" {
		if l.Gateway, err = Listen(cfg.GatewayAddr); err != nil {
			l.Close()
			return nil, fmt.Errorf("listen gateway_addr %s: %w", cfg.GatewayAddr, err)
		}
	}
	return l, nil
}

// Close closes every listener that is open.
func (l *Listeners) Close() {
	for _, ln := range []net.Listener{l.HTTP, l.GRPC, l.Gateway} {
		if ln != nil {
			ln.Close()
		}
	}
}

// Run serves until ctx ends, then stops accepting, lets in-flight requests
// finish (up to ShutdownTimeout) and closes the WAL.
func (s *Server) Run(ctx context.Context) error {
	lns := s.lns
	if lns == nil {
		var err error
		if lns, err = ListenAll(&s.cfg); err != nil {
			s.db.Close()
			return err
		}
	}
	httpLn, grpcLn := lns.HTTP, lns.GRPC
	servers := []*http.Server{s.httpServer(s.Handler())}
	listeners := []net.Listener{httpLn}
	attrs := []any{"http_addr", httpLn.Addr().String(), "grpc_addr", addrString(grpcLn),
		"mode", string(s.cfg.ContractRefine.Mode), "bundle", s.bundle.Load().Source(),
		"bundle_revision", s.bundle.Load().Revision(), "wal", s.db.Path(),
		"tls", s.sec.tls.HTTP != nil, "mtls", s.cfg.TLS.ClientCAFile != "", "read_tokens", s.sec.access.TokensConfigured(),
		"store", s.cfg.StoreBackend()}
	if r := walReplica(&s.cfg); r != "" {
		attrs = append(attrs, "replica", r)
	}
	if s.cfg.Upstream != "" {
		up, _ := url.Parse(s.cfg.Upstream)
		gwLn := lns.Gateway
		// The gateway also serves the API routes (with the HTTP listener's
		// access rules), so its address is the deployment's one front URL.
		trusted, _ := s.cfg.Gateway.TrustedProxyPrefixes() // validated with the config
		// Its bodies count against the HTTP listener's bytes in flight: one
		// budget for every body the service reads.
		gw := gateway.New(gateway.Options{Gate: s.gate, Judge: s.gate, Upstream: up, API: s.sec.access.Handler(s.bodies.wrapCount(s.routes())),
			MaxBodyBytes: s.cfg.HTTP.MaxBodyBytes, ActorHeader: s.cfg.Gate.ActorHeader, TrustedProxies: trusted, Logger: s.log,
			OnError: s.obs.metrics.APIError, UpstreamTimeout: answerWindow(s.cfg.HTTP.WriteTimeout)})
		servers = append(servers, s.httpServer(s.obs.tracing.Handler(s.bodies.wrapBytes(gw))))
		listeners = append(listeners, gwLn)
		attrs = append(attrs, "gateway_addr", gwLn.Addr().String(), "upstream", s.cfg.Upstream)
	}
	s.firstProbe(ctx)
	stopBackground := s.startBackground(ctx)
	stopCompaction := s.startCompaction(ctx)
	errc := make(chan error, len(servers)+1)
	for i, srv := range servers {
		go func() { errc <- srv.Serve(s.sec.wrapHTTP(listeners[i])) }()
	}
	go func() { errc <- s.grpc.Serve(limitConnections(grpcLn, &s.cfg)) }()
	// The bound addresses are how a service started on port 0 is found:
	// the line is written whatever log.level lets through.
	rec := slog.NewRecord(time.Now(), slog.LevelInfo, "listening", 0)
	rec.Add(attrs...)
	if err := s.log.Handler().Handle(context.Background(), rec); err != nil {
		s.log.Warn("listening", attrs...)
	}
	if note := modeNote(s.cfg.ContractRefine.Mode); note != "" {
		s.log.Warn(note, "mode", string(s.cfg.ContractRefine.Mode))
	}
	if s.listening != nil {
		a := Addrs{HTTP: httpLn.Addr().String(), GRPC: addrString(grpcLn)}
		if len(listeners) > 1 {
			a.Gateway = listeners[1].Addr().String()
		}
		s.listening(a)
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	s.log.Info("shutting down")
	s.drain(servers)
	stopBackground()
	stopCompaction()
	s.gate.Close()
	s.stopNotifier()
	s.shutdownTracing()
	if s.etcd != nil {
		s.etcd.Close()
	}
	if err := s.db.Close(); err != nil && runErr == nil {
		runErr = err
	}
	s.log.Info("stopped")
	if errors.Is(runErr, http.ErrServerClosed) || errors.Is(runErr, grpc.ErrServerStopped) {
		runErr = nil
	}
	return runErr
}

// drain lets the HTTP servers and the gRPC server finish the calls they
// hold, within ShutdownTimeout, then stops whatever is left.
func (s *Server) drain(servers []*http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	var wg sync.WaitGroup
	for _, srv := range servers {
		wg.Add(1)
		go func() { defer wg.Done(); srv.Shutdown(ctx) }()
	}
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-ctx.Done():
		s.grpc.Stop()
	}
	wg.Wait()
}

// AdvisoryNote and DisabledNote are logged at startup in those modes, so
// that a first tool call let through is not a surprise.
const (
	AdvisoryNote = "advisory mode: binding failures are recorded, not enforced; --mode enforce to deny"
	DisabledNote = "disabled mode: preflights answer 503 and the preflight header is ignored; only the policy decides tool calls"
)

func modeNote(m config.Mode) string {
	switch m {
	case config.ModeAdvisory:
		return AdvisoryNote
	case config.ModeDisabled:
		return DisabledNote
	}
	return ""
}

// Close releases what New opened, for a Server that never ran.
func (s *Server) Close() error {
	if s.lns != nil {
		s.lns.Close()
	}
	s.stopNotifier()
	s.shutdownTracing()
	if s.etcd != nil {
		s.etcd.Close()
	}
	return s.db.Close()
}

func (s *Server) httpServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: s.cfg.HTTP.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.HTTP.ReadTimeout,
		WriteTimeout:      s.cfg.HTTP.WriteTimeout,
		IdleTimeout:       s.cfg.HTTP.IdleTimeout,
		MaxHeaderBytes:    s.cfg.HTTP.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

func addrString(ln net.Listener) string {
	if ln.Addr().Network() == "unix" {
		return "unix:" + ln.Addr().String()
	}
	return ln.Addr().String()
}

// startCompaction runs WAL retention (docs/OPERATIONS.md) once now and then every
// wal.compaction_interval until ctx ends; stop cancels it and waits, so it
// never touches the WAL after Run closes it. A run that finds nothing to
// remove commits nothing.
func (s *Server) startCompaction(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(s.cfg.WAL.CompactionInterval)
		defer t.Stop()
		for {
			s.compactOnce(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// compactOnce removes the frames older than wal.retention.
func (s *Server) compactOnce(ctx context.Context) {
	rep, err := s.db.Compact(ctx, s.now().Add(-s.cfg.WAL.Retention))
	if errors.Is(err, wal.ErrUnverified) || errors.Is(err, wal.ErrVerifying) {
		// Compaction waits for a verified log; a failed verification was
		// logged once, when it was found.
		s.log.Debug("wal compaction skipped", "err", err)
		return
	}
	if err != nil {
		if ctx.Err() == nil {
			s.log.Error("wal compaction failed", "err", err, "frames_removed", rep.Frames)
		}
		return
	}
	if rep.Frames > 0 {
		s.log.Info("wal compacted", "frames_removed", rep.Frames, "first_seq_removed", rep.FirstSeq,
			"last_seq_removed", rep.LastSeq, "kept_from_seq", rep.KeptFrom, "stop_reason", rep.StopReason,
			"preflights_removed", rep.Preflights, "consumed_markers_removed", rep.ConsumedMarkers,
			"sessions_removed", rep.Sessions, "idempotency_keys_removed", rep.IdempotencyKeys)
	}
}

// streamWorkers is how many gRPC stream workers the server keeps: enough
// that callers waiting on a commit do not leave the CPUs idle, and that a
// Check arriving while the others wait on a commit finds a worker whose
// stack has already grown to the policy's evaluation. With 16 per CPU, 64
// callers on 2 CPUs had most Checks run on fresh goroutines, and growing
// their stacks (runtime.newstack) was 9 % of the service's CPU in a
// profile of the load command's consume at 64. An idle worker's stack is
// shrunk by the GC like any goroutine's.
func streamWorkers() int { return 64 * runtime.GOMAXPROCS(0) }
