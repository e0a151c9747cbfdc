package etcdstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// TestClientSendsNoPingPerRequest: the store's etcd client has fixed
// flow-control windows, so grpc's window estimate, which sends a PING
// with the answers it reads, is off. A proxy between the client and etcd
// reads the client's HTTP/2 frames and counts its PINGs over a series of
// requests; keepalive PINGs come every DialKeepAliveTime (10 s by
// default), far apart from these.
func TestClientSendsNoPingPerRequest(t *testing.T) {
	proxy, pings := pingCountingProxy(t, strings.TrimPrefix(cluster.Endpoints()[0], "http://"))
	log, err := wal.Open(t.TempDir(), &wal.Options{Replica: "replica-w"})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	s, err := Open(Options{Endpoints: []string{"http://" + proxy}, Prefix: newPrefix(), Replica: "replica-w", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const calls = 40
	for i := range calls {
		b := preflight.Binding{PreflightID: fmt.Sprintf("pf_window_%d", i),
			AuditID: "au_window", Outcome: preflight.OutcomePass, ActorID: "user:a", ExpiresAt: time.Now().Add(time.Hour),
			Steps: []preflight.BoundStep{{ID: "s1", Kind: "tool.echo"}}}
		if _, err := s.RecordPreflight(ctx, wal.PreflightRecord{Binding: b, Decision: []byte(`{}`), Time: time.Now()}); err != nil {
			t.Fatal(err)
		}
		res, err := s.Consume(ctx, wal.ConsumeRequest{Binding: &b, Kind: "tool.echo", RequestID: "r", Time: time.Now()})
		if err != nil || res.Status != wal.Consumed {
			t.Fatalf("consume %d: %+v, %v", i, res, err)
		}
	}
	if n := pings.Load(); n > 2 {
		t.Fatalf("the client sent %d PINGs over %d preflights and consumes, want at most 2 (keepalive)", n, calls)
	}
}

// pingCountingProxy forwards loopback TCP connections to target and
// counts the PING frames (not acks) the client side sends.
func pingCountingProxy(t *testing.T, target string) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var pings atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go forwardCounting(t, c, target, &pings)
		}
	}()
	return ln.Addr().String(), &pings
}

func forwardCounting(t *testing.T, c net.Conn, target string, pings *atomic.Int64) {
	defer c.Close()
	up, err := net.Dial("tcp", target)
	if err != nil {
		t.Errorf("proxy: %v", err)
		return
	}
	defer up.Close()
	go func() {
		_, _ = io.Copy(c, up)
		c.Close()
	}()
	pr, pw := io.Pipe()
	go countPings(pr, pings)
	_, _ = io.Copy(io.MultiWriter(up, pw), c)
	pw.Close()
}

// countPings reads a client's side of an HTTP/2 connection.
func countPings(r io.Reader, pings *atomic.Int64) {
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(r, preface); err != nil || !bytes.Equal(preface, []byte(http2.ClientPreface)) {
		_, _ = io.Copy(io.Discard, r)
		return
	}
	fr := http2.NewFramer(nil, r)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				_, _ = io.Copy(io.Discard, r)
			}
			return
		}
		if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
			pings.Add(1)
		}
	}
}
