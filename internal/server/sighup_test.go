package server

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// buildServeBinary builds cmd/autonomy into a temporary directory.
func buildServeBinary(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("go toolchain not found: %v", err)
		}
		t.Skipf("go toolchain not found, cannot build the binary: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "autonomy")
	cmd := exec.Command(goBin, "build", "-o", bin, "github.com/contractrefine/autonomy/cmd/autonomy")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestSIGHUPReloadsTheBinary runs the real binary with the file watch off
// and drives reloads with SIGHUP: a bad bundle is refused and the process
// keeps serving the old one; a good one is picked up.
func TestSIGHUPReloadsTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildServeBinary(t)
	dir := copyDefaultBundle(t)
	cfgPath := filepath.Join(t.TempDir(), "autonomy.yaml")
	if err := os.WriteFile(cfgPath, []byte("bundle: "+dir+"\nreload: {watch: false}\nlog: {level: info}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", cfgPath, "--http-addr", "127.0.0.1:0",
		"--grpc-addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--mode", "enforce")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	listening := make(chan string, 1)
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.Write(append(sc.Bytes(), '\n'))
			var l struct {
				Msg      string `json:"msg"`
				HTTPAddr string `json:"http_addr"`
			}
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "listening" {
				listening <- l.HTTPAddr
			}
		}
	}()
	exited := make(chan error, 1)
	go func() { <-scanned; exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("autonomy serve exited: %v\n%s", err, logs)
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Errorf("autonomy serve did not stop on SIGTERM")
		}
	})
	var base string
	select {
	case addr := <-listening:
		base = "http://" + addr
	case err := <-exited:
		t.Fatalf("autonomy serve exited before listening: %v\n%s", err, logs)
	case <-time.After(30 * time.Second):
		t.Fatalf("no listening line within 30s:\n%s", logs)
	}
	checkAdded := func() int {
		resp, err := http.Post(base+"/v1/authz/v1/tool", "application/json", strings.NewReader(toolBody("tool.added", nil)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	count := func(msg string) int { return len(withMsg(logs.lines(t), msg)) }

	steps := []struct {
		name      string
		change    func()
		wantMsg   string
		wantAdded int
	}{
		{"bad bundle refused", func() {
			writeAtomically(t, filepath.Join(dir, "policy.rego"), "package autonomy\nallow if {\n")
		}, "bundle reload refused; the loaded bundle keeps serving", 403},
		{"good bundle picked up", func() {
			b, err := os.ReadFile(filepath.Join("..", "bundle", "default", "policy.rego"))
			if err != nil {
				t.Fatal(err)
			}
			writeAtomically(t, filepath.Join(dir, "policy.rego"), string(b))
			writeAtomically(t, filepath.Join(dir, "data.yaml"), withGoodChange(t, dir))
		}, "bundle reloaded", 200},
	}
	if got := checkAdded(); got != 403 {
		t.Fatalf("tool.added before any reload: %d, want 403", got)
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			n := count(s.wantMsg)
			s.change()
			if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			eventually(t, "a "+s.wantMsg+" line", func() bool { return count(s.wantMsg) > n })
			line := withMsg(logs.lines(t), s.wantMsg)[n]
			if line["trigger"] != TriggerSignal {
				t.Errorf("reload line %v, want trigger %s", line, TriggerSignal)
			}
			if got := checkAdded(); got != s.wantAdded {
				t.Errorf("tool.added after %s: %d, want %d", s.name, got, s.wantAdded)
			}
		})
	}
}
