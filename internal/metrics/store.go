package metrics

import "github.com/prometheus/client_golang/prometheus"

// storeMetrics report the shared store (etcd) as this replica sees it.
type storeMetrics struct {
	available   prometheus.Gauge
	unavailable prometheus.Counter
}

func (s *storeMetrics) init() []prometheus.Collector {
	s.available = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "store_available",
		Help: "1 while the shared store (etcd) answers within store.etcd.request_timeout, 0 while it does not (checks and preflights answer 503); always 1 on bbolt.",
	})
	s.unavailable = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Name: "store_unavailable_total",
		Help: "Times the shared store (etcd) became unavailable as this replica saw it.",
	})
	s.available.Set(1)
	return []prometheus.Collector{s.available, s.unavailable}
}

// StoreAvailable records a change of the shared store's availability.
func (m *Metrics) StoreAvailable(ok bool) {
	if ok {
		m.store.available.Set(1)
		return
	}
	m.store.available.Set(0)
	m.store.unavailable.Inc()
}
