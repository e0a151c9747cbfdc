package wal

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/internal/benchutil"
	"github.com/contractrefine/autonomy/preflight"
)

// decisionAttrs is the shape of a gate decision frame's attrs, so the
// benchmarks encode what the service encodes.
func decisionAttrs(i int) map[string]any {
	return map[string]any{
		"outcome": "deny", "enforced": true, "mode": "enforce",
		"reason": "contract: preflight_replay", "status": 403,
		"request_id": fmt.Sprintf("req-%d", i), "tool_kind": "tool.echo",
		"method": "POST", "path": "/v1/tool", "preflight_id": "pf_0123456789abcdefghij",
		"args_digest":     "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
		"bundle_revision": "0123456789abcdef",
	}
}

// BenchmarkAppend measures durable appends of one decision frame each by 1, 8
// and 64 concurrent writers, with fsync and (the floor) without. writes/commit
// shows how many appends shared one commit.
//
// audit=one puts every frame under one audit id (a preflight's calls);
// audit=fresh gives each its own random id (calls without a preflight), so
// each frame also inserts a key at a random place in the audit index;
// audit=ordered gives each its own id that sorts after the previous one
// (a time-ordered id), so the index grows at its end.
func BenchmarkAppend(b *testing.B) {
	for _, audit := range []string{"one", "fresh", "ordered"} {
		for _, sync := range []bool{true, false} {
			for _, writers := range []int{1, 8, 64} {
				name := fmt.Sprintf("audit=%s/fsync=%v/writers=%d", audit, sync, writers)
				b.Run(name, func(b *testing.B) {
					benchAppend(b, audit, sync, writers)
				})
			}
		}
	}
}

func benchAppend(b *testing.B, audit string, sync bool, writers int) {
	var commits atomic.Int64
	db := openTest(b, &Options{NoSync: !sync, OnCommit: func(int, time.Duration, error) { commits.Add(1) }})
	ctx := context.Background()
	auditIDs := make([]string, b.N)
	for i := range auditIDs {
		switch audit {
		case "one":
			auditIDs[i] = "au_bench"
		case "fresh":
			auditIDs[i] = randomID()
		case "ordered":
			auditIDs[i] = fmt.Sprintf("au_%012d", i) + randomID()[3:13]
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	commits.Store(0)
	benchutil.Parallel(b, writers, func(i int) error {
		_, err := db.AppendDecision(ctx, FrameInput{Kind: KindDecision, AuditID: auditIDs[i], Time: t0, Attrs: decisionAttrs(i)})
		return err
	})
	b.StopTimer()
	if n := commits.Load(); n > 0 {
		b.ReportMetric(float64(b.N)/float64(n), "writes/commit")
	}
}

// randomID is shaped like an audit id: 22 random base64url characters.
func randomID() string {
	var r [16]byte
	_, _ = rand.Read(r[:])
	return "au_" + base64.RawURLEncoding.EncodeToString(r[:])
}

// BenchmarkConsume measures the durable consume of a fresh one-step
// preflight (the allow path's write) by 1 and 64 writers.
func BenchmarkConsume(b *testing.B) {
	for _, writers := range []int{1, 64} {
		b.Run(fmt.Sprintf("writers=%d", writers), func(b *testing.B) {
			db := openTest(b, nil)
			ctx := context.Background()
			bindings := fillBindings(b, db, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			benchutil.Parallel(b, writers, func(i int) error {
				res, err := db.Consume(ctx, ConsumeRequest{Binding: &bindings[i], Kind: "tool.echo",
					RequestID: fmt.Sprintf("req-%d", i), Time: t0,
					Decision: func(ConsumeResult) FrameInput {
						return FrameInput{Kind: KindDecision, AuditID: bindings[i].AuditID, Time: t0, Attrs: decisionAttrs(i)}
					}})
				if err == nil && res.Status != Consumed {
					err = fmt.Errorf("consume %d: %v", i, res.Status)
				}
				return err
			})
		})
	}
}

// fillBindings records n one-step tool.echo preflights in big transactions.
func fillBindings(b *testing.B, db *DB, n int) []preflight.Binding {
	b.Helper()
	out := make([]preflight.Binding, n)
	for i := range out {
		out[i] = testBinding(fmt.Sprintf("pf_bench_%012d", i), "tool.echo")
	}
	const chunk = 5000
	for start := 0; start < n; start += chunk {
		end := min(start+chunk, n)
		err := db.Update(context.Background(), func(tx *Tx) error {
			for i := start; i < end; i++ {
				if _, err := tx.RecordPreflight(PreflightRecord{Binding: out[i], Decision: json.RawMessage(`{"outcome":"pass"}`), Time: t0}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return out
}

// BenchmarkRecordPreflight measures one durable preflight record at a time
// (the serial preflight's write) on an empty log and on one already holding
// 300,000 preflights. writes/commit counts bbolt's page writes per commit: random
// keys (preflight ids, audit ids, session keys) land on random leaves, and
// a bigger tree has more levels above each.
func BenchmarkRecordPreflight(b *testing.B) {
	for _, prefill := range []int{0, 300000} {
		b.Run(fmt.Sprintf("prefilled=%d", prefill), func(b *testing.B) {
			dir := b.TempDir()
			if prefill > 0 {
				db, err := Open(dir, &Options{NoSync: true})
				if err != nil {
					b.Fatal(err)
				}
				fillBindings(b, db, prefill)
				db.Close()
			}
			db, err := Open(dir, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			ctx := context.Background()
			decision := json.RawMessage(`{"outcome":"pass","reason":"contract: passed"}`)
			recs := make([]PreflightRecord, b.N)
			for i := range recs {
				bd := testBinding(randomID(), "tool.echo")
				recs[i] = PreflightRecord{Binding: bd, Decision: decision, Time: t0, SessionKey: randomID()}
			}
			before := db.bolt.Stats().TxStats
			b.ReportAllocs()
			b.ResetTimer()
			for i := range recs {
				if _, err := db.RecordPreflight(ctx, recs[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			after := db.bolt.Stats().TxStats
			b.ReportMetric(float64(after.GetWrite()-before.GetWrite())/float64(b.N), "writes/commit")
		})
	}
}
