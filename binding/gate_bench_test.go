package binding

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/internal/benchutil"
	"github.com/contractrefine/autonomy/internal/bundle"
	"github.com/contractrefine/autonomy/internal/ids"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// benchEnv is a gate in enforce mode on a real, fsyncing WAL and the
// embedded default bundle: what the service runs.
type benchEnv struct {
	commits    atomic.Int64
	writes     atomic.Int64
	commitTime atomic.Int64
	gate       *Gate
	db         *wal.DB
	b          *bundle.Bundle
	now        time.Time
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	ctx := context.Background()
	bun, err := bundle.Load(ctx, "", nil)
	if err != nil {
		b.Fatal(err)
	}
	e := &benchEnv{b: bun, now: time.Now().UTC()}
	db, err := wal.Open(b.TempDir(), &wal.Options{OnCommit: func(n int, took time.Duration, _ error) {
		e.commits.Add(1)
		e.writes.Add(int64(n))
		e.commitTime.Add(int64(took))
	}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	e.db = db
	e.gate = New(Options{Store: db, Log: db, Policy: func() Policy { return bun }, Mode: ModeEnforce,
		CacheSize: 1 << 22, NewID: ids.Audit, Now: func() time.Time { return e.now }})
	return e
}

// benchDecision returns the decision JSON the verifier gives a one-step
// tool.echo plan, so cached bindings carry a realistic decision.
func (e *benchEnv) benchDecision(b *testing.B) (*preflight.Request, []byte) {
	b.Helper()
	req, rerr := preflight.DecodeRequest([]byte(`{"intent":{"summary":"echo","plan_hash":"plan-1"},` +
		`"plan":{"steps":[{"id":"s1","kind":"tool.echo","zone":"default","args":{"msg":"hi"}}]},` +
		`"context":{"actor":{"id":"user:example","session_id":"session:1"}}}`))
	if rerr != nil {
		b.Fatal(rerr)
	}
	v := preflight.NewVerifier(preflight.Options{Now: func() time.Time { return e.now }})
	d, err := v.Evaluate(context.Background(), preflight.Input{Request: req, Governance: e.b.Governance(),
		Clauses: e.b.Clauses(), Attempt: 1})
	if err != nil || d.Outcome != preflight.OutcomePass {
		b.Fatalf("decision %+v, %v", d, err)
	}
	d.PreflightID, d.AuditID = ids.Preflight(), ids.Audit()
	raw, err := d.CanonicalJSON()
	if err != nil {
		b.Fatal(err)
	}
	return req, raw
}

// preflights records n one-step tool.echo preflights (big commits, not
// timed) and returns their ids. warm puts them in the binding cache.
func (e *benchEnv) preflights(b *testing.B, n int, warm bool) []string {
	b.Helper()
	req, _ := e.benchDecision(b)
	v := preflight.NewVerifier(preflight.Options{Now: func() time.Time { return e.now }})
	d, err := v.Evaluate(context.Background(), preflight.Input{Request: req, Governance: e.b.Governance(),
		Clauses: e.b.Clauses(), Attempt: 1})
	if err != nil {
		b.Fatal(err)
	}
	idList := make([]string, n)
	recs := make([]wal.PreflightRecord, n)
	for i := range recs {
		d.PreflightID, d.AuditID = ids.Preflight(), ids.Audit()
		bind, err := preflight.BindingOf(req, d, e.now.Add(time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		raw, err := d.CanonicalJSON()
		if err != nil {
			b.Fatal(err)
		}
		idList[i] = d.PreflightID
		recs[i] = wal.PreflightRecord{Binding: bind, Decision: raw, Time: e.now}
	}
	const chunk = 2000
	for start := 0; start < n; start += chunk {
		end := min(start+chunk, n)
		err := e.db.Update(context.Background(), func(tx *wal.Tx) error {
			for _, r := range recs[start:end] {
				if _, err := tx.RecordPreflight(r); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	if warm {
		for _, id := range idList {
			if _, err := e.gate.lookup(context.Background(), id, e.now); err != nil {
				b.Fatal(err)
			}
		}
	}
	return idList
}

func toolRequest(kind, preflightID string, i int) *Request {
	h := map[string]string{HeaderRequestID: fmt.Sprintf("req-%d", i), "content-type": "application/json"}
	if preflightID != "" {
		h[HeaderPreflightID] = preflightID
	}
	return &Request{Method: http.MethodPost, Path: "/v1/tool", Headers: h,
		Body: []byte(`{"kind":"` + kind + `","args":{"msg":"hi"}}`)}
}

// BenchmarkCheck measures Gate.Check in enforce mode on a durable WAL, by 1
// and 64 concurrent callers:
//   - allow: a fresh one-step preflight id per call, binding cached, the
//     consume committed before the answer;
//   - replay: an id already consumed (403 contract: preflight_replay);
//   - no_header_deny: a requires_preflight kind without the header (403);
//   - no_header_allow: a kind that needs no preflight, policy allows.
func BenchmarkCheck(b *testing.B) {
	cases := []struct {
		name   string
		setup  func(b *testing.B, e *benchEnv) func(i int) *Request
		status int
	}{
		{"allow", func(b *testing.B, e *benchEnv) func(int) *Request {
			idList := e.preflights(b, b.N, true)
			return func(i int) *Request { return toolRequest("tool.echo", idList[i], i) }
		}, http.StatusOK},
		{"replay", func(b *testing.B, e *benchEnv) func(int) *Request {
			id := e.preflights(b, 1, true)[0]
			if d := e.gate.Check(context.Background(), toolRequest("tool.echo", id, -1)); !d.Allowed {
				b.Fatalf("first use denied: %+v", d)
			}
			return func(i int) *Request { return toolRequest("tool.echo", id, i) }
		}, http.StatusForbidden},
		{"no_header_deny", func(b *testing.B, e *benchEnv) func(int) *Request {
			return func(i int) *Request { return toolRequest("tool.shell", "", i) }
		}, http.StatusForbidden},
		{"no_header_allow", func(b *testing.B, e *benchEnv) func(int) *Request {
			return func(i int) *Request { return toolRequest("tool.echo", "", i) }
		}, http.StatusOK},
	}
	for _, tc := range cases {
		for _, conc := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/conc=%d", tc.name, conc), func(b *testing.B) {
				e := newBenchEnv(b)
				req := tc.setup(b, e)
				reqs := make([]*Request, b.N)
				for i := range reqs {
					reqs[i] = req(i)
				}
				ctx := context.Background()
				b.ReportAllocs()
				e.commits.Store(0)
				e.writes.Store(0)
				e.commitTime.Store(0)
				b.ResetTimer()
				benchutil.Parallel(b, conc, func(i int) error {
					if d := e.gate.Check(ctx, reqs[i]); d.Status != tc.status {
						return fmt.Errorf("call %d: %+v", i, d)
					}
					return nil
				})
				b.StopTimer()
				if n := e.commits.Load(); n > 0 {
					b.ReportMetric(float64(e.writes.Load())/float64(n), "writes/commit")
					b.ReportMetric(float64(e.commitTime.Load())/float64(n)/1e3, "µs/commit")
				}
			})
		}
	}
}
