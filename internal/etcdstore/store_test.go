package etcdstore

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/contractrefine/autonomy/internal/etcdtest"
	"github.com/contractrefine/autonomy/internal/state"
	"github.com/contractrefine/autonomy/internal/state/statetest"
	"github.com/contractrefine/autonomy/wal"
)

var cluster *etcdtest.Cluster

func TestMain(m *testing.M) {
	etcdtest.RunMemberIfAsked()
	c, err := etcdtest.Start(etcdtest.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdstore tests:", err)
		os.Exit(1)
	}
	cluster = c
	code := m.Run()
	c.Close()
	os.Exit(code)
}

var prefixes atomic.Int64

// open opens a store on the shared cluster under a prefix of its own, so
// each test starts empty, with its own WAL.
func open(t *testing.T, replica, prefix, dir string) *Store {
	t.Helper()
	log, err := wal.Open(dir, &wal.Options{Replica: replica})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(Options{Endpoints: cluster.Endpoints(), Prefix: prefix, Replica: replica, Log: log})
	if err != nil {
		log.Close()
		t.Fatal(err)
	}
	return s
}

func closeStore(s *Store) {
	s.Close()
	s.log.Close()
}

func newPrefix() string { return fmt.Sprintf("/test-%d-%d/", os.Getpid(), prefixes.Add(1)) }

func TestConformance(t *testing.T) {
	statetest.Run(t, func(t *testing.T) (state.Store, func() state.Store) {
		prefix, dir := newPrefix(), t.TempDir()
		s := open(t, "replica-a", prefix, dir)
		t.Cleanup(func() { closeStore(s) })
		return s, func() state.Store {
			closeStore(s)
			s = open(t, "replica-a", prefix, dir)
			return s
		}
	})
}

// TestConformanceAcrossReplicas runs the suite with the restart landing on
// another replica: state written by one is state for the other.
func TestConformanceAcrossReplicas(t *testing.T) {
	statetest.Run(t, func(t *testing.T) (state.Store, func() state.Store) {
		prefix := newPrefix()
		n := 0
		s := open(t, "replica-0", prefix, t.TempDir())
		t.Cleanup(func() { closeStore(s) })
		return s, func() state.Store {
			closeStore(s)
			n++
			s = open(t, fmt.Sprintf("replica-%d", n), prefix, t.TempDir())
			return s
		}
	})
}

func TestProbe(t *testing.T) {
	s := open(t, "replica-a", newPrefix(), t.TempDir())
	defer closeStore(s)
	if err := s.Probe(context.Background()); err != nil || !s.Available() {
		t.Fatalf("probe: %v (available %v)", err, s.Available())
	}
}
