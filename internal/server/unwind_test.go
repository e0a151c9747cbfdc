package server

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/contractrefine/autonomy/internal/config"
)

// TestNewUnwindsOnFailure: a New that fails after starting the tracing
// exporter (here: the data directory is a file, so the WAL cannot open)
// stops the exporter again; failing repeatedly leaves no goroutines.
func TestNewUnwindsOnFailure(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.DataDir = notDir
	cfg.Tracing.OTLPEndpoint = "http://127.0.0.1:1" // connected lazily: nothing listens there
	before := runtime.NumGoroutine()
	for range 5 {
		if s, err := New(context.Background(), cfg, Options{}); err == nil {
			s.Close()
			t.Fatal("New succeeded on a data dir that is a file")
		}
	}
	// An exporter left running holds a batch goroutine and its gRPC
	// connection's: five failures would leave ten or more.
	eventually(t, "goroutines back to where they were", func() bool { return runtime.NumGoroutine() < before+5 })
}
