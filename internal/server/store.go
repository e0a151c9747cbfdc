package server

import (
	"context"
	"errors"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/internal/config"
	"github.com/contractrefine/autonomy/internal/etcdstore"
	"github.com/contractrefine/autonomy/internal/httpapi"
	"github.com/contractrefine/autonomy/internal/state"
	"github.com/contractrefine/autonomy/wal"
)

// stateStore is where the state that decides answers lives, and the logs
// the gate and the API write their frames through: the WAL itself on
// bbolt; on etcd, the etcd store, which writes to the WAL and copies the
// frames for the other replicas.
type stateStore interface {
	state.Store
	binding.Log
	httpapi.Log
}

var (
	_ stateStore = (*wal.DB)(nil)
	_ stateStore = (*etcdstore.Store)(nil)
	// A refusal's frame does not wait for its copy to etcd.
	_ binding.RefusalLog = (*etcdstore.Store)(nil)
)

// walReplica is the replica name frames carry: set with the etcd backend,
// where frames of several replicas meet, or when replica_id is.
func walReplica(cfg *config.Config) string {
	if cfg.StoreBackend() == config.BackendEtcd || cfg.ReplicaID != "" {
		return cfg.Replica()
	}
	return ""
}

// openShared opens the etcd store over the WAL. It does not wait for etcd:
// the server listens at once, and is unready until its first probe hears
// from etcd (Run); a call meanwhile is decided if etcd answers it, else
// refused with 503.
func (s *Server) openShared(ctx context.Context, db *wal.DB) (*etcdstore.Store, error) {
	e := &s.cfg.Store.Etcd
	es, err := etcdstore.Open(etcdstore.Options{Endpoints: e.Endpoints, Prefix: e.Prefix,
		DialTimeout: e.DialTimeout, RequestTimeout: e.RequestTimeout, TLS: s.sec.etcdTLS, RecordTTL: e.RecordTTL,
		Replica: s.cfg.Replica(), Log: db, Logger: s.log, OnAvailable: s.storeAvailable, Now: s.now})
	if err != nil {
		return nil, err
	}
	return es, nil
}

// storeAvailable is told each change of etcd's availability as a request
// met it: the metric, and readiness at once. The background probe would
// find it up to a probe period and a request timeout later, while Envoy's
// and Kubernetes' health checks, which read grpc.health.v1 and /readyz,
// kept sending calls that can only be refused. Its return is confirmed by
// a probe, which also finds whether the log writes.
func (s *Server) storeAvailable(ok bool) {
	s.obs.metrics.StoreAvailable(ok)
	if !ok {
		s.setReady(errors.New("etcd: unavailable; denying until it answers"))
		return
	}
	go s.probe(context.Background())
}
