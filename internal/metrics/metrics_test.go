package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/internal/observe"
	"github.com/contractrefine/autonomy/preflight"
)

func newMetrics(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := New(reg, Options{WALPath: t.TempDir() + "/wal.db"})
	if err != nil {
		t.Fatal(err)
	}
	return m, reg
}

func TestNamesPassPromlint(t *testing.T) {
	m, reg := newMetrics(t)
	// Touch every vector so each family has a series to lint.
	m.GateDecision(&binding.Decision{Allowed: true, Status: 200, Reason: "policy: allowed", Mode: binding.ModeEnforce}, time.Millisecond)
	m.Preflight(context.Background(), observe.Preflight{Outcome: string(preflight.OutcomePass), Reason: preflight.ReasonPassed, Attempt: 2, Took: time.Millisecond})
	m.APIError("not-found")
	m.WALCommit(3, time.Millisecond, nil)
	m.SetBundle("abc", "embedded default bundle")
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

func TestRegistryIsTheCallers(t *testing.T) {
	if _, err := New(nil, Options{}); !errors.Is(err, ErrNoRegistry) {
		t.Fatalf("New(nil) = %v, want ErrNoRegistry", err)
	}
	reg := prometheus.NewRegistry()
	if _, err := New(reg, Options{}); err != nil {
		t.Fatal(err)
	}
	// A second set on the same registry collides instead of panicking.
	if _, err := New(reg, Options{}); err == nil {
		t.Fatal("registering twice on one registry succeeded")
	}
	// Nothing went to the global default registry.
	fams, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if len(f.GetName()) > len(Namespace) && f.GetName()[:len(Namespace)+1] == Namespace+"_" {
			t.Errorf("%s is on the global registry", f.GetName())
		}
	}
}

func TestGateDecisionLabels(t *testing.T) {
	tests := map[string]struct {
		d            binding.Decision
		wantDecision []string // outcome, reason, mode, enforced
		wantLatency  []string // outcome, status
		wantErrors   float64
	}{
		"bound allow": {binding.Decision{Allowed: true, Status: 200, Reason: preflight.ReasonPassed, Mode: binding.ModeEnforce},
			[]string{"allow", preflight.ReasonPassed, "enforce", "true"}, []string{"allow", "200"}, 0},
		"enforced deny": {binding.Decision{Status: 403, Reason: preflight.ReasonReplay, Mode: binding.ModeEnforce},
			[]string{"deny", preflight.ReasonReplay, "enforce", "true"}, []string{"deny", "403"}, 0},
		"advisory failure let through": {binding.Decision{Allowed: true, Status: 200, Reason: "policy: allowed",
			AdvisoryReason: preflight.ReasonPreflightRequired, Mode: binding.ModeAdvisory},
			[]string{"deny", preflight.ReasonPreflightRequired, "advisory", "false"}, []string{"allow", "200"}, 0},
		"cannot decide": {binding.Decision{Status: 503, Reason: preflight.ReasonVerifierUnavailable, Mode: binding.ModeEnforce},
			[]string{"deny", preflight.ReasonVerifierUnavailable, "enforce", "true"}, []string{"deny", "503"}, 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m, _ := newMetrics(t)
			m.GateDecision(&tc.d, 2*time.Millisecond)
			if v := testutil.ToFloat64(m.checkDecisions.WithLabelValues(tc.wantDecision...)); v != 1 {
				t.Errorf("check_decisions_total%v = %v, want 1", tc.wantDecision, v)
			}
			if n := testutil.CollectAndCount(m.checkDecisions); n != 1 {
				t.Errorf("%d decision series, want 1", n)
			}
			if n := testutil.CollectAndCount(m.checkDuration); n != 1 {
				t.Errorf("%d latency series, want 1", n)
			}
			h := m.checkDuration.WithLabelValues(tc.wantLatency...).(prometheus.Histogram)
			if got := histogramCount(t, h); got != 1 {
				t.Errorf("check_duration_seconds%v count %d, want 1", tc.wantLatency, got)
			}
			if v := testutil.ToFloat64(m.errors.WithLabelValues("verifier_unavailable")); v != tc.wantErrors {
				t.Errorf("errors_total{code=verifier_unavailable} = %v, want %v", v, tc.wantErrors)
			}
		})
	}
}

func histogramCount(t *testing.T, h prometheus.Histogram) uint64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	h.Collect(ch)
	pb := &dto.Metric{}
	if err := (<-ch).Write(pb); err != nil {
		t.Fatal(err)
	}
	return pb.GetHistogram().GetSampleCount()
}

func TestPreflightAndRepair(t *testing.T) {
	m, _ := newMetrics(t)
	m.Preflight(context.Background(), observe.Preflight{Outcome: string(preflight.OutcomeRepairRequired), Reason: preflight.ReasonRepairRequired, Attempt: 1, Took: time.Millisecond})
	m.Preflight(context.Background(), observe.Preflight{Outcome: string(preflight.OutcomePass), Reason: preflight.ReasonPassed, Attempt: 2, Took: time.Millisecond})
	m.Preflight(context.Background(), observe.Preflight{Outcome: string(preflight.OutcomeDeny), Reason: preflight.ReasonRepairExhausted, Attempt: 3, Took: time.Millisecond})
	m.Preflight(context.Background(), observe.Preflight{Outcome: string(preflight.OutcomePass), Reason: preflight.ReasonPassed, Attempt: 1, Took: time.Millisecond})
	checks := map[string]struct {
		c    prometheus.Collector
		want float64
	}{
		"sessions opened":       {m.repairSessions, 1},
		"repair attempts pass":  {m.repairAttempts.WithLabelValues("pass"), 1},
		"repair attempts deny":  {m.repairAttempts.WithLabelValues("deny"), 1},
		"passes":                {m.preflightDecisions.WithLabelValues("pass", preflight.ReasonPassed), 2},
		"exhausted":             {m.preflightDecisions.WithLabelValues("deny", preflight.ReasonRepairExhausted), 1},
		"repair_required count": {m.preflightDecisions.WithLabelValues("repair_required", preflight.ReasonRepairRequired), 1},
	}
	for name, c := range checks {
		t.Run(name, func(t *testing.T) {
			if v := testutil.ToFloat64(c.c); v != c.want {
				t.Errorf("= %v, want %v", v, c.want)
			}
		})
	}
}

// TestReasonCardinalityIsBounded feeds more distinct policy reasons than
// MaxExtraReasons: the excess lands in one "other" series.
func TestReasonCardinalityIsBounded(t *testing.T) {
	m, _ := newMetrics(t)
	const extra = 10
	for i := range MaxExtraReasons + extra {
		m.GateDecision(&binding.Decision{Status: 403, Reason: fmt.Sprintf("policy: rule_%d", i), Mode: binding.ModeEnforce}, 0)
	}
	// Catalog reasons are never squeezed out by policy reasons.
	m.GateDecision(&binding.Decision{Status: 403, Reason: preflight.ReasonExpired, Mode: binding.ModeEnforce}, 0)
	if n := testutil.CollectAndCount(m.checkDecisions); n != MaxExtraReasons+2 {
		t.Errorf("%d decision series, want %d", n, MaxExtraReasons+2)
	}
	if v := testutil.ToFloat64(m.checkDecisions.WithLabelValues("deny", OtherReason, "enforce", "true")); v != extra {
		t.Errorf("other = %v, want %d", v, extra)
	}
	if v := testutil.ToFloat64(m.checkDecisions.WithLabelValues("deny", preflight.ReasonExpired, "enforce", "true")); v != 1 {
		t.Errorf("catalog reason = %v, want 1", v)
	}
}

func TestGauges(t *testing.T) {
	m, _ := newMetrics(t)
	m.SetMode(binding.ModeAdvisory)
	m.SetBundle("r1", "/etc/bundle")
	m.SetBundle("r2", "/etc/bundle")
	m.BundleReload(ReloadOK)
	checks := map[string]struct {
		c    prometheus.Collector
		want float64
	}{
		"advisory active":   {m.mode.WithLabelValues("advisory"), 1},
		"enforce inactive":  {m.mode.WithLabelValues("enforce"), 0},
		"bundle r2 served":  {m.bundleInfo.WithLabelValues("r2", "/etc/bundle"), 1},
		"one reload ok":     {m.bundleReloads.WithLabelValues(ReloadOK), 1},
		"no reload failure": {m.bundleReloads.WithLabelValues(ReloadFailed), 0},
	}
	for name, c := range checks {
		t.Run(name, func(t *testing.T) {
			if v := testutil.ToFloat64(c.c); v != c.want {
				t.Errorf("= %v, want %v", v, c.want)
			}
		})
	}
	// Checked after the lookups above, which create series of their own
	// only for the label values they name.
	m.SetBundle("r3", "/etc/bundle")
	if n := testutil.CollectAndCount(m.bundleInfo); n != 1 {
		t.Errorf("bundle_info has %d series, want exactly 1", n)
	}
}

func TestWALCommit(t *testing.T) {
	m, _ := newMetrics(t)
	m.WALCommit(4, time.Millisecond, nil)
	m.WALCommit(1, time.Millisecond, nil)
	m.WALCommit(2, time.Millisecond, errors.New("disk full"))
	if got := histogramCount(t, m.walCommitBatch); got != 2 {
		t.Errorf("batch histogram count %d, want 2 (failed commits are counted as errors)", got)
	}
	if v := testutil.ToFloat64(m.walCommitErrors); v != 1 {
		t.Errorf("commit errors %v, want 1", v)
	}
	if got := histogramCount(t, m.walCommitDuration); got != 2 {
		t.Errorf("duration histogram count %d, want 2", got)
	}
}

// BenchmarkGateDecision measures the hot-path cost of observing a check.
func BenchmarkGateDecision(b *testing.B) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, Options{NoRuntimeCollectors: true})
	if err != nil {
		b.Fatal(err)
	}
	d := &binding.Decision{Allowed: true, Status: http.StatusOK, Reason: preflight.ReasonPassed, Mode: binding.ModeEnforce}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.GateDecision(d, time.Millisecond)
		}
	})
}
