package e2e

// The shared harness of the e2e tests: build the real binary once, run
// `autonomy serve` as a child process on loopback ports, read the addresses
// it bound from its "listening" log line, and stop, kill or restart it on the
// same data directory. Other e2e test files use these helpers; this file
// holds the package's only TestMain.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/contractrefine/autonomy/internal/etcdtest"
)

// Timeouts of the harness. They bound waits for a process that never comes
// up or never goes down; no test asserts them.
const (
	startTimeout = 30 * time.Second
	stopTimeout  = 20 * time.Second
	runTimeout   = 60 * time.Second
)

var (
	binDir    string // removed by TestMain when the run ends
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	// The etcd members some tests kill run as this binary (internal/etcdtest).
	etcdtest.RunMemberIfAsked()
	dir, err := os.MkdirTemp("", "autonomy-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	// Readable by all, so a test may run the binary as another user.
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// NeedProgram returns the path of an external program the test needs. When
// it is missing the test is skipped with the reason, except under CI=true
// where a missing program is a failure.
func NeedProgram(t testing.TB, name, why string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is required under CI (%s): %v", name, why, err)
	}
	t.Skipf("%s not found (%s): %v", name, why, err)
	return ""
}

// Binary returns the path of the autonomy binary, building ./cmd/autonomy
// the first time any test asks. E2E_AUTONOMY_BIN names another build to
// run instead (an older commit's, to measure a figure before a fix).
func Binary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("E2E_AUTONOMY_BIN"); bin != "" {
		return bin
	}
	goTool := NeedProgram(t, "go", "to build cmd/autonomy")
	buildOnce.Do(func() {
		binPath = filepath.Join(binDir, "autonomy")
		cmd := exec.Command(goTool, "build", "-o", binPath, "github.com/contractrefine/autonomy/cmd/autonomy")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build cmd/autonomy: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// Result is what a one-shot autonomy command did.
type Result struct {
	Stdout, Stderr string
	// Code is the exit code; -1 when a signal ended the process.
	Code int
}

// RunAutonomy runs `autonomy args...` to completion.
func RunAutonomy(t testing.TB, args ...string) Result {
	t.Helper()
	return runAutonomyAs(t, nil, args...)
}

// runAutonomyAs is RunAutonomy with the child's process attributes (e.g.
// another user's credentials); nil means the test's own.
func runAutonomyAs(t testing.TB, attr *syscall.SysProcAttr, args ...string) Result {
	t.Helper()
	bin := Binary(t) // built first: the build is not the run's time
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = attr
	err := cmd.Run()
	res := Result{Stdout: stdout.String(), Stderr: stderr.String(), Code: cmd.ProcessState.ExitCode()}
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("autonomy %s: %v", strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("autonomy %s did not finish within %s", strings.Join(args, " "), runTimeout)
	}
	return res
}

// ServeOptions says how to start `autonomy serve`.
type ServeOptions struct {
	// DataDir is the data directory; "" means a new t.TempDir().
	DataDir string
	// Mode is passed as --mode when set.
	Mode string
	// Config is passed as --config when set.
	Config string
	// Args are more flags, after the harness's own: --http-addr and
	// --grpc-addr default to 127.0.0.1:0 and may be overridden here.
	Args []string
	// Env is added to the inherited environment.
	Env []string
	// SysProcAttr, when set, is the child's (e.g. another user's credentials).
	SysProcAttr *syscall.SysProcAttr
}

// Server is one running `autonomy serve` process.
type Server struct {
	// Addresses the process logged in its "listening" line.
	HTTPAddr, GRPCAddr, GatewayAddr string
	DataDir                         string

	t      testing.TB
	opts   ServeOptions
	cmd    *exec.Cmd
	logs   *logWriter
	exited chan struct{}
	code   int
}

// StartServer starts `autonomy serve` and returns once it has logged the
// addresses it listens on. It fails the test if the process exits first.
// The process is killed when the test ends, if it is still running.
func StartServer(t testing.TB, o ServeOptions) *Server {
	t.Helper()
	s, err := startServer(t, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TryStartServer is StartServer for a process expected not to come up: it
// returns the error and the server (exited, with its logs) instead of
// failing the test.
func TryStartServer(t testing.TB, o ServeOptions) (*Server, error) {
	t.Helper()
	return startServer(t, o)
}

func startServer(t testing.TB, o ServeOptions) (*Server, error) {
	t.Helper()
	if o.DataDir == "" {
		o.DataDir = t.TempDir()
	}
	args := []string{"serve", "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--data-dir", o.DataDir}
	if o.Mode != "" {
		args = append(args, "--mode", o.Mode)
	}
	if o.Config != "" {
		args = append(args, "--config", o.Config)
	}
	args = append(args, o.Args...)
	s := &Server{DataDir: o.DataDir, t: t, opts: o, exited: make(chan struct{}),
		logs: &logWriter{listening: make(chan listenLine, 1), verified: make(chan struct{}), grew: make(chan struct{})}}
	s.cmd = exec.Command(Binary(t), args...)
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	s.cmd.Env = append(os.Environ(), o.Env...)
	s.cmd.SysProcAttr = o.SysProcAttr
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start autonomy serve: %w", err)
	}
	go func() {
		s.cmd.Wait()
		s.code = s.cmd.ProcessState.ExitCode()
		close(s.exited)
	}()
	t.Cleanup(func() {
		if s.running() {
			s.cmd.Process.Signal(syscall.SIGKILL)
			<-s.exited
		}
		if t.Failed() {
			t.Logf("autonomy serve (%s) logs:\n%s", strings.Join(args, " "), s.Logs())
		}
	})
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	select {
	case l := <-s.logs.listening:
		s.HTTPAddr, s.GRPCAddr, s.GatewayAddr = l.HTTPAddr, l.GRPCAddr, l.GatewayAddr
		return s, nil
	case <-s.exited:
		return s, fmt.Errorf("autonomy serve exited with code %d before listening:\n%s", s.code, s.Logs())
	case <-timer.C:
		s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.exited
		return s, fmt.Errorf("autonomy serve did not log \"listening\" within %s:\n%s", startTimeout, s.Logs())
	}
}

func (s *Server) running() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Logs returns everything the process wrote to stdout and stderr so far.
func (s *Server) Logs() string { return s.logs.String() }

// LogLines returns the process's JSON log records with the given msg.
func (s *Server) LogLines(msg string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(s.Logs(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// WaitLog waits until the process has logged a record with msg and
// returns its records with msg. The process's output reaches the harness
// through a pipe, behind the answers it sent after writing it: a test
// that reads a line an answer implies waits for it here. It fails the
// test if none comes within startTimeout or the process exits first.
func (s *Server) WaitLog(msg string) []map[string]any {
	s.t.Helper()
	timer := time.NewTimer(startTimeout)
	defer timer.Stop()
	for {
		grew := s.logs.grown()
		if lines := s.LogLines(msg); len(lines) > 0 {
			return lines
		}
		select {
		case <-grew:
		case <-s.exited:
			if lines := s.LogLines(msg); len(lines) > 0 {
				return lines
			}
			s.t.Fatalf("autonomy serve exited with code %d before logging %q:\n%s", s.code, msg, s.Logs())
		case <-timer.C:
			s.t.Fatalf("autonomy serve did not log %q within %s:\n%s", msg, startTimeout, s.Logs())
		}
	}
}

// readyzClient bounds each poll of WaitReadyz: an answer that does not
// come is a poll that failed, not a wait without end.
var readyzClient = &http.Client{Timeout: 5 * time.Second}

// WaitReadyz polls GET /readyz until it answers want (0: the process does
// not answer), for up to startTimeout after what names the event awaited,
// and returns the answer's body.
func (s *Server) WaitReadyz(want int, after string) string {
	s.t.Helper()
	status, body, ok := s.readyzWithin(want, startTimeout)
	if !ok {
		s.t.Fatalf("/readyz still %d (%s) %s after %s, want %d:\n%s", status, body, startTimeout, after, want, s.Logs())
	}
	return body
}

// readyzWithin polls /readyz until it answers want or timeout has passed,
// and returns its last answer; it may run on any goroutine.
func (s *Server) readyzWithin(want int, timeout time.Duration) (status int, body string, ok bool) {
	deadline := time.Now().Add(timeout)
	for {
		status, body = 0, ""
		if resp, err := readyzClient.Get(s.URL("/readyz")); err != nil {
			body = err.Error()
		} else {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			status, body = resp.StatusCode, string(b)
		}
		if status == want {
			return status, body, true
		}
		if time.Now().After(deadline) {
			return status, body, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop sends SIGTERM, waits for the process to exit and returns its exit
// code. A process that does not exit in time is killed and fails the test.
func (s *Server) Stop() int {
	s.t.Helper()
	return s.signalAndWait(syscall.SIGTERM)
}

// Kill sends SIGKILL and waits for the process to be gone.
func (s *Server) Kill() {
	s.t.Helper()
	s.signalAndWait(syscall.SIGKILL)
}

func (s *Server) signalAndWait(sig syscall.Signal) int {
	s.t.Helper()
	if s.running() {
		s.cmd.Process.Signal(sig)
	}
	timer := time.NewTimer(stopTimeout)
	defer timer.Stop()
	select {
	case <-s.exited:
		return s.code
	case <-timer.C:
		s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.exited
		s.t.Fatalf("autonomy serve did not exit within %s of %s", stopTimeout, sig)
		return s.code
	}
}

// Restart starts a new process with the same options on the same data
// directory. The old process must have exited (Stop or Kill).
func (s *Server) Restart() *Server {
	s.t.Helper()
	if s.running() {
		s.t.Fatal("Restart: the previous process is still running")
	}
	o := s.opts
	o.DataDir = s.DataDir
	r := StartServer(s.t, o)
	r.WaitVerified()
	return r
}

// WaitVerified waits until the process has verified its WAL at open, or
// found that it fails verification: until then it decides nothing and
// answers 503, which a test that restarts over an existing log must not
// mistake for a lost record.
func (s *Server) WaitVerified() {
	s.t.Helper()
	select {
	case <-s.logs.verified:
	case <-s.exited:
		s.t.Fatalf("autonomy serve exited with code %d before verifying its WAL:\n%s", s.code, s.Logs())
	case <-time.After(startTimeout):
		s.t.Fatalf("autonomy serve did not verify its WAL within %s:\n%s", startTimeout, s.Logs())
	}
}

// URL returns the HTTP API URL of path.
func (s *Server) URL(path string) string { return "http://" + s.HTTPAddr + path }

// Authz returns an ext_authz client connected to the process's gRPC address.
func (s *Server) Authz(t testing.TB) authv3.AuthorizationClient {
	t.Helper()
	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return authv3.NewAuthorizationClient(conn)
}

// PostJSON posts body (marshalled unless it is already []byte) to url and
// returns the status, the response body and the response headers.
func PostJSON(t testing.TB, url string, body any) (int, []byte, http.Header) {
	t.Helper()
	b, ok := body.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out, resp.Header
}

// ToolCheck builds the CheckRequest Envoy sends for POST /v1/tool with a
// JSON body {"kind","args"}: lower-case headers including the pseudo
// headers, the body as raw_body, and requestID in both x-request-id and
// the request's id. headers are added as given (lower-case names).
func ToolCheck(kind string, args map[string]any, requestID string, headers map[string]string) *authv3.CheckRequest {
	body, _ := json.Marshal(map[string]any{"kind": kind, "args": args})
	h := map[string]string{":method": "POST", ":path": "/v1/tool", ":authority": "tools.internal",
		":scheme": "http", "content-type": "application/json", "x-request-id": requestID,
		"content-length": fmt.Sprint(len(body))}
	for k, v := range headers {
		h[k] = v
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: requestID, Method: "POST", Path: "/v1/tool", Host: "tools.internal", Scheme: "http",
			Protocol: "HTTP/1.1", Headers: h, RawBody: body, Size: int64(len(body))}},
	}}
}

// listenLine is the part of the "listening" log record the harness reads.
type listenLine struct {
	HTTPAddr    string `json:"http_addr"`
	GRPCAddr    string `json:"grpc_addr"`
	GatewayAddr string `json:"gateway_addr"`
}

// logWriter keeps the child's output and reports its "listening" line.
type logWriter struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	partial   []byte
	listening chan listenLine
	seen      bool
	// verified is closed at the first line that ends the WAL's
	// verification at open, passed or failed.
	verified     chan struct{}
	verifiedSeen bool
	// grew is closed, and replaced, at each write.
	grew chan struct{}
}

// grown returns a channel closed at the next write.
func (w *logWriter) grown() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.grew
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	close(w.grew)
	w.grew = make(chan struct{})
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		line := w.partial[:i]
		w.partial = w.partial[i+1:]
		if w.seen && w.verifiedSeen {
			continue
		}
		var rec struct {
			Msg string `json:"msg"`
			listenLine
		}
		if json.Unmarshal(line, &rec) != nil {
			continue
		}
		switch {
		case rec.Msg == "listening" && !w.seen:
			w.seen = true
			w.listening <- rec.listenLine
		case strings.HasPrefix(rec.Msg, "wal verified") || strings.HasPrefix(rec.Msg, "wal failed verification"):
			if !w.verifiedSeen {
				w.verifiedSeen = true
				close(w.verified)
			}
		}
	}
	return len(p), nil
}

func (w *logWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
