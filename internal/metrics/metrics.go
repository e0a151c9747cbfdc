package metrics

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/internal/httpapi"
	"github.com/contractrefine/autonomy/internal/observe"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

var (
	// ErrNoRegistry reports a New call without a registry.
	ErrNoRegistry = errors.New("metrics: a registry is required")
)

// Namespace prefixes every metric name.
const Namespace = "autonomy"

// MaxExtraReasons caps the distinct reasons outside the catalog (policy deny
// reasons) that get their own label value; later ones count as OtherReason.
const MaxExtraReasons = 32

// OtherReason is the label value of reasons past MaxExtraReasons.
const OtherReason = "other"

// Reload results, the result label of autonomy_bundle_reloads_total.
const (
	ReloadOK        = "ok"
	ReloadFailed    = "failed"
	ReloadUnchanged = "unchanged"
)

// latencyBuckets span a cached allow (tens of microseconds) to a policy
// timeout or a slow fsync (about a second).
var latencyBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

// batchBuckets cover one writer up to wal.Options.MaxBatch (512).
var batchBuckets = prometheus.ExponentialBuckets(1, 2, 10)

// Options configures New. The zero value is the default.
type Options struct {
	// WALPath is the WAL file whose size autonomy_wal_size_bytes reports,
	// read at scrape time. Empty leaves the gauge out.
	WALPath string
	// NoRuntimeCollectors leaves out the Go and process collectors.
	NoRuntimeCollectors bool
	// PendingApprovals, when set, counts the approvals waiting for a
	// decision, read at scrape time for autonomy_approvals_pending.
	PendingApprovals func() (float64, error)
}

// Metrics holds the service's collectors. Its methods are safe for
// concurrent use.
type Metrics struct {
	checkDuration      *prometheus.HistogramVec
	checkDecisions     *prometheus.CounterVec
	preflightDuration  *prometheus.HistogramVec
	preflightDecisions *prometheus.CounterVec
	repairAttempts     *prometheus.CounterVec
	repairSessions     prometheus.Counter
	cacheHits          prometheus.Counter
	cacheMisses        prometheus.Counter
	cacheEvictions     prometheus.Counter
	walCommitDuration  prometheus.Histogram
	walCommitBatch     prometheus.Histogram
	walCommitErrors    prometheus.Counter
	walVerified        prometheus.Gauge
	walVerifyBadSeq    prometheus.Gauge
	walVerifySeconds   prometheus.Gauge
	errors             *prometheus.CounterVec
	mode               *prometheus.GaugeVec
	bundleInfo         *prometheus.GaugeVec
	bundleReloads      *prometheus.CounterVec
	approvals          approvalMetrics
	store              storeMetrics
	outcomes           *prometheus.CounterVec

	reasons  labelSet
	codes    labelSet
	children sync.Map // childKey -> prometheus.Counter or prometheus.Observer
	bundleMu sync.Mutex
}

var (
	_ binding.Observer = (*Metrics)(nil)
	_ httpapi.Observer = (*Metrics)(nil)
)

// New creates the collectors and registers them, with the Go and process
// collectors, on reg.
func New(reg *prometheus.Registry, o Options) (*Metrics, error) {
	if reg == nil {
		return nil, ErrNoRegistry
	}
	m := &Metrics{}
	m.reasons.init(MaxExtraReasons, knownReasons...)
	m.codes.init(MaxExtraReasons, knownCodes...)
	cs := m.initDecisions()
	cs = append(cs, m.initCache()...)
	cs = append(cs, m.initWAL(o.WALPath)...)
	cs = append(cs, m.initService()...)
	cs = append(cs, m.approvals.init(o)...)
	cs = append(cs, m.store.init()...)
	if !o.NoRuntimeCollectors {
		cs = append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: register: %w", err)
		}
	}
	return m, nil
}

// initDecisions creates the collectors of the gate's, the preflight core's
// and the outcome path's decisions.
func (m *Metrics) initDecisions() []prometheus.Collector {
	m.checkDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "check_duration_seconds",
		Help:    "Time to decide one gated-path check (ext_authz gRPC, HTTP check or gateway), by answer and HTTP status.",
		Buckets: latencyBuckets,
	}, []string{"outcome", "status"})
	m.checkDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "check_decisions_total",
		Help: "Check decisions as the decision frame records them; an advisory failure is outcome deny, enforced false.",
	}, []string{"outcome", "reason", "mode", "enforced"})
	m.preflightDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "preflight_duration_seconds",
		Help:    "Time to decide one POST /v1/preflight, including the WAL commit, by outcome.",
		Buckets: latencyBuckets,
	}, []string{"outcome"})
	m.preflightDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "preflight_decisions_total",
		Help: "Preflight decisions by outcome and reason.",
	}, []string{"outcome", "reason"})
	m.repairAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "repair_attempts_total",
		Help: "Preflights submitted as repair attempts (attempt > 1 in a session), by outcome.",
	}, []string{"outcome"})
	m.repairSessions = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "repair_sessions_total",
		Help: "Repair sessions opened: first attempts that came back repair_required.",
	})
	m.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "outcomes_total",
		Help: "Tool outcomes recorded (autonomy.outcome frames), by result (ok, violated, warning, unverified), reason, mode and whether the response was replaced.",
	}, []string{"result", "reason", "mode", "enforced"})
	return []prometheus.Collector{m.checkDuration, m.checkDecisions, m.preflightDuration, m.preflightDecisions,
		m.repairAttempts, m.repairSessions, m.outcomes}
}

// initCache creates the binding cache's collectors.
func (m *Metrics) initCache() []prometheus.Collector {
	lookups := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "binding_cache_lookups_total",
		Help: "Binding-cache lookups by result; a miss reads the WAL.",
	}, []string{"result"})
	m.cacheHits, m.cacheMisses = lookups.WithLabelValues("hit"), lookups.WithLabelValues("miss")
	evictions := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "binding_cache_evictions_total",
		Help: "Bindings evicted from the cache, by size or TTL.",
	})
	m.cacheEvictions = evictions
	return []prometheus.Collector{lookups, evictions}
}

// initWAL creates the WAL's collectors; its size is read from walPath at
// scrape time, when walPath is set.
func (m *Metrics) initWAL(walPath string) []prometheus.Collector {
	m.walCommitDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "wal_commit_duration_seconds",
		Help:    "Time of one WAL commit (transaction and fsync), shared by every write in it.",
		Buckets: latencyBuckets,
	})
	m.walCommitBatch = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "wal_commit_batch_size",
		Help:    "Writes sharing one WAL commit (group commit).",
		Buckets: batchBuckets,
	})
	m.walCommitErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "wal_commit_errors_total",
		Help: "WAL commits that failed (a writer's own error is not a commit failure).",
	})
	m.walVerified = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "wal_verified",
		Help: "1 once the WAL verified at open, 0 while it is being verified or after it failed verification (nothing is decided from it then).",
	})
	m.walVerifyBadSeq = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "wal_verify_failed_seq",
		Help: "The seq at which the WAL failed verification (at open, or a binding record found to differ from its frame); 0 while none did.",
	})
	m.walVerifySeconds = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "wal_verify_duration_seconds",
		Help: "How long the verification of the WAL at open took.",
	})
	cs := []prometheus.Collector{m.walCommitDuration, m.walCommitBatch, m.walCommitErrors, m.walVerified,
		m.walVerifyBadSeq, m.walVerifySeconds}
	if walPath != "" {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "wal_size_bytes",
			Help: "Size of the WAL file (wal.db) on disk, read at scrape time.",
		}, func() float64 {
			st, err := os.Stat(walPath)
			if err != nil {
				return 0
			}
			return float64(st.Size())
		}))
	}
	return cs
}

// initService creates the collectors of error answers, the mode and the
// bundle, with zero series for their fixed label values, so rate() and
// absent() work from the first scrape rather than from the first event.
func (m *Metrics) initService() []prometheus.Collector {
	m.errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "errors_total",
		Help: "Error answers by the code in their body: HTTP API codes, and verifier_unavailable for checks that could not be decided.",
	}, []string{"code"})
	m.mode = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "mode",
		Help: "The active contract_refine.mode: 1 for the active mode, 0 for the others.",
	}, []string{"mode"})
	m.bundleInfo = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "bundle_info",
		Help: "The policy bundle being served: always 1, labelled with its revision and source.",
	}, []string{"revision", "source"})
	m.bundleReloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "bundle_reloads_total",
		Help: "Bundle reload attempts by result: ok, failed (the old bundle kept serving) or unchanged.",
	}, []string{"result"})
	for _, r := range []string{ReloadOK, ReloadFailed, ReloadUnchanged} {
		m.bundleReloads.WithLabelValues(r)
	}
	for _, mode := range []binding.Mode{binding.ModeDisabled, binding.ModeAdvisory, binding.ModeEnforce} {
		m.mode.WithLabelValues(string(mode))
	}
	return []prometheus.Collector{m.errors, m.mode, m.bundleInfo, m.bundleReloads}
}

// childKey names one label combination of one metric vector.
type childKey struct {
	metric   uint8
	a, b, c  string
	enforced bool
}

const (
	metricCheckDecisions uint8 = iota
	metricCheckDuration
	metricPreflightDecisions
	metricPreflightDuration
	metricErrors
	metricOutcomes
)

// counter returns the child counter for k, resolving it once.
func (m *Metrics) counter(k childKey, vec *prometheus.CounterVec, labels ...string) prometheus.Counter {
	if c, ok := m.children.Load(k); ok {
		return c.(prometheus.Counter)
	}
	c, _ := m.children.LoadOrStore(k, vec.WithLabelValues(labels...))
	return c.(prometheus.Counter)
}

// observer returns the child histogram for k, resolving it once.
func (m *Metrics) observer(k childKey, vec *prometheus.HistogramVec, labels ...string) prometheus.Observer {
	if o, ok := m.children.Load(k); ok {
		return o.(prometheus.Observer)
	}
	o, _ := m.children.LoadOrStore(k, vec.WithLabelValues(labels...))
	return o.(prometheus.Observer)
}

// GateDecision records one check (binding.Observer).
func (m *Metrics) GateDecision(d *binding.Decision, took time.Duration) {
	outcome, reason, enforced := d.Recorded()
	reason = m.reasons.value(reason)
	mode := string(d.Mode)
	m.counter(childKey{metric: metricCheckDecisions, a: outcome, b: reason, c: mode, enforced: enforced},
		m.checkDecisions, outcome, reason, mode, strconv.FormatBool(enforced)).Inc()
	answer := "deny"
	if d.Allowed {
		answer = "allow"
	}
	status := statusLabel(d.Status)
	m.observer(childKey{metric: metricCheckDuration, a: answer, b: status}, m.checkDuration, answer, status).
		Observe(took.Seconds())
	if d.Status >= 500 {
		m.APIError(d.Code())
	}
}

// Outcome records one judged tool response (binding.OutcomeObserver). The
// result label is ok or violated as the frame says, except that a failure
// of strict: false postconditions alone is warning, and a response that
// could not be judged is unverified.
func (m *Metrics) Outcome(v *binding.Verdict, _ time.Duration) {
	a := &v.Attrs
	result := a.Outcome
	switch {
	case a.Reason == preflight.ReasonOutcomeUnverified:
		result = "unverified"
	case a.Warning:
		result = "warning"
	}
	reason := m.reasons.value(a.Reason)
	m.counter(childKey{metric: metricOutcomes, a: result, b: reason, c: a.Mode, enforced: a.Enforced},
		m.outcomes, result, reason, a.Mode, strconv.FormatBool(a.Enforced)).Inc()
}

var _ binding.OutcomeObserver = (*Metrics)(nil)

// statusLabel avoids formatting the common statuses on every call.
func statusLabel(status int) string {
	switch status {
	case 200:
		return "200"
	case 403:
		return "403"
	case 503:
		return "503"
	}
	return strconv.Itoa(status)
}

// CacheLookup records a binding-cache lookup (binding.Observer).
func (m *Metrics) CacheLookup(hit bool) {
	if hit {
		m.cacheHits.Inc()
	} else {
		m.cacheMisses.Inc()
	}
}

// CacheEvicted records a binding-cache eviction (binding.Observer).
func (m *Metrics) CacheEvicted() { m.cacheEvictions.Inc() }

// Preflight records one preflight decision (submit.Observer).
func (m *Metrics) Preflight(_ context.Context, p observe.Preflight) {
	o := p.Outcome
	reason := m.reasons.value(p.Reason)
	m.counter(childKey{metric: metricPreflightDecisions, a: o, b: reason}, m.preflightDecisions, o, reason).Inc()
	m.observer(childKey{metric: metricPreflightDuration, a: o}, m.preflightDuration, o).Observe(p.Took.Seconds())
	switch {
	case p.Attempt > 1:
		m.repairAttempts.WithLabelValues(o).Inc()
	case o == string(preflight.OutcomeRepairRequired):
		m.repairSessions.Inc()
	}
}

// APIError records an error answer by its code (httpapi.Observer).
func (m *Metrics) APIError(code string) {
	code = m.codes.value(code)
	m.counter(childKey{metric: metricErrors, a: code}, m.errors, code).Inc()
}

// WALCommit records one WAL commit; it has the signature of
// wal.Options.OnCommit.
func (m *Metrics) WALCommit(writes int, took time.Duration, err error) {
	if err != nil {
		m.walCommitErrors.Inc()
		return
	}
	m.walCommitDuration.Observe(took.Seconds())
	m.walCommitBatch.Observe(float64(writes))
}

// WALVerify records how the WAL's verification ended; it has the
// signature of wal.Options.OnVerify.
func (m *Metrics) WALVerify(frames int, took time.Duration, err error) {
	if took > 0 {
		m.walVerifySeconds.Set(took.Seconds())
	}
	var ve *wal.VerifyError
	switch {
	case err == nil:
		m.walVerified.Set(1)
	case errors.As(err, &ve):
		m.walVerified.Set(0)
		m.walVerifyBadSeq.Set(float64(ve.Seq))
	default:
		m.walVerified.Set(0)
	}
}

// SetMode marks mode as the active one.
func (m *Metrics) SetMode(mode binding.Mode) {
	for _, each := range []binding.Mode{binding.ModeDisabled, binding.ModeAdvisory, binding.ModeEnforce} {
		v := 0.0
		if each == mode {
			v = 1
		}
		m.mode.WithLabelValues(string(each)).Set(v)
	}
}

// SetBundle reports the bundle now being served; the previous one's series
// goes away, so autonomy_bundle_info always has exactly one series.
func (m *Metrics) SetBundle(revision, source string) {
	m.bundleMu.Lock()
	defer m.bundleMu.Unlock()
	m.bundleInfo.Reset()
	m.bundleInfo.WithLabelValues(revision, source).Set(1)
}

// BundleReload records a reload attempt; result is ReloadOK, ReloadFailed or
// ReloadUnchanged.
func (m *Metrics) BundleReload(result string) { m.bundleReloads.WithLabelValues(result).Inc() }
