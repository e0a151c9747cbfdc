package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/internal/etcdtest"
	"github.com/contractrefine/autonomy/wal"
)

// TestMain lets the test binary stand in for the load command as the floor
// process: startFloors runs this executable again with floorEnv set.
func TestMain(m *testing.M) {
	etcdtest.RunMemberIfAsked() // the etcd member of the etcd benchmarks, when this is its process
	if os.Getenv(floorEnv) != "" {
		if err := serveFloors(); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestLoadRunsBriefly runs the whole load command for a moment against the
// real binary, scale checks included, and checks that every scenario ran,
// every answer was the one expected, and the report holds every figure.
// It asserts no timing: the figures are for people, not for tests.
func TestLoadRunsBriefly(t *testing.T) {
	dir := t.TempDir()
	cfg, rep, out := runBriefly(t, builtService(t), "-conc", "1,4", "-fill", "3000",
		"-cached", "500", "-frames", "300", "-json", filepath.Join(dir, "report.json"),
		"-service-env", "GOGC=150")

	want := map[string][]string{
		targetFloor:   {scFloorCheck, scFloorHTTP},
		targetService: {scPreflight, scConsume, scReplay, scNoHeader},
		targetFilled:  {scPreflight, scConsume, scReplay, scNoHeader},
	}
	for target, scenarios := range want {
		for _, sc := range scenarios {
			for _, conc := range cfg.conc {
				r := rep.find(target, sc, conc)
				if r.Calls == 0 || r.Errors != 0 || r.PerSecond <= 0 || r.P50Micros <= 0 || r.P99Micros < r.P50Micros {
					t.Errorf("%s / %s at %d: %+v", target, sc, conc, r)
				}
				// Every service call writes (a preflight, a marker or a
				// decision frame), so its WAL committed; a floor has none.
				if service := target != targetFloor; service != (r.CommitsPerCall > 0 && r.WritesPerCommit >= 1 && r.CommitMicros > 0) {
					t.Errorf("%s / %s at %d: %.3f commits per call, %.1f writes per commit, %.0f µs per commit",
						target, sc, conc, r.CommitsPerCall, r.WritesPerCommit, r.CommitMicros)
				}
			}
		}
	}
	if least := rep.find(targetStore, scBoltWrite, 1); least.Calls == 0 || least.P50Micros <= 0 {
		t.Errorf("least bbolt write: %+v", least)
	}
	if len(rep.Runs) != 10*len(cfg.conc)+1 {
		t.Errorf("%d runs, want %d", len(rep.Runs), 10*len(cfg.conc)+1)
	}
	if m := rep.Memory; m.RSS <= 0 || m.Peak < m.RSS || m.Anon <= 0 || m.Anon+m.File > m.RSS || m.WAL <= 0 || m.WAL > m.File {
		t.Errorf("memory %+v", m)
	}
	if rep.FillFrames != 3000 || rep.Cached != 500 || rep.CachedMemory.RSS <= 0 || rep.CachedBefore.RSS <= 0 {
		t.Errorf("fill %d, cached %d (memory %+v)", rep.FillFrames, rep.Cached, rep.CachedMemory)
	}
	if rep.FramePreflights != 300 || rep.UsedBytesPer <= 0 || rep.FileBytes < rep.UsedBytes || rep.FrameBytesPer <= 0 {
		t.Errorf("frames: %d preflights, %d file bytes, %d used, %.0f per stored frame",
			rep.FramePreflights, rep.FileBytes, rep.UsedBytes, rep.FrameBytesPer)
	}
	// Every goal this run could measure was judged: the throughput ratios
	// at 64 are absent (the run went to 4), the serial p50 ratio, the filled
	// WAL p50 for consume and preflight at each concurrency, RSS and size.
	if n := 1 + 2*len(cfg.conc) + 2; len(rep.Goals) != n {
		t.Errorf("%d goals judged, want %d: %+v", len(rep.Goals), n, rep.Goals)
	}
	for _, line := range []string{"goals (issue 22", "opa-envoy rows skipped: no -opa-envoy binary given"} {
		if !strings.Contains(out, line) {
			t.Errorf("no %q in the output", line)
		}
	}
	raw, err := os.ReadFile(cfg.jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var back report
	if err := json.Unmarshal(raw, &back); err != nil || len(back.Runs) != len(rep.Runs) || len(back.Goals) != len(rep.Goals) {
		t.Fatalf("JSON report: %v (%d runs, %d goals)", err, len(back.Runs), len(back.Goals))
	}
}

// TestLoadBesideOPAEnvoy runs the main scenarios for a moment beside
// OPA-Envoy, without and with its decision log, when AUTONOMY_OPA_ENVOY
// names an opa-envoy-plugin binary (built from its repository: it is not on
// the module proxy, and CI does not build it), and checks every OPA-Envoy
// row ran, answered as its policy says, and was judged against.
func TestLoadBesideOPAEnvoy(t *testing.T) {
	opa := os.Getenv("AUTONOMY_OPA_ENVOY")
	if opa == "" {
		t.Skip("AUTONOMY_OPA_ENVOY is not set: no opa-envoy-plugin binary to measure beside the service")
	}
	cfg, rep, out := runBriefly(t, builtService(t), "-conc", "1,64", "-frames", "0",
		"-opa-envoy", opa, "-no-decision-log")
	for _, target := range []string{targetOPA, targetOPALog} {
		for _, conc := range cfg.conc {
			if r := rep.find(target, scOPAAllow, conc); r.Calls == 0 || r.Errors != 0 || r.CPUMicros <= 0 {
				t.Errorf("%s at %d: %+v", target, conc, r)
			}
		}
	}
	if rep.OPADecisionLogBytes < 1000 {
		t.Errorf("opa-envoy's decision log holds %d bytes", rep.OPADecisionLogBytes)
	}
	// Four ratios to OPA-Envoy at 64, preflight to the HTTP floor, serial.
	if len(rep.Goals) != 6 {
		t.Errorf("%d goals judged, want 6: %+v", len(rep.Goals), rep.Goals)
	}
	if !strings.Contains(out, "log.decisions false") || strings.Contains(out, "rows skipped") {
		t.Errorf("output does not say how the service and OPA-Envoy ran:\n%s", out)
	}
}

// TestFlags: bad flags are refused before anything starts.
func TestFlags(t *testing.T) {
	cases := map[string]struct {
		args []string
		ok   bool
	}{
		"defaults":      {nil, true},
		"conc list":     {[]string{"-conc", "1, 8,64"}, true},
		"conc zero":     {[]string{"-conc", "0"}, false},
		"conc word":     {[]string{"-conc", "many"}, false},
		"duration zero": {[]string{"-duration", "0s"}, false},
		"unknown flag":  {[]string{"-nope"}, false},
		"service env":   {[]string{"-service-env", "GOGC=400, GOMEMLIMIT=120MiB"}, true},
		"env not pair":  {[]string{"-service-env", "GOGC"}, false},
		"one round":     {[]string{"-rounds", "1"}, true},
		"no rounds":     {[]string{"-rounds", "0"}, false},
		"slices short":  {[]string{"-duration", "50ms", "-rounds", "10"}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := parseFlags(tc.args)
			if (err == nil) != tc.ok {
				t.Fatalf("parseFlags(%q): %v, want ok %v", tc.args, err, tc.ok)
			}
		})
	}
}

// TestMergeWeighsSlices: two slices of one scenario merge into the figures
// one slice as long as both would have given.
func TestMergeWeighsSlices(t *testing.T) {
	ms := func(n ...int) []time.Duration {
		var d []time.Duration
		for _, x := range n {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	a := summarize(4, ms(1, 2, 3), time.Second)
	a.Target, a.Scenario, a.CPUMicros = targetService, scConsume, 10
	a.CommitsPerCall, a.WritesPerCommit, a.CommitMicros = 1, 1, 300 // 3 commits of 1 write
	b := summarize(4, ms(7, 8, 9, 10, 11, 12), 3*time.Second)
	b.CPUMicros, b.Errors, b.FirstError, b.RanOutOfIDs = 40, 2, "second", true
	b.CommitsPerCall, b.WritesPerCommit, b.CommitMicros = 0.5, 2, 600 // 3 commits of 2 writes

	m := a.merge(b)
	if m.Target != targetService || m.Scenario != scConsume || m.Conc != 4 {
		t.Errorf("merged names %q %q at %d", m.Target, m.Scenario, m.Conc)
	}
	if m.Calls != 9 || m.Seconds != 4 || m.PerSecond != 2.25 {
		t.Errorf("calls %d over %.1f s = %.2f/s, want 9 over 4 s = 2.25/s", m.Calls, m.Seconds, m.PerSecond)
	}
	if m.P50Micros != 8000 || m.P99Micros != 12000 {
		t.Errorf("p50 %.0f µs, p99 %.0f µs; want 8000 and 12000", m.P50Micros, m.P99Micros)
	}
	if m.CPUMicros != 30 { // (3×10 + 6×40) / 9
		t.Errorf("cpu %.1f µs a call, want 30", m.CPUMicros)
	}
	if m.CommitsPerCall != 6.0/9 || m.WritesPerCommit != 1.5 || m.CommitMicros != 450 {
		t.Errorf("commits %.3f a call, %.2f writes and %.0f µs a commit; want %.3f, 1.5, 450",
			m.CommitsPerCall, m.WritesPerCommit, m.CommitMicros, 6.0/9)
	}
	if m.Errors != 2 || m.FirstError != "second" || !m.RanOutOfIDs {
		t.Errorf("errors %d (%q), ran out %v", m.Errors, m.FirstError, m.RanOutOfIDs)
	}
}

// TestCPUTime reads this process's CPU time from /proc and sees it grow
// while the test works.
func TestCPUTime(t *testing.T) {
	start, err := cpuTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	sum := 0
	for {
		for i := range 1 << 20 {
			sum += i
		}
		now, err := cpuTime(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if now > start {
			break
		}
	}
	if _, err := cpuTime(-1); err == nil {
		t.Fatal("cpu time of no process")
	}
	_ = sum
}

// TestFilledWALVerifies: the scale check's pre-filled log holds what a
// served log holds (consumed markers included) and passes wal verify.
func TestFilledWALVerifies(t *testing.T) {
	dir := t.TempDir()
	if _, err := fillWAL(context.Background(), dir, 300, 0); err != nil {
		t.Fatal(err)
	}
	db, err := wal.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rep, err := db.Verify(context.Background())
	if err != nil || !rep.OK() || rep.Frames < 300 {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
	st, err := db.Stats(context.Background())
	if err != nil || st.ConsumedMarkers == 0 || st.ConsumedMarkers != st.Bindings {
		t.Fatalf("stats: %+v, %v; want a marker for every filled binding", st, err)
	}
}

// builtService builds cmd/autonomy with the command's own buildService;
// without a go tool it skips, or fails under CI.
func builtService(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("go is required under CI to build cmd/autonomy: %v", err)
		}
		t.Skipf("go not found, cannot build cmd/autonomy: %v", err)
	}
	bin, err := buildService(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// runBriefly runs the load command against bin for 150 ms per scenario
// with args added, and returns its configuration, report and output.
func runBriefly(t *testing.T, bin string, args ...string) (settings, *report, string) {
	t.Helper()
	cfg, err := parseFlags(append([]string{"-bin", bin, "-duration", "150ms", "-max-ids", "2000"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	rep, err := run(ctx, cfg, &out)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Logf("load output:\n%s", out.String())
	return cfg, rep, out.String()
}
