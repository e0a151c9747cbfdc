package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/contractrefine/autonomy/internal/benchutil"
	"github.com/contractrefine/autonomy/wal"
)

// floorEnv, set in a child's environment, makes the load command serve the
// floors instead of measuring; the test binary honours it too.
const floorEnv = "AUTONOMY_LOAD_SERVE_FLOORS"

// startTimeout bounds the wait for a child process to say where it listens.
const startTimeout = 60 * time.Second

var (
	errNoListenLine = errors.New("load: process exited before it said where it listens")
	errStartTimeout = errors.New("load: process did not say where it listens in time")
)

// floorAddrs is the line the floor process prints on stdout.
type floorAddrs struct {
	GRPC string `json:"grpc_addr"`
	HTTP string `json:"http_addr"`
}

// floorServer answers every Check with OK, doing no work: the gRPC floor.
type floorServer struct {
	authv3.UnimplementedAuthorizationServer
}

var okResponse = &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.OK)}}

func (floorServer) Check(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return okResponse, nil
}

// serveFloors runs the two floors on loopback until stdin closes (the
// parent exiting or closing it), printing their addresses first.
func serveFloors() error {
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	gs := grpc.NewServer()
	authv3.RegisterAuthorizationServer(gs, floorServer{})
	go gs.Serve(gl)
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the body as any server must, answer a small JSON document.
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"outcome":"pass"}`))
	}), ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(hl)
	line, _ := json.Marshal(floorAddrs{GRPC: gl.Addr().String(), HTTP: hl.Addr().String()})
	fmt.Println(string(line))
	_, _ = io.Copy(io.Discard, os.Stdin)
	gs.Stop()
	return hs.Close()
}

// proc is a child process the load command started.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
	stdin  io.Closer
	logs   string // file holding its stderr (and stdout, for the service)
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// errorLines is the first n error lines of the process's log so far, for a
// scenario that saw unexpected answers ("" when none or no log).
func (p *proc) errorLines(n int) string {
	raw, err := os.ReadFile(p.logs)
	if err != nil {
		return ""
	}
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		if len(out) < n && strings.Contains(line, `"level":"ERROR"`) {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; the service logged: " + strings.Join(out, " ")
}

// stop ends the process: SIGTERM, then SIGKILL if it lingers.
func (p *proc) stop() error {
	if p.stdin != nil {
		p.stdin.Close()
	}
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("load: pid %d ignored SIGTERM", p.pid())
	}
}

// startFloors starts this executable again as the floor process.
func startFloors() (*proc, floorAddrs, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, floorAddrs{}, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), floorEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, floorAddrs{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, floorAddrs{}, err
	}
	if err := cmd.Start(); err != nil {
		return nil, floorAddrs{}, err
	}
	p := &proc{cmd: cmd, exited: make(chan struct{}), stdin: stdin}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { cmd.Wait(); close(p.exited) }()
	var addrs floorAddrs
	select {
	case line, ok := <-lines:
		if !ok {
			return nil, addrs, errNoListenLine
		}
		if err := json.Unmarshal([]byte(line), &addrs); err != nil {
			p.stop()
			return nil, addrs, fmt.Errorf("load: floor process said %q: %w", line, err)
		}
	case <-time.After(startTimeout):
		p.stop()
		return nil, addrs, errStartTimeout
	}
	return p, addrs, nil
}

// serviceAddrs are the addresses from the service's "listening" log line.
type serviceAddrs struct {
	Msg  string `json:"msg"`
	HTTP string `json:"http_addr"`
	GRPC string `json:"grpc_addr"`
}

// startService runs `autonomy serve` in enforce mode on dataDir, logging (at
// the default level, info: with decisionLog one line per decision, as by
// default) to a file beside it, and waits for its "listening" line.
func startService(bin, dataDir string, env []string, decisionLog bool, args ...string) (*proc, serviceAddrs, error) {
	var addrs serviceAddrs
	cfg := filepath.Join(dataDir, "autonomy.yaml")
	yaml := "contract_refine:\n  mode: enforce\n"
	if !decisionLog {
		yaml += "log:\n  decisions: false\n"
	}
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		return nil, addrs, err
	}
	logPath := filepath.Join(dataDir, "serve.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, addrs, err
	}
	defer logFile.Close()
	cmd := exec.Command(bin, append([]string{"serve", "--config", cfg, "--http-addr", "127.0.0.1:0",
		"--grpc-addr", "127.0.0.1:0", "--data-dir", dataDir, "--mode", "enforce"}, args...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		return nil, addrs, fmt.Errorf("load: start %s: %w", bin, err)
	}
	p := &proc{cmd: cmd, exited: make(chan struct{}), logs: logPath}
	go func() { cmd.Wait(); close(p.exited) }()
	deadline := time.Now().Add(startTimeout)
	for {
		if a, ok := listeningLine(logPath); ok {
			return p, a, nil
		}
		select {
		case <-p.exited:
			raw, _ := os.ReadFile(logPath)
			return nil, addrs, fmt.Errorf("%w: %s", errNoListenLine, raw)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, addrs, errStartTimeout
		}
	}
}

// readyTimeout bounds the wait for a started service to be ready: a WAL
// pre-filled with a million frames is verified at open, at a few hundred
// microseconds a frame, before anything is decided from it.
const readyTimeout = 15 * time.Minute

// waitReady waits until the service at base answers /readyz with 200. The
// listeners open while a log that takes longer than 2 s is still being
// verified, and until then every preflight and check is a 503.
func (c *client) waitReady(ctx context.Context, base string, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if err != nil {
			return err
		}
		if resp, err := c.http.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return errors.New("load: the service exited before it was ready")
		case <-ctx.Done():
			return fmt.Errorf("load: the service was not ready within %s: %w", readyTimeout, ctx.Err())
		case <-tick.C:
		}
	}
}

// listeningLine finds the "listening" line in the service's log so far.
func listeningLine(path string) (serviceAddrs, bool) {
	f, err := os.Open(path)
	if err != nil {
		return serviceAddrs{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var a serviceAddrs
		if json.Unmarshal(sc.Bytes(), &a) == nil && a.Msg == "listening" && a.HTTP != "" && a.GRPC != "" {
			return a, true
		}
	}
	return serviceAddrs{}, false
}

// memory is a process's resident memory, from /proc/<pid>/status, and the
// resident part of its WAL mapping.
type memory struct {
	benchutil.Memory
	// WAL is the resident part of the mapping of wal.db (from
	// /proc/<pid>/smaps): the log's pages bbolt has read through its map.
	WAL int64 `json:"rss_wal_bytes"`
}

// rss reads pid's resident memory.
func rss(pid int) (memory, error) {
	var m memory
	var err error
	if m.Memory, err = benchutil.ReadMemory(pid); err != nil {
		return m, err
	}
	m.WAL, err = benchutil.MappedRSS(pid, "/"+wal.FileName)
	return m, err
}

// buildService builds ./cmd/autonomy of the module the command runs in.
func buildService(dir string) (string, error) {
	out := filepath.Join(dir, "autonomy")
	cmd := exec.Command("go", "build", "-o", out, "github.com/contractrefine/autonomy/cmd/autonomy")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("load: go build cmd/autonomy: %v\n%s", err, b)
	}
	return out, nil
}

// cpuTime is the CPU time (user and system) pid has used so far, from
// /proc/<pid>/stat, in clock ticks of 10 ms (Linux's USER_HZ).
func cpuTime(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields count from after it.
	_, rest, ok := strings.Cut(string(raw), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, fmt.Errorf("load: /proc/%d/stat: %q", pid, raw)
	}
	var ticks int64
	for _, field := range f[11:13] { // utime and stime, fields 14 and 15
		n, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// withCPU runs one scenario against the process pid and adds to its result
// the CPU that process spent per call: a figure the machine's other load
// does not move the way it moves throughput.
func withCPU(pid int, run func() result) result {
	before, errBefore := cpuTime(pid)
	swBefore, swErrBefore := switches(pid)
	r := run()
	after, errAfter := cpuTime(pid)
	swAfter, swErrAfter := switches(pid)
	if errBefore == nil && errAfter == nil && r.Calls > 0 {
		r.CPUMicros = float64(after-before) / float64(time.Microsecond) / float64(r.Calls)
	}
	if swErrBefore == nil && swErrAfter == nil && r.Calls > 0 {
		r.SwitchesPerCall = float64(swAfter-swBefore) / float64(r.Calls)
	}
	return r
}

// switches sums the context switches, voluntary and not, of the threads
// of process pid (/proc/PID/task/*/status). A thread that ended takes its
// count with it; the Go runtime rarely ends one.
func switches(pid int) (int64, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(tasks) == 0 {
		return 0, fmt.Errorf("load: no threads listed for process %d", pid)
	}
	var n int64
	for _, path := range tasks {
		raw, err := os.ReadFile(path)
		if err != nil {
			continue // the thread ended meanwhile
		}
		for line := range strings.Lines(string(raw)) {
			name, v, ok := strings.Cut(line, ":")
			if ok && (name == "voluntary_ctxt_switches" || name == "nonvoluntary_ctxt_switches") {
				c, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return 0, fmt.Errorf("load: %s: %w", path, err)
				}
				n += c
			}
		}
	}
	return n, nil
}

// walStats is what the service's WAL group commit has done so far, read
// from its /metrics.
type walStats struct {
	commits, writes float64
	// seconds is the time all those commits took, fsyncs included.
	seconds float64
}

// walCommits reads the service's group-commit counters from its /metrics:
// how many WAL commits it has made, how many writes they carried and how
// long they took.
func walCommits(ctx context.Context, hc *http.Client, base string) (walStats, error) {
	families, err := metricFamilies(ctx, hc, base)
	if err != nil {
		return walStats{}, err
	}
	batch, err := histogram(families, "autonomy_wal_commit_batch_size")
	if err != nil {
		return walStats{}, err
	}
	took, err := histogram(families, "autonomy_wal_commit_duration_seconds")
	if err != nil {
		return walStats{}, err
	}
	return walStats{commits: float64(batch.GetSampleCount()), writes: batch.GetSampleSum(), seconds: took.GetSampleSum()}, nil
}

// metricFamilies reads base's /metrics.
func metricFamilies(ctx context.Context, hc *http.Client, base string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("load: GET %s/metrics: %s", base, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("load: GET %s/metrics: %w", base, err)
	}
	return families, nil
}

// histogram is the one unlabelled histogram named name in families.
func histogram(families map[string]*dto.MetricFamily, name string) (*dto.Histogram, error) {
	f, ok := families[name]
	if !ok || len(f.GetMetric()) != 1 {
		return nil, fmt.Errorf("load: /metrics has no %s", name)
	}
	return f.GetMetric()[0].GetHistogram(), nil
}
