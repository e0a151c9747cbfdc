// Package metrics exposes what the service does as Prometheus metrics: check
// and preflight latency, decisions by outcome and reason, the binding cache,
// WAL commits and size, repair sessions, API errors by code, the active mode
// and the loaded bundle.
//
// Everything is registered on a *prometheus.Registry the caller passes in;
// nothing touches the global default registry, so two servers in one test
// binary never share or collide on a metric. Metrics implements
// binding.Observer and httpapi.Observer, and WALCommit has the signature of
// wal.Options.OnCommit.
//
// # Label cardinality
//
// Every label takes values from a closed set: outcomes, modes and statuses
// are enums, reasons and error codes are the catalog's. Policy deny reasons
// come from the operator's Rego and are therefore open; the first
// MaxExtraReasons distinct ones get their own label value and any later one
// is counted as "other", so a policy that builds reasons from request data
// cannot grow the series without bound.
//
// The Observer methods run on the request path. They resolve each label
// combination once and keep the child metric in a sync.Map, so a repeat
// observation is a map load and an atomic add.
package metrics
