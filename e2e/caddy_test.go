package e2e

// Real Caddy from Debian's packages (2.6.2 in Debian 12) in front of the
// tool runtime, asking the service's HTTP check: the Caddyfile of
// docs/DEPLOY.md §3, as testdata/caddy/Caddyfile.tmpl. Caddy's check is a
// GET with no body, so the services read the tool kind from the
// X-Autonomy-Tool-Kind header (gate.kind_header).

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// dpCaddy runs Caddy in the foreground from testdata/caddy/Caddyfile.tmpl.
func dpCaddy(caddy string) dpProxy {
	return dpProxy{name: "caddy", template: "caddy/Caddyfile.tmpl",
		command: func(dir, conf string) *exec.Cmd {
			cmd := exec.Command(caddy, "run", "--adapter", "caddyfile", "--config", conf)
			// Caddy keeps its state under $HOME and the XDG directories.
			cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
			return cmd
		}}
}

// dpGet reads url whole.
func dpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := dpNoRedirects.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestDeployCaddy runs the story through the documented Caddyfile: Caddy
// asks /v1/authz/ with X-Forwarded-Method/-Uri, copies the audit id (and,
// in advisory mode, the advisory reason) onto the call only when the check
// set it, hands the client the deny body, and keeps the client's own
// copies of those headers from the runtime.
func TestDeployCaddy(t *testing.T) {
	t.Parallel()
	caddy := NeedProgram(t, "caddy", "the Caddy forward-auth test runs real Caddy; apt-get install caddy")
	st := dpStartStack(t, false)
	advRT := dpStartRuntime(t)
	advCfg := filepath.Join(t.TempDir(), "advisory.yaml")
	if err := os.WriteFile(advCfg, []byte(dpMainConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	adv := StartServer(t, ServeOptions{Mode: "advisory", Config: advCfg})
	urls := dpStartProxy(t, dpCaddy(caddy), []dpProxyFront{
		{Name: "main service", Service: st.main.HTTPAddr, Runtime: st.rt.Addr},
		{Name: "1s-window service", Service: st.expiry.HTTPAddr, Runtime: st.rt.Addr},
		{Name: "advisory service", Service: adv.HTTPAddr, Runtime: advRT.Addr},
	})
	// The story reads the audit joins from the services themselves: behind
	// a proxy, reads are remote and need access tokens (docs/DEPLOY.md §3).
	front := func(name, base string, s *Server) dpFront {
		return dpFront{name: name, api: "http://" + s.HTTPAddr, denyBody: true,
			call: func(t *testing.T, c dpCall) dpResult { return dpHTTPCall(t, base+"/v1/tool", c) }}
	}
	main, expiry := front("caddy", urls[0], st.main), front("caddy (1s window)", urls[1], st.expiry)
	l := dpStory(t, main, expiry)

	// A client's own audit id and advisory reason never reach the runtime;
	// this preflight goes through Caddy's /v1/preflight route.
	p := dpPreflight(t, urls[0], "caddy-forged-"+uuid.NewString())
	resp, _ := dpToolCall(t, urls[0]+"/v1/tool", dpShellKind, map[string]string{"X-Autonomy-Preflight-Id": p.PreflightID,
		"X-Autonomy-Advisory-Reason": "forged", "X-Autonomy-Audit-Id": "au_forged"})
	l.expect(t, main, main.api, dpEntry{step: "a call carrying forged decision headers", kind: dpShellKind, allowed: true,
		reason: dpPassed, auditID: p.AuditID,
		res: dpResult{status: resp.StatusCode, requestID: resp.Header.Get("X-Request-Id"), auditID: p.AuditID}})
	l.verify(t, main, st.rt)
	// The audit route reaches the service, which refuses a proxied read
	// without a token.
	if status, body := dpGet(t, urls[0]+"/v1/audit/"+p.AuditID); status != http.StatusForbidden || !strings.Contains(body, "remote-reads-forbidden") {
		t.Errorf("audit read through Caddy without a token: %d %s, want 403 remote-reads-forbidden", status, body)
	}

	// Advisory mode: a call without a preflight goes through, and the
	// runtime learns why from the service, not from the client.
	call := func(forged string) {
		t.Helper()
		headers := map[string]string{}
		if forged != "" {
			headers["X-Autonomy-Advisory-Reason"] = forged
		}
		resp, _ := dpToolCall(t, urls[2]+"/v1/tool", dpShellKind, headers)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("advisory call without a preflight: status %d, want 200", resp.StatusCode)
		}
	}
	call("")
	call("forged")
	// The check never sees the body, so Caddy bounds it (request_body):
	// a body over 1 MiB does not reach the runtime, though the service
	// allows the call.
	big, err := http.NewRequest(http.MethodPost, urls[2]+"/v1/tool",
		strings.NewReader(`{"kind":"`+dpShellKind+`","args":{"pad":"`+strings.Repeat("x", 2<<20)+`"}}`))
	if err != nil {
		t.Fatal(err)
	}
	big.Header.Set(dpKindHdr, dpShellKind)
	resp, err = dpNoRedirects.Do(big)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge && resp.StatusCode != http.StatusBadGateway {
		t.Errorf("a 2 MiB body through Caddy: status %d, want 413 (or 502 from Caddy before 2.7)", resp.StatusCode)
	}
	calls := advRT.calls(t)
	if len(calls) != 2 {
		t.Fatalf("the advisory runtime logged %+v, want two calls", calls)
	}
	for _, c := range calls {
		if c.AdvisoryReason != dpRequired || c.AuditID == "" {
			t.Errorf("advisory call reached the runtime with %+v, want advisory reason %q and an audit id", c, dpRequired)
		}
	}
}
