package etcdstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Two live processes with one replica_id would write frame copies under
// the same keys (P f/<audit>/<replica>/<seq>) and each take the other's
// for its own. So a replica holds its presence key, P l/<replica>, under
// its session's lease, naming its log's instance: a random token kept
// beside the log in the data directory (instanceFile). A restart of the
// same log, even before the lease of the process it replaces runs out,
// takes the key over; a process with another log finds it held and is not
// ready (Probe fails, naming the clash), and refuses every decision and
// frame (owned), until the holder's lease runs out.

// ErrDuplicateReplica is a replica_id another live process holds.
var ErrDuplicateReplica = errors.New("etcdstore: replica_id held by another live process")

// instanceFile names the file beside the log that holds its instance.
const instanceFile = "replica-instance"

// loadInstance reads the instance of the log at logPath, making one when
// the data directory has none yet and create is set ("" otherwise).
func loadInstance(logPath string, create bool) (string, error) {
	path := filepath.Join(filepath.Dir(logPath), instanceFile)
	if b, err := os.ReadFile(path); err == nil {
		if v := strings.TrimSpace(string(b)); v != "" {
			return v, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("etcdstore: read %s: %w", path, err)
	}
	if !create {
		return "", nil
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	v := hex.EncodeToString(b[:])
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(v+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("etcdstore: write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("etcdstore: %w", err)
	}
	return v, nil
}

// owned refuses a write while another live process holds this replica_id:
// its frames and copies would be taken for the holder's, which a replica
// unready to Envoy and Kubernetes still gets from callers that reach it
// directly (a sidecar's agent, the HTTP API). It asks etcd again, one
// transaction, so the replica serves once the holder is gone. The error
// is ErrUnavailable's: checks and preflights answer 503.
func (s *Store) owned(ctx context.Context) error {
	if !s.clash.Load() {
		return nil
	}
	err := s.present(ctx)
	if errors.Is(err, ErrDuplicateReplica) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// present holds the replica's presence key under the session's lease, at
// once when it already does.
func (s *Store) present(ctx context.Context) error {
	if s.o.Inspect || s.instance == "" {
		return nil // opened to inspect
	}
	sess, err := s.concSession(ctx)
	if err != nil {
		return err
	}
	lease := int64(sess.Lease())
	if s.presentUnder.Load() == lease {
		return nil
	}
	key := s.p.presence(s.o.Replica)
	octx, cancel := s.opCtx(ctx)
	defer cancel()
	resp, err := s.cli.Txn(octx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, s.instance, clientv3.WithLease(sess.Lease()))).
		Else(clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "=", s.instance)},
			[]clientv3.Op{clientv3.OpPut(key, s.instance, clientv3.WithLease(sess.Lease()))},
			[]clientv3.Op{clientv3.OpGet(key)})).
		Commit()
	if err = s.seen(octx, err); err != nil {
		return err
	}
	if !resp.Succeeded && !resp.Responses[0].GetResponseTxn().GetSucceeded() {
		if s.clash.CompareAndSwap(false, true) {
			s.logger.Error("etcd: another live process holds this replica_id; not ready until it is gone: give each replica its own id",
				"replica", s.o.Replica)
		}
		return fmt.Errorf("%w: replica_id %q: another process, with another log, holds it; this one is ready once that one has been gone %ds",
			ErrDuplicateReplica, s.o.Replica, claimTTL)
	}
	if s.clash.CompareAndSwap(true, false) {
		s.logger.Info("etcd: this replica_id is this process's again", "replica", s.o.Replica)
	}
	s.presentUnder.Store(lease)
	return nil
}
