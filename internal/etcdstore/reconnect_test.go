package etcdstore

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/wal"
)

// TestReconnectAfterAStall: a member that accepts connections and never
// answers (a paused etcd process, a partition that drops the answers)
// costs the client one attempt per dial_timeout and a short wait, not
// grpc's defaults of 20 s a handshake and up to 120 s between attempts:
// after a stall of minutes those left a replica unready for up to two
// minutes once etcd answered again, with no connection open to notice.
// The test waits for the third attempt, which grpc's defaults make only
// after 20 s.
func TestReconnectAfterAStall(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var held []net.Conn
	attempts := make(chan struct{}, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // held open, never answered
			mu.Unlock()
			attempts <- struct{}{}
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}()

	log, err := wal.Open(t.TempDir(), &wal.Options{Replica: "replica-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	s, err := Open(Options{Endpoints: []string{"http://" + ln.Addr().String()}, Prefix: newPrefix(), Replica: "replica-a",
		Log: log, DialTimeout: 300 * time.Millisecond, RequestTimeout: 300 * time.Millisecond, Inspect: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			s.Probe(ctx) // requests keep the connection wanted
		}
	}()
	for n := 1; n <= 3; n++ {
		select {
		case <-attempts:
		case <-ctx.Done():
			t.Fatalf("%d connection attempts to a member that never answers within 15 s, want 3", n-1)
		}
	}
}
