package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

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
// until etcd answers, the replica is unready and denies (503).
func (s *Server) openShared(ctx context.Context, db *wal.DB) (*etcdstore.Store, error) {
	e := &s.cfg.Store.Etcd
	tc, err := etcdTLS(&s.cfg)
	if err != nil {
		return nil, err
	}
	es, err := etcdstore.Open(etcdstore.Options{Endpoints: e.Endpoints, Prefix: e.Prefix,
		DialTimeout: e.DialTimeout, RequestTimeout: e.RequestTimeout, TLS: tc, RecordTTL: e.RecordTTL,
		Replica: s.cfg.Replica(), Log: db, Logger: s.log, OnAvailable: s.obs.metrics.StoreAvailable, Now: s.now})
	if err != nil {
		return nil, err
	}
	if err := es.Probe(ctx); err != nil {
		s.log.Error("etcd does not answer yet; unready until it does", "endpoints", e.Endpoints, "err", err)
	}
	return es, nil
}

// etcdTLS is the etcd client's TLS configuration from store.etcd.tls; nil
// when none is set (check-config loads it too).
func etcdTLS(cfg *config.Config) (*tls.Config, error) {
	t := cfg.Store.Etcd.TLS
	if !t.Enabled() {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("store.etcd.tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("store.etcd.tls.ca_file %s: no PEM certificate in it", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("store.etcd.tls.cert_file %s and key_file %s: %w", t.CertFile, t.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}
