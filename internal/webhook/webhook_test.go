package webhook_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/internal/webhook"
)

// results collects what Delivered is told, and signals each one.
type results struct {
	mu  sync.Mutex
	got []string
	ch  chan string
}

func newResults() *results { return &results{ch: make(chan string, 64)} }

func (r *results) add(s string) {
	r.mu.Lock()
	r.got = append(r.got, s)
	r.mu.Unlock()
	r.ch <- s
}

func (r *results) next(t *testing.T) string {
	t.Helper()
	select {
	case s := <-r.ch:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery result within 10 s")
		return ""
	}
}

func TestDeliversAfterRetries(t *testing.T) {
	var calls atomic.Int32
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		if r.Header.Get("Content-Type") != "application/json" || r.Method != http.MethodPost {
			t.Errorf("request %s with content type %q", r.Method, r.Header.Get("Content-Type"))
		}
		body, _ = io.ReadAll(r.Body)
	}))
	defer srv.Close()
	res := newResults()
	n := webhook.New(webhook.Options{URL: srv.URL, Retries: 3, Backoff: time.Millisecond, Delivered: res.add})
	defer n.Close()
	n.Notify(map[string]string{"event": "approvals.pending"})
	if got := res.next(t); got != "delivered" {
		t.Fatalf("result %q, want delivered", got)
	}
	var v map[string]string
	if calls.Load() != 3 || json.Unmarshal(body, &v) != nil || v["event"] != "approvals.pending" {
		t.Fatalf("%d calls, body %s", calls.Load(), body)
	}
}

func TestGivesUpAfterRetriesAndTimeouts(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		select { // slower than the timeout: every attempt fails
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	res := newResults()
	n := webhook.New(webhook.Options{URL: srv.URL, Retries: 2, Timeout: 20 * time.Millisecond,
		Backoff: time.Millisecond, Delivered: res.add})
	defer n.Close()
	n.Notify("x")
	if got := res.next(t); got != "failed" {
		t.Fatalf("result %q, want failed", got)
	}
	if c := calls.Load(); c != 3 {
		t.Fatalf("%d attempts, want 3 (one and two retries)", c)
	}
}

// TestNotifyNeverBlocks: with the worker stuck, a full queue drops.
func TestNotifyNeverBlocks(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	res := newResults()
	n := webhook.New(webhook.Options{URL: srv.URL, QueueSize: 1, Timeout: time.Minute, Delivered: res.add})
	done := make(chan struct{})
	go func() {
		for range 10 {
			n.Notify("x")
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Notify blocked")
	}
	if got := res.next(t); got != "dropped" {
		t.Fatalf("result %q, want dropped", got)
	}
	close(release)
	n.Close()
}

// TestErrorsKeepTheURLSecret: a chat webhook carries its secret in the
// path or the query; the line logged when delivery fails names the host
// only.
func TestErrorsKeepTheURLSecret(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	closed := srv.URL
	srv.Close() // nothing listens there now: every attempt is a transport error
	var logs bytes.Buffer
	res := newResults()
	n := webhook.New(webhook.Options{URL: closed + "/services/T0/B0/PATHSECRET?token=QUERYSECRET", Retries: 0,
		Timeout: time.Second, Backoff: time.Millisecond, Delivered: res.add, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	defer n.Close()
	n.Notify("x")
	if got := res.next(t); got != "failed" {
		t.Fatalf("result %q, want failed", got)
	}
	host := strings.TrimPrefix(closed, "http://")
	if line := logs.String(); strings.Contains(line, "SECRET") || !strings.Contains(line, host) {
		t.Fatalf("log %s: want the host %s named and no part of the path or query", line, host)
	}
}
