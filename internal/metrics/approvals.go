package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/contractrefine/autonomy/internal/httpapi"
	"github.com/contractrefine/autonomy/wal"
)

var _ httpapi.ApprovalObserver = (*Metrics)(nil)

// decisionBuckets span a decision taken at once to one taken at the end of
// a long approval timeout (seconds to hours).
var decisionBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200}

// approvalMetrics are the approvals' collectors (docs/API.md).
type approvalMetrics struct {
	decisions *prometheus.CounterVec
	wait      prometheus.Histogram
	webhook   *prometheus.CounterVec
}

func (a *approvalMetrics) init(o Options) []prometheus.Collector {
	a.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "approval_decisions_total",
		Help: "Approval decisions recorded, by result: approved or rejected.",
	}, []string{"result"})
	a.wait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: Namespace, Name: "approval_decision_seconds",
		Help:    "Time from a preflight asking for an approval to the approver's decision.",
		Buckets: decisionBuckets,
	})
	a.webhook = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "approval_webhook_deliveries_total",
		Help: "Notifications of pending approvals to approvals.webhook_url, by result: delivered, failed or dropped.",
	}, []string{"result"})
	for _, r := range []string{wal.ApprovalApproved, wal.ApprovalRejected} {
		a.decisions.WithLabelValues(r)
	}
	for _, r := range []string{"delivered", "failed", "dropped"} {
		a.webhook.WithLabelValues(r)
	}
	cs := []prometheus.Collector{a.decisions, a.wait, a.webhook}
	if o.PendingApprovals != nil {
		pending := o.PendingApprovals
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "approvals_pending",
			Help: "Approvals waiting for a decision and not yet expired, read from the store at scrape time.",
		}, func() float64 {
			n, err := pending()
			if err != nil {
				return -1
			}
			return n
		}))
	}
	return cs
}

// ApprovalDecided records one decision (httpapi.ApprovalObserver).
func (m *Metrics) ApprovalDecided(state string, waited time.Duration) {
	m.approvals.decisions.WithLabelValues(state).Inc()
	m.approvals.wait.Observe(waited.Seconds())
}

// WebhookDelivery records the result of one notification.
func (m *Metrics) WebhookDelivery(result string) {
	m.approvals.webhook.WithLabelValues(result).Inc()
}
