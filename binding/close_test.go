package binding

import (
	"context"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/internal/bundle/bundletest"
	"github.com/contractrefine/autonomy/internal/ids"
	"github.com/contractrefine/autonomy/wal"
)

// TestGatesLeaveNoGoroutines: building and closing 100 gates leaves no
// goroutine behind (the decision cache once started one per gate).
func TestGatesLeaveNoGoroutines(t *testing.T) {
	db, err := wal.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	before := runtime.NumGoroutine()
	for range 100 {
		g := New(Options{Store: db, Log: db, Policy: func() Policy { return nil }})
		g.Close()
	}
	// Goroutines of the runtime or the test framework may come and go; a
	// goroutine per gate would be 100 more.
	if after := runtime.NumGoroutine(); after-before >= 10 {
		t.Fatalf("%d goroutines before 100 gates, %d after", before, after)
	}
}

// countingStore counts the decisions read from the log.
type countingStore struct {
	*wal.DB
	reads atomic.Int32
}

func (s *countingStore) Decision(ctx context.Context, id string) ([]byte, error) {
	s.reads.Add(1)
	return s.DB.Decision(ctx, id)
}

// TestDecisionCacheFollowsTheClock: a decision the policy read is served
// from the cache while Options.Now is within CacheTTL of its reading, and
// read from the log again after.
func TestDecisionCacheFollowsTheClock(t *testing.T) {
	b := bundletest.Load(t, map[string]string{"policy.rego": pfPolicy,
		"data.yaml": "autonomy:\n  capabilities:\n    tool.echo: { zones: [\"*\"] }\n"}, nil)
	db, err := wal.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store := &countingStore{DB: db}
	now := time.Date(2026, 6, 23, 14, 29, 0, 0, time.UTC)
	var clock atomic.Int64
	clock.Store(now.UnixNano())
	g := New(Options{Store: store, Log: db, Policy: func() Policy { return b }, Mode: ModeEnforce,
		CacheTTL: 10 * time.Second, Now: func() time.Time { return time.Unix(0, clock.Load()).UTC() }, NewID: ids.Audit})
	defer g.Close()
	pid := recordThreeEchoSteps(t, db, now)
	for i, step := range []struct {
		advance time.Duration
		reads   int32
	}{{0, 1}, {5 * time.Second, 1}, {6 * time.Second, 2}} {
		clock.Add(int64(step.advance))
		got := g.Check(context.Background(), &Request{Method: http.MethodPost, Path: "/v1/tool",
			Headers: map[string]string{HeaderPreflightID: pid, HeaderRequestID: ids.Audit()},
			Body:    []byte(`{"kind":"tool.echo","args":{}}`)})
		if !got.Allowed {
			t.Fatalf("call %d: %+v", i, got)
		}
		if n := store.reads.Load(); n != step.reads {
			t.Errorf("call %d, %v later: %d decision reads, want %d", i, step.advance, n, step.reads)
		}
	}
}
