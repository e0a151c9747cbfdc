package etcdstore

import (
	"context"
	"errors"
	"testing"
)

// TestDuplicateReplicaIsNotReady: a second live process with the same
// replica_id and another log is not ready, naming the clash; a restart of
// the same log takes its name back at once, though the lease of the
// process it replaces has not run out.
func TestDuplicateReplicaIsNotReady(t *testing.T) {
	ctx := context.Background()
	prefix, dirA, dirB := newPrefix(), t.TempDir(), t.TempDir()
	a := open(t, "replica-a", prefix, dirA)
	defer closeStore(a)
	if err := a.Probe(ctx); err != nil {
		t.Fatalf("the first process of replica-a: %v", err)
	}
	b := open(t, "replica-a", prefix, dirB)
	defer closeStore(b)
	if err := b.Probe(ctx); !errors.Is(err, ErrDuplicateReplica) {
		t.Fatalf("a second process of replica-a with another log: %v, want ErrDuplicateReplica", err)
	}
	// The first process is killed (its lease lives on) and restarted on
	// its own log: it is ready at once, and the impostor still is not.
	a.Close()
	a.log.Close()
	a2 := open(t, "replica-a", prefix, dirA)
	defer closeStore(a2)
	if err := a2.Probe(ctx); err != nil {
		t.Fatalf("replica-a restarted on its own log: %v", err)
	}
	if err := b.Probe(ctx); !errors.Is(err, ErrDuplicateReplica) {
		t.Fatalf("the other log after replica-a's restart: %v, want ErrDuplicateReplica", err)
	}
	// Another name on the other log is no clash.
	c := open(t, "replica-c", prefix, t.TempDir())
	defer closeStore(c)
	if err := c.Probe(ctx); err != nil {
		t.Fatalf("replica-c: %v", err)
	}
}
