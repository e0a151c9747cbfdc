package e2e

// Path (c) of issue 4: real nginx from Debian's packages in front of the
// tool runtime, asking the service's HTTP check with auth_request. nginx
// sends no body to the check, so the services read the tool kind from the
// X-Autonomy-Tool-Kind header (gate.kind_header). The config is
// testdata/nginx/nginx.conf.tmpl.

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

// dpNginxAttempts bounds the retries when a port picked free was taken
// before nginx bound it.
const dpNginxAttempts = 5

// dpNginxBinary finds nginx: on PATH, else where Debian installs it
// (/usr/sbin is not on every user's PATH). Missing, it skips the test, or
// fails it under CI=true.
func dpNginxBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if st, err := os.Stat("/usr/sbin/nginx"); err == nil && !st.IsDir() {
		return "/usr/sbin/nginx"
	}
	return NeedProgram(t, "nginx", "path (c) runs real nginx with auth_request; apt-get install nginx-light")
}

// dpNginxFront is one server block of the config.
type dpNginxFront struct {
	Name    string
	Port    int
	Service string // the service's HTTP address
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
// nginx to take; the caller retries if someone else took it meanwhile.
func dpFreePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

var errDpPortTaken = errors.New("nginx could not bind its port")

// dpStartNginx runs nginx in the foreground with one server block per
// service, all proxying to the runtime, and returns the base URL of each
// block once nginx answers on every one of them.
func dpStartNginx(t *testing.T, nginx, runtime string, services []dpNginxFront) []string {
	t.Helper()
	tmpl, err := template.ParseFiles(filepath.Join("testdata", "nginx", "nginx.conf.tmpl"))
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		urls, err := dpTryNginx(t, nginx, tmpl, runtime, services)
		if err == nil {
			return urls
		}
		if !errors.Is(err, errDpPortTaken) || attempt == dpNginxAttempts {
			t.Fatal(err)
		}
		t.Logf("attempt %d: %v; retrying on other ports", attempt, err)
	}
}

func dpTryNginx(t *testing.T, nginx string, tmpl *template.Template, runtime string, services []dpNginxFront) ([]string, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o700); err != nil {
		t.Fatal(err)
	}
	fronts := make([]dpNginxFront, len(services))
	copy(fronts, services)
	for i := range fronts {
		fronts[i].Port = dpFreePort(t)
	}
	token := uuid.NewString()
	var conf bytes.Buffer
	if err := tmpl.Execute(&conf, map[string]any{"Dir": dir, "Root": os.Geteuid() == 0,
		"Runtime": runtime, "Fronts": fronts, "Token": token}); err != nil {
		t.Fatal(err)
	}
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, conf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs dpSyncBuffer
	cmd := exec.Command(nginx, "-p", dir, "-e", "stderr", "-c", confPath,
		"-g", "daemon off; error_log stderr; pid "+filepath.Join(dir, "nginx.pid")+";")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	stop := func() {
		// SIGTERM is nginx's fast shutdown: the master stops its workers,
		// then exits.
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
			t.Logf("nginx logs:\n%s", logs.String())
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
			if strings.Contains(logs.String(), "Address already in use") {
				return nil, fmt.Errorf("%w: %s", errDpPortTaken, logs.String())
			}
			return nil, fmt.Errorf("nginx exited before serving:\n%s\nconfig:\n%s", logs.String(), conf.String())
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("nginx did not answer on %v within %s:\n%s", pending, startTimeout, logs.String())
		}
		if dpAnswers(pending[0]+"/_e2e_ready", token) {
			pending = pending[1:]
			continue
		}
		time.Sleep(20 * time.Millisecond)
	}
	return urls, nil
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

// TestDeployNginx is path (c): nginx auth_request to /v1/authz, the tool
// kind from a configured header, the audit id carried to the runtime with
// auth_request_set. nginx hands the client no deny body, so the reasons
// are read from the audit joins.
func TestDeployNginx(t *testing.T) {
	t.Parallel()
	nginx := dpNginxBinary(t)
	st := dpStartStack(t, false)
	urls := dpStartNginx(t, nginx, st.rt.Addr, []dpNginxFront{
		{Name: "main service", Service: st.main.HTTPAddr},
		{Name: "1s-window service", Service: st.expiry.HTTPAddr},
	})
	front := func(name, base string) dpFront {
		return dpFront{name: name, api: base,
			call: func(t *testing.T, c dpCall) dpResult { return dpHTTPCall(t, base+"/v1/tool", c) }}
	}
	main, expiry := front("nginx", urls[0]), front("nginx (1s window)", urls[1])
	l := dpStory(t, main, expiry)

	// nginx, not the client, chooses the request id.
	p := dpPreflight(t, main.api, "nginx-retry-"+uuid.NewString())
	first := main.call(t, dpCall{kind: dpShellKind, preflightID: p.PreflightID, requestID: "client-chosen"})
	l.expect(t, main, main.api, dpEntry{step: "a call with a client-chosen request id", kind: dpShellKind,
		allowed: true, reason: dpPassed, auditID: p.AuditID, res: first})
	l.expect(t, main, main.api, dpEntry{step: "a replay resending the first call's request id", kind: dpShellKind,
		reason: dpReplay, auditID: p.AuditID,
		res: main.call(t, dpCall{kind: dpShellKind, preflightID: p.PreflightID, requestID: first.requestID})})

	// A client's own advisory reason never reaches the runtime.
	forged := dpPreflight(t, main.api, "nginx-forged-"+uuid.NewString())
	req, err := http.NewRequest(http.MethodPost, urls[0]+"/v1/tool", bytes.NewReader(dpToolBody(dpShellKind)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(dpKindHdr, dpShellKind)
	req.Header.Set("X-Autonomy-Preflight-Id", forged.PreflightID)
	req.Header.Set("X-Autonomy-Advisory-Reason", "forged")
	resp, err := dpNoRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	l.expect(t, main, main.api, dpEntry{step: "a call carrying a forged advisory reason", kind: dpShellKind, allowed: true,
		reason: dpPassed, auditID: forged.AuditID,
		res: dpResult{status: resp.StatusCode, requestID: resp.Header.Get("X-Request-Id"), auditID: resp.Header.Get("X-Autonomy-Audit-Id")}})

	// A client that sends its own X-Forwarded-Method/-Uri to pass its tool
	// call off as a GET is still checked: nginx clears them on the auth
	// subrequest, and the check refuses two pairs that disagree anyway.
	req, err = http.NewRequest(http.MethodPost, urls[0]+"/v1/tool", bytes.NewReader(dpToolBody(dpShellKind)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(dpKindHdr, dpShellKind)
	req.Header.Set("X-Forwarded-Method", "GET")
	req.Header.Set("X-Forwarded-Uri", "/")
	resp, err = dpNoRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a tool call without a preflight, with the client's X-Forwarded-*: status %d, want 403", resp.StatusCode)
	}
	l.verify(t, main, st.rt)

	// The check sees only the kind header; a body naming another tool is
	// refused by the runtime, so tool.echo's check cannot run tool.shell.
	req, err = http.NewRequest(http.MethodPost, urls[0]+"/v1/tool", bytes.NewReader(dpToolBody(dpShellKind)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(dpKindHdr, "tool.echo")
	resp, err = dpNoRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "kind-mismatch") {
		t.Errorf("tool.shell in the body behind a tool.echo kind header: %d %s, want 400 kind-mismatch", resp.StatusCode, body)
	}
}
