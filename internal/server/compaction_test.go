package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/internal/config"
)

// lockedBuffer is a log sink the server's goroutines may write concurrently.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestBackgroundCompaction runs a real server whose clock the test moves:
// once a recorded preflight is older than wal.retention and its binding has
// expired, the background loop removes it without anyone asking, and the
// chain still verifies.
func TestBackgroundCompaction(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	cfg := config.Default()
	cfg.HTTPAddr, cfg.GRPCAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
	cfg.ContractRefine.Mode = config.ModeEnforce
	cfg.ContractRefine.BindingWindow = time.Minute
	cfg.WAL.Retention = time.Hour
	cfg.WAL.CompactionInterval = 20 * time.Millisecond
	logs := &lockedBuffer{}
	bound := make(chan Addrs, 1)
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := New(ctx, cfg, Options{Now: now, Logger: slog.New(slog.NewJSONHandler(logs, nil)),
		Listening: func(a Addrs) { bound <- a }})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	var base string
	select {
	case a := <-bound:
		base = "http://" + a.HTTP
	case err := <-done:
		t.Fatalf("server stopped before listening: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("server did not listen within 30s")
	}

	plan := `{"intent":{"summary":"echo","plan_hash":"plan-compaction"},
	  "plan":{"steps":[{"id":"s1","kind":"tool.echo","zone":"any","args":{}}]},
	  "context":{"actor":{"id":"user:example","session_id":"session:compaction"}}}`
	resp, err := http.Post(base+"/v1/preflight", "application/json", strings.NewReader(plan))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		PreflightID string `json:"preflight_id"`
		AuditID     string `json:"audit_id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&d)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("preflight: %d %v", resp.StatusCode, err)
	}
	status := func(path string) int {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// The loop runs every 20ms, but nothing is old enough yet.
	for range 3 {
		if got := status("/v1/audit/" + d.AuditID); got != http.StatusOK {
			t.Fatalf("audit join before the retention passed: %d", got)
		}
	}

	clock.Add(int64(2 * time.Hour))
	deadline := time.Now().Add(20 * time.Second)
	for status("/v1/audit/"+d.AuditID) != http.StatusNotFound {
		if time.Now().After(deadline) {
			t.Fatal("the background compaction did not remove the old preflight within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := status("/v1/preflight/" + d.PreflightID); got != http.StatusNotFound {
		t.Fatalf("GET /v1/preflight of a compacted preflight: %d", got)
	}
	rep, err := srv.WAL().Verify(context.Background())
	if err != nil || !rep.OK() {
		t.Fatalf("verify after background compaction: %+v, %v", rep, err)
	}
	// The page goes at the first commit; the log line follows once the run
	// has finished its last transaction.
	for !strings.Contains(logs.String(), `"msg":"wal compacted","frames_removed":1,`) {
		if time.Now().After(deadline) {
			t.Fatalf("no compaction log line:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
