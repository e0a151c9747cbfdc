package e2e

// Real front proxies (nginx, Caddy) from Debian's packages, run in the
// foreground for one test from a config template in testdata.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/google/uuid"
)

// dpProxyAttempts bounds the retries when a port picked free was taken
// before the proxy bound it.
const dpProxyAttempts = 5

var errDpPortTaken = errors.New("the proxy could not bind its port")

// dpProxyFront is one server block (nginx) or site (Caddy) of a config.
type dpProxyFront struct {
	Name    string
	Port    int
	Service string // the service's HTTP address
	Runtime string // the tool runtime's address, where the config names it per front
}

// dpProxy says how to run one proxy.
type dpProxy struct {
	name     string         // for messages: "nginx", "caddy"
	template string         // the config template under testdata
	data     map[string]any // template fields besides Dir, Fronts and Token
	// command runs the proxy in the foreground on the config at conf,
	// with dir (and its empty tmp directory) as its only writable place.
	command func(dir, conf string) *exec.Cmd
}

// dpStartProxy runs the proxy with one front per entry of fronts, each on
// a free loopback port, and returns the base URL of each once the proxy
// answers on every one of them. It stops the proxy when the test ends.
func dpStartProxy(t *testing.T, p dpProxy, fronts []dpProxyFront) []string {
	t.Helper()
	tmpl, err := template.ParseFiles(filepath.Join("testdata", p.template))
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		urls, err := dpTryProxy(t, p, tmpl, fronts)
		if err == nil {
			return urls
		}
		if !errors.Is(err, errDpPortTaken) || attempt == dpProxyAttempts {
			t.Fatal(err)
		}
		t.Logf("attempt %d: %v; retrying on other ports", attempt, err)
	}
}

func dpTryProxy(t *testing.T, p dpProxy, tmpl *template.Template, services []dpProxyFront) ([]string, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o700); err != nil {
		t.Fatal(err)
	}
	fronts := make([]dpProxyFront, len(services))
	copy(fronts, services)
	for i := range fronts {
		fronts[i].Port = dpFreePort(t)
	}
	token := uuid.NewString()
	data := map[string]any{"Dir": dir, "Fronts": fronts, "Token": token}
	for k, v := range p.data {
		data[k] = v
	}
	var conf bytes.Buffer
	if err := tmpl.Execute(&conf, data); err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(dir, filepath.Base(strings.TrimSuffix(p.template, ".tmpl")))
	if err := os.WriteFile(confPath, conf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs dpSyncBuffer
	cmd := p.command(dir, confPath)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stop := func() {
		// SIGTERM is a fast shutdown for both nginx and Caddy.
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(stopTimeout):
			cmd.Process.Kill()
			<-exited
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("%s logs:\n%s", p.name, logs.String())
		}
	})

	urls := make([]string, len(fronts))
	for i, f := range fronts {
		urls[i] = fmt.Sprintf("http://127.0.0.1:%d", f.Port)
	}
	deadline := time.Now().Add(startTimeout)
	for pending := urls; len(pending) > 0; {
		select {
		case <-exited:
			if strings.Contains(strings.ToLower(logs.String()), "address already in use") {
				return nil, fmt.Errorf("%w: %s", errDpPortTaken, logs.String())
			}
			return nil, fmt.Errorf("%s exited before serving:\n%s\nconfig:\n%s", p.name, logs.String(), conf.String())
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("%s did not answer on %v within %s:\n%s", p.name, pending, startTimeout, logs.String())
		}
		if dpAnswers(pending[0]+"/_e2e_ready", token) {
			pending = pending[1:]
			continue
		}
		time.Sleep(20 * time.Millisecond)
	}
	return urls, nil
}

// dpToolCall posts a tool.shell call to url with kind in the kind header and
// the extra headers, and returns the answer with its body read.
func dpToolCall(t *testing.T, url, kind string, headers map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(dpToolBody(dpShellKind)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(dpKindHdr, kind)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := dpNoRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

// dpSyncBuffer collects a child's output while the test reads it.
type dpSyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *dpSyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *dpSyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// dpFreePort asks the kernel for a free loopback port and releases it for
// a proxy to take; the caller retries if someone else took it meanwhile.
func dpFreePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// dpAnswers reports whether url answers 200 with body.
func dpAnswers(url, body string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && string(b) == body
}
