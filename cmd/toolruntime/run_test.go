package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// startServe runs the command on 127.0.0.1:0 and returns the address it
// logged, a function that stops it and returns its exit code.
func startServe(t *testing.T, logFile string) (addr string, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"--addr", "127.0.0.1:0", "--log-file", logFile}, pw, io.Discard)
		pw.Close()
	}()

	listening := make(chan string, 1)
	go func() {
		// Keep draining stdout after the address is found, so the server
		// never blocks writing a log line.
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "listening" {
				listening <- rec.Addr
			}
		}
		close(listening)
	}()
	addr, ok := <-listening
	if !ok {
		cancel()
		t.Fatalf("server exited with %d before logging its address", <-code)
	}
	var stopped bool
	stop = func() int {
		stopped = true
		cancel()
		return <-code
	}
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	return addr, stop
}

func readLog(t *testing.T, path string) []map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for line := range strings.Lines(string(raw)) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q is not JSON: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

func TestServe(t *testing.T) {
	logFile := filepath.Join(t.TempDir(), "calls.log")
	// The file is appended to, never truncated: a test harness may share one
	// file across restarts.
	if err := os.WriteFile(logFile, []byte(`{"msg":"earlier run"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, stop := startServe(t, logFile)

	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/tool",
		strings.NewReader(`{"kind":"tool.echo","args":{"x":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Autonomy-Audit-Id", "au_fromenvoy000000")
	req.Header.Set("X-Request-Id", "req-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/tool = %d, want 200", resp.StatusCode)
	}
	if code := run(context.Background(), []string{"healthcheck", "--url", "http://" + addr + "/healthz"}, io.Discard, io.Discard); code != exitOK {
		t.Errorf("healthcheck against the running server = %d, want 0", code)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("exit code after cancel = %d, want 0", code)
	}

	lines := readLog(t, logFile)
	var msgs []string
	for _, l := range lines {
		msgs = append(msgs, l["msg"].(string))
	}
	want := []string{"earlier run", "listening", "tool call", "shutting down", "stopped"}
	if strings.Join(msgs, "|") != strings.Join(want, "|") {
		t.Fatalf("log messages = %q, want %q", msgs, want)
	}
	if lines[1]["addr"] != addr {
		t.Errorf("listening addr = %v, want %s", lines[1]["addr"], addr)
	}
	call := lines[2]
	if call["kind"] != "tool.echo" || call["x-autonomy-audit-id"] != "au_fromenvoy000000" || call["x-request-id"] != "req-1" {
		t.Errorf("tool call line = %v, want kind tool.echo with the request's headers", call)
	}
}

func TestServeFails(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	tests := map[string]struct {
		args []string
		want int
	}{
		"unknown flag":        {[]string{"--nope"}, exitUsage},
		"stray argument":      {[]string{"serve"}, exitUsage},
		"address in use":      {[]string{"--addr", taken.Addr().String()}, exitError},
		"log file unwritable": {[]string{"--addr", "127.0.0.1:0", "--log-file", filepath.Join(t.TempDir(), "no", "such", "dir.log")}, exitError},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := run(context.Background(), tc.args, io.Discard, io.Discard); got != tc.want {
				t.Errorf("run(%q) = %d, want %d", tc.args, got, tc.want)
			}
		})
	}
}

func TestHealthcheck(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer ok.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer failing.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()

	tests := map[string]struct {
		args []string
		want int
	}{
		"answers 200":       {[]string{"--url", ok.URL}, exitOK},
		"answers 503":       {[]string{"--url", failing.URL}, exitError},
		"nothing listening": {[]string{"--url", gone.URL}, exitError},
		"bad URL":           {[]string{"--url", "http://[::1"}, exitUsage},
		"unknown flag":      {[]string{"--nope"}, exitUsage},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"healthcheck"}, tc.args...)
			if got := run(context.Background(), args, io.Discard, io.Discard); got != tc.want {
				t.Errorf("run(%q) = %d, want %d", args, got, tc.want)
			}
		})
	}
}
