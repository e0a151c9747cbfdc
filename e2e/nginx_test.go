package e2e

// Path (c) of issue 4: real nginx from Debian's packages in front of the
// tool runtime, asking the service's HTTP check with auth_request. nginx
// sends no body to the check, so the services read the tool kind from the
// X-Autonomy-Tool-Kind header (gate.kind_header). The config is
// testdata/nginx/nginx.conf.tmpl.

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
)

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

// dpNginx runs nginx in the foreground from testdata/nginx/nginx.conf.tmpl,
// every front proxying to runtime.
func dpNginx(nginx, runtime string) dpProxy {
	return dpProxy{name: "nginx", template: "nginx/nginx.conf.tmpl",
		data: map[string]any{"Root": os.Geteuid() == 0, "Runtime": runtime},
		command: func(dir, conf string) *exec.Cmd {
			return exec.Command(nginx, "-p", dir, "-e", "stderr", "-c", conf,
				"-g", "daemon off; error_log stderr; pid "+filepath.Join(dir, "nginx.pid")+";")
		}}
}

// TestDeployNginx is path (c): nginx auth_request to /v1/authz, the tool
// kind from a configured header, the audit id carried to the runtime with
// auth_request_set. nginx hands the client no deny body, so the reasons
// are read from the audit joins.
func TestDeployNginx(t *testing.T) {
	t.Parallel()
	nginx := dpNginxBinary(t)
	st := dpStartStack(t, false)
	urls := dpStartProxy(t, dpNginx(nginx, st.rt.Addr), []dpProxyFront{
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
	resp, _ := dpToolCall(t, urls[0]+"/v1/tool", dpShellKind, map[string]string{
		"X-Autonomy-Preflight-Id": forged.PreflightID, "X-Autonomy-Advisory-Reason": "forged"})
	l.expect(t, main, main.api, dpEntry{step: "a call carrying a forged advisory reason", kind: dpShellKind, allowed: true,
		reason: dpPassed, auditID: forged.AuditID,
		res: dpResult{status: resp.StatusCode, requestID: resp.Header.Get("X-Request-Id"), auditID: resp.Header.Get("X-Autonomy-Audit-Id")}})

	// A client that sends its own X-Forwarded-Method/-Uri to pass its tool
	// call off as a GET is still checked: nginx clears them on the auth
	// subrequest, and the check refuses two pairs that disagree anyway.
	resp, _ = dpToolCall(t, urls[0]+"/v1/tool", dpShellKind, map[string]string{
		"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/"})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a tool call without a preflight, with the client's X-Forwarded-*: status %d, want 403", resp.StatusCode)
	}
	l.verify(t, main, st.rt)

	// The check sees only the kind header; a body naming another tool is
	// refused by the runtime, so tool.echo's check cannot run tool.shell.
	resp, body := dpToolCall(t, urls[0]+"/v1/tool", "tool.echo", nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "kind-mismatch") {
		t.Errorf("tool.shell in the body behind a tool.echo kind header: %d %s, want 400 kind-mismatch", resp.StatusCode, body)
	}
}
