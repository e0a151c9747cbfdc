package wal

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fillServed writes sets × 3 frames in the service's proportions: a
// preflight (with a decision of a real one's size), its consumed marker
// frame and the allow's decision frame.
func fillServed(b testing.TB, dir string, sets int) {
	b.Helper()
	db, err := Open(dir, &Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	decision := json.RawMessage(`{"outcome":"pass","reason":"contract: passed","checks":[` +
		strings.Repeat(`{"contract":"contract: scope","outcome":"pass","detail":"tool.echo is allowed in zone default"},`, 12) +
		`{"contract":"contract: budget","outcome":"pass"}]}`)
	const chunk = 2000
	for start := 0; start < sets; start += chunk {
		err := db.Update(context.Background(), func(tx *Tx) error {
			for i := start; i < min(start+chunk, sets); i++ {
				bd := testBinding(fmt.Sprintf("pf_verify_%012d", i), "tool.echo")
				if _, err := tx.RecordPreflight(PreflightRecord{Binding: bd, Decision: decision, Time: t0}); err != nil {
					return err
				}
				res, err := tx.Consume(ConsumeRequest{Binding: &bd, Kind: "tool.echo", RequestID: "req-" + strconv.Itoa(i), Time: t0,
					Decision: func(ConsumeResult) FrameInput {
						return FrameInput{Kind: KindDecision, AuditID: bd.AuditID, Time: t0, Attrs: decisionAttrs(i)}
					}})
				if err == nil && res.Status != Consumed {
					err = fmt.Errorf("consume %d: %v", i, res.Status)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerify measures Verify (what serve runs at open) of a log of
// VERIFY_FRAMES frames (default 99,000) in the service's proportions; it
// reports the cost per frame, the figure docs/PERFORMANCE.md extrapolates
// to 1,000,000 frames.
func BenchmarkVerify(b *testing.B) {
	frames := verifyFrames()
	dir := b.TempDir()
	fillServed(b, dir, frames/3)
	db, err := Open(dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime(b)
	for b.Loop() {
		rep, err := db.Verify(context.Background())
		if err != nil || !rep.OK() || rep.Frames != frames/3*3 {
			b.Fatalf("verify: %+v, %v", rep, err)
		}
	}
	n := float64(b.N) * float64(frames/3*3)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/frame")
	// The CPU the process spent (the collector's included) holds on a
	// machine shared with other work, where the elapsed time does not.
	b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/n, "cpu-ns/frame")
}

// verifyFrames is VERIFY_FRAMES, or 99,000 when it is not set.
func verifyFrames() int {
	if v, err := strconv.Atoi(os.Getenv("VERIFY_FRAMES")); err == nil && v > 0 {
		return v
	}
	return 99000
}

// cpuTime is the user and system CPU time the process has spent.
func cpuTime(b testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestVerifyDecodesEachFrameOnce: the binding records and consumed
// markers are checked against the frames the walk already decoded, not by
// reading each frame again. Reading them again cost 60 allocations a frame
// in the service's proportions; the walk alone takes about 40.
func TestVerifyDecodesEachFrameOnce(t *testing.T) {
	const sets = 300
	dir := t.TempDir()
	fillServed(t, dir, sets)
	db, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	allocs := testing.AllocsPerRun(3, func() {
		if rep, err := db.Verify(context.Background()); err != nil || !rep.OK() {
			t.Fatalf("verify: %+v, %v", rep, err)
		}
	})
	if perFrame := allocs / (3 * sets); perFrame > 52 {
		t.Errorf("verify took %.1f allocations a frame, want at most 52 (each frame decoded once)", perFrame)
	} else {
		t.Logf("%.1f allocations a frame", perFrame)
	}
}
