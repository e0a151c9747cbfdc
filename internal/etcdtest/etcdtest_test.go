package etcdtest

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	RunMemberIfAsked()
	os.Exit(m.Run())
}

// roundTrip writes a key through the cluster and reads it back.
func roundTrip(t *testing.T, c *Cluster, key string) {
	t.Helper()
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// After a member is killed the others may first have to elect a
	// leader, longer on a loaded machine: a put that times out inside the
	// cluster is tried again until the deadline, as an etcd client would.
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	for {
		attempt, done := context.WithTimeout(ctx, 10*time.Second)
		_, err := cli.Put(attempt, key, "v")
		done()
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("put %s: %v", key, err)
		case <-time.After(100 * time.Millisecond): // back off, as the client does
		}
	}
	r, err := cli.Get(ctx, key)
	if err != nil || len(r.Kvs) != 1 || string(r.Kvs[0].Value) != "v" {
		t.Fatalf("get %s: %v %v", key, r, err)
	}
}

func TestSingleInProcess(t *testing.T) {
	c := StartT(t, Options{})
	roundTrip(t, c, "a")
	c.Members[0].Stop()
	if c.Members[0].Running() {
		t.Fatal("stopped member still running")
	}
	if err := c.Members[0].Start(); err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c, "b")
}

func TestThreeProcessesSurviveKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three etcd processes")
	}
	c := StartT(t, Options{Members: 3, Kind: Process})
	roundTrip(t, c, "a")
	c.Members[0].Kill()
	roundTrip(t, c, "b") // two of three still make a quorum
	if err := c.Members[0].Start(); err != nil {
		t.Fatal(err)
	}
	roundTrip(t, c, "c")
}

func TestBinary(t *testing.T) {
	p, err := exec.LookPath("etcd")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("etcd is required under CI (Debian's etcd-server): %v", err)
		}
		t.Skipf("etcd not found (Debian's etcd-server): %v", err)
	}
	c := StartT(t, Options{Kind: Binary, BinaryPath: p})
	roundTrip(t, c, "a")
}
