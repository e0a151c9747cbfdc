package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/internal/config"
)

// TestBackgroundCompaction runs a real server whose clock the test moves:
// once a recorded preflight is older than wal.retention and its binding has
// expired, the background loop removes it without anyone asking, and the
// chain still verifies.
func TestBackgroundCompaction(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	e := obsStart(t, func(c *config.Config) {
		c.ContractRefine.BindingWindow = time.Minute
		c.WAL.Retention = time.Hour
		c.WAL.CompactionInterval = 20 * time.Millisecond
	}, Options{Now: now})
	base, srv, logs := e.base, e.srv, e.logs

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
