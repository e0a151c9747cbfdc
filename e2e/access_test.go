package e2e

// Read access (docs/SECURITY.md) against the real binary over real sockets: bearer
// tokens from access.tokens_file scoped to a tenant or to all, 404 for
// another tenant's records, 401 without a valid token, no token in the
// logs; and without tokens, reads for loopback clients only unless
// access.allow_remote_reads opens them.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	accessOpsToken    = "ops-0123456789abcdef0123"
	accessAcmeToken   = "acme-0123456789abcdef0123"
	accessGlobexToken = "globex-0123456789abcdef0123"
	// accessGlobexSHA256 is the SHA-256 of accessGlobexToken: that entry
	// lists the digest, not the token.
	accessGlobexSHA256 = "49a225c747f822bec31872d36e647d9a24ac3f312359c3e0975c6f5e912d6453"
)

// accessRecord is a preflight the service answered, and its tenant.
type accessRecord struct {
	tenant, preflightID, auditID string
	body                         []byte
}

func accessPreflight(t *testing.T, s *Server, tenant string) accessRecord {
	t.Helper()
	key := "access-" + strings.ReplaceAll(tenant, ":", "-") + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var body []byte
	if tenant == "" {
		body = soakEchoRequest(key, 1)
	} else {
		var req map[string]any
		if err := json.Unmarshal(soakIdemRequest(key, time.Now().UTC().Truncate(time.Second)), &req); err != nil {
			t.Fatal(err)
		}
		req["context"].(map[string]any)["request"].(map[string]any)["tenant"].(map[string]any)["idRef"] = tenant
		body, _ = json.Marshal(req)
	}
	status, out, _ := PostJSON(t, s.URL("/v1/preflight"), body)
	var d struct {
		PreflightID string `json:"preflight_id"`
		AuditID     string `json:"audit_id"`
	}
	if status != http.StatusOK || json.Unmarshal(out, &d) != nil {
		t.Fatalf("preflight for tenant %q: %d %s", tenant, status, out)
	}
	return accessRecord{tenant: tenant, preflightID: d.PreflightID, auditID: d.AuditID, body: out}
}

func accessGet(t *testing.T, base, path, token string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), fltWait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func TestAccessTokensScopeReads(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(tokens, []byte(fmt.Sprintf(`tokens:
  - {name: ops, tenant: "*", token: %s}
  - {name: acme, tenant: "tenant:acme", token: %s}
  - {name: globex, tenant: "tenant:globex", sha256: %s}
`, accessOpsToken, accessAcmeToken, accessGlobexSHA256)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "autonomy.yaml")
	if err := os.WriteFile(cfg, []byte("access:\n  tokens_file: "+tokens+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := StartServer(t, ServeOptions{Config: cfg})
	records := map[string]accessRecord{
		"acme":   accessPreflight(t, s, "tenant:acme"),
		"globex": accessPreflight(t, s, "tenant:globex"),
		"none":   accessPreflight(t, s, ""),
	}
	// Which records each credential reads; the rest are 404 (or 401
	// without a valid token).
	tests := map[string]struct {
		token  string
		status int // for records outside reads
		reads  []string
	}{
		"no token":         {status: http.StatusUnauthorized},
		"unknown token":    {token: "nobody-0123456789abcdef0123", status: http.StatusUnauthorized},
		"digest as token":  {token: accessGlobexSHA256, status: http.StatusUnauthorized},
		"acme token":       {token: accessAcmeToken, status: http.StatusNotFound, reads: []string{"acme"}},
		"globex by digest": {token: accessGlobexToken, status: http.StatusNotFound, reads: []string{"globex"}},
		"all-tenant token": {token: accessOpsToken, reads: []string{"acme", "globex", "none"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for recName, rec := range records {
				want := tc.status
				readable := false
				for _, r := range tc.reads {
					readable = readable || r == recName
				}
				if readable {
					want = http.StatusOK
				}
				status, body := accessGet(t, "http://"+s.HTTPAddr, "/v1/preflight/"+rec.preflightID, tc.token)
				if status != want || (readable && string(body) != string(rec.body)) {
					t.Errorf("GET preflight of %s: %d %.200s, want %d", recName, status, body, want)
				}
				status, body = accessGet(t, "http://"+s.HTTPAddr, "/v1/audit/"+rec.auditID, tc.token)
				if status != want {
					t.Errorf("GET audit of %s: %d %.200s, want %d", recName, status, body, want)
				}
				if readable && !strings.Contains(string(body), rec.preflightID) {
					t.Errorf("audit of %s does not hold its preflight frame: %.300s", recName, body)
				}
			}
		})
	}
	for _, secret := range []string{accessOpsToken, accessAcmeToken, accessGlobexToken, "nobody-0123456789abcdef0123"} {
		if strings.Contains(s.Logs(), secret) {
			t.Fatalf("a token is in the log:\n%s", s.Logs())
		}
	}
}

// TestAccessWithoutTokensLoopbackOnly listens on every interface and reads
// over loopback and over the host's own non-loopback address.
func TestAccessWithoutTokensLoopbackOnly(t *testing.T) {
	remote := accessNonLoopbackIP(t)
	tests := map[string]struct {
		config       string
		remoteStatus int
	}{
		"closed by default":        {config: "", remoteStatus: http.StatusForbidden},
		"opened by the config key": {config: "access:\n  allow_remote_reads: true\n", remoteStatus: http.StatusOK},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "autonomy.yaml")
			if err := os.WriteFile(cfg, []byte(tc.config), 0o600); err != nil {
				t.Fatal(err)
			}
			s := StartServer(t, ServeOptions{Config: cfg, Args: []string{"--http-addr", "0.0.0.0:0"}})
			_, port, err := net.SplitHostPort(s.HTTPAddr)
			if err != nil {
				t.Fatal(err)
			}
			local := "http://" + net.JoinHostPort("127.0.0.1", port)
			rec := accessPreflightAt(t, local)
			for who, want := range map[string]int{local: http.StatusOK, "http://" + net.JoinHostPort(remote.String(), port): tc.remoteStatus} {
				for _, path := range []string{"/v1/preflight/" + rec.preflightID, "/v1/audit/" + rec.auditID} {
					status, body := accessGet(t, who, path, "")
					if status != want {
						t.Errorf("GET %s%s: %d %.200s, want %d", who, path, status, body, want)
					}
					if want == http.StatusForbidden && !strings.Contains(string(body), "remote-reads-forbidden") {
						t.Errorf("GET %s%s: %s, want the remote-reads-forbidden code", who, path, body)
					}
				}
				// Posting preflights is not a read: it is never refused for
				// being remote.
				status, body, _ := PostJSON(t, who+"/v1/preflight", soakEchoRequest("access-post-"+strconv.Itoa(want), 1))
				if status != http.StatusOK {
					t.Errorf("POST %s/v1/preflight: %d %s", who, status, body)
				}
			}
		})
	}
}

func accessPreflightAt(t *testing.T, base string) accessRecord {
	t.Helper()
	status, out, _ := PostJSON(t, base+"/v1/preflight", soakEchoRequest("access-remote", 1))
	var d struct {
		PreflightID string `json:"preflight_id"`
		AuditID     string `json:"audit_id"`
	}
	if status != http.StatusOK || json.Unmarshal(out, &d) != nil {
		t.Fatalf("preflight: %d %s", status, out)
	}
	return accessRecord{preflightID: d.PreflightID, auditID: d.AuditID, body: out}
}

// accessNonLoopbackIP returns an IPv4 address of this host that is not
// loopback; it skips where there is none, except under CI.
func accessNonLoopbackIP(t *testing.T) net.IP {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no non-loopback IPv4 address on this host")
	}
	t.Skip("no non-loopback IPv4 address on this host to read from")
	return nil
}
