package access

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/contractrefine/autonomy/internal/httpapi"
	"github.com/contractrefine/autonomy/preflight"
)

var _ httpapi.Access = (*Guard)(nil)

const (
	opsToken  = "ops-token-0123456789abcdef"
	acmeToken = "acme-token-0123456789abcdef"
	globexRaw = "globex-token-0123456789abcdef"
)

func sha(s string) string { d := sha256.Sum256([]byte(s)); return hex.EncodeToString(d[:]) }

func TestParse(t *testing.T) {
	tests := map[string]struct {
		yaml    string
		want    []string // name=tenant
		wantErr error
		anyErr  bool
	}{
		"plain and digest": {
			yaml: "tokens:\n  - {name: ops, tenant: '*', token: " + opsToken + "}\n  - {name: globex, tenant: globex, sha256: " + sha(globexRaw) + "}\n",
			want: []string{"ops=*", "globex=globex"},
		},
		"unnamed entry gets its index": {
			yaml: "tokens:\n  - {tenant: acme, token: " + acmeToken + "}\n",
			want: []string{"tokens[0]=acme"},
		},
		"empty file":         {yaml: "", wantErr: ErrNoTokens},
		"empty list":         {yaml: "tokens: []\n", wantErr: ErrNoTokens},
		"token and digest":   {yaml: "tokens:\n  - {name: a, tenant: x, token: " + opsToken + ", sha256: " + sha(opsToken) + "}\n", wantErr: ErrBadToken},
		"neither":            {yaml: "tokens:\n  - {name: a, tenant: x}\n", wantErr: ErrBadToken},
		"short token":        {yaml: "tokens:\n  - {name: a, tenant: x, token: short}\n", wantErr: ErrBadToken},
		"no tenant":          {yaml: "tokens:\n  - {name: a, token: " + opsToken + "}\n", wantErr: ErrBadToken},
		"digest no tenant":   {yaml: "tokens:\n  - {name: a, sha256: " + sha(opsToken) + "}\n", wantErr: ErrBadToken},
		"bad hex":            {yaml: "tokens:\n  - {name: a, tenant: x, sha256: zz}\n", wantErr: ErrBadToken},
		"duplicate name":     {yaml: "tokens:\n  - {name: a, tenant: x, token: " + opsToken + "}\n  - {name: a, tenant: y, token: " + acmeToken + "}\n", wantErr: ErrBadToken},
		"same token twice":   {yaml: "tokens:\n  - {name: a, tenant: x, token: " + opsToken + "}\n  - {name: b, tenant: y, sha256: " + sha(opsToken) + "}\n", wantErr: ErrBadToken},
		"unknown key":        {yaml: "tokens:\n  - {name: a, tenant: x, token: " + opsToken + ", scope: all}\n", anyErr: true},
		"not a list":         {yaml: "tokens: yes\n", anyErr: true},
		"unknown top-level":  {yaml: "tokenz: []\n", anyErr: true},
		"broken yaml syntax": {yaml: "tokens: [\n", anyErr: true},
		// bearer() trims what a request sends, so these could never match.
		"token ends in a space": {yaml: "tokens:\n  - {name: a, tenant: x, token: \"" + opsToken + " \"}\n", wantErr: ErrBadToken},
		"token holds a newline": {yaml: "tokens:\n  - {name: a, tenant: x, token: \"" + opsToken + "\\nx\"}\n", wantErr: ErrBadToken},
		// A request can send white space inside a token.
		"token holds a space": {yaml: "tokens:\n  - {name: a, tenant: x, token: \"" + opsToken + " x\"}\n", want: []string{"a=x"}},
		// A trailing document marker adds no document with tokens in it.
		"trailing document marker": {yaml: "tokens:\n  - {name: a, tenant: x, token: " + opsToken + "}\n---\n# end\n", want: []string{"a=x"}},
		// The second document's tokens would be dropped unread.
		"two documents":          {yaml: "tokens:\n  - {name: a, tenant: x, token: " + opsToken + "}\n---\ntokens:\n  - {name: b, tenant: y, token: " + acmeToken + "}\n", anyErr: true},
		"broken second document": {yaml: "tokens:\n  - {name: a, tenant: x, token: " + opsToken + "}\n---\ntokens: [\n", anyErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			toks, err := Parse(strings.NewReader(tc.yaml))
			switch {
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			case tc.anyErr:
				if err == nil {
					t.Fatalf("no error, tokens %+v", toks)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			var got []string
			for _, tok := range toks {
				got = append(got, tok.Name+"="+tok.Tenant)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("tokens %v, want %v", got, tc.want)
			}
			if err == nil && strings.Contains(tc.yaml, "token:") {
				for _, tok := range toks {
					if strings.Contains(strings.ToLower(tok.Name+tok.Tenant), "token-") {
						t.Fatalf("token text kept outside the digest: %+v", tok)
					}
				}
			}
		})
	}
}

func TestLoadFileErrorsNameTheKey(t *testing.T) {
	_, err := LoadFile(t.TempDir() + "/missing.yaml")
	if err == nil || !strings.Contains(err.Error(), "access.tokens_file") {
		t.Fatalf("err = %v, want it to name access.tokens_file", err)
	}
	// A misspelt key is named with its fix, as in the configuration file,
	// and not as a field of a Go type.
	_, err = Parse(strings.NewReader("tokens:\n  - name: a\n    tenant: x\n    tokn: " + opsToken + "\n"))
	if err == nil || !strings.Contains(err.Error(), `line 4: unknown key "tokn" (did you mean "token"?)`) || strings.Contains(err.Error(), "fileEntry") {
		t.Fatalf("a misspelt key: %v", err)
	}
}

// TestLoadFileRefusesWorldWritable: a tokens file every user may write
// would let any of them add a token for every tenant.
func TestLoadFileRefusesWorldWritable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.yaml")
	if err := os.WriteFile(path, []byte("tokens:\n  - {name: ops, tenant: '*', token: "+opsToken+"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(path); err != nil {
		t.Fatalf("mode 0600: %v", err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(path); err == nil || !strings.Contains(err.Error(), "writable by every user") {
		t.Fatalf("mode 0666: %v, want a refusal", err)
	}
}

func testTokens(t *testing.T) []Token {
	t.Helper()
	toks, err := Parse(strings.NewReader("tokens:\n" +
		"  - {name: ops, tenant: '*', token: " + opsToken + "}\n" +
		"  - {name: acme, tenant: acme, token: " + acmeToken + "}\n" +
		"  - {name: globex, tenant: globex, sha256: " + sha(globexRaw) + "}\n"))
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

func TestAuthorize(t *testing.T) {
	toks := testTokens(t)
	tests := map[string]struct {
		tokens      []Token
		remoteReads bool
		remote      string
		auth        string
		tenant      string
		all, ok     bool
	}{
		"tokens: none presented":       {tokens: toks, remote: "127.0.0.1:5", ok: false},
		"tokens: wrong token":          {tokens: toks, remote: "127.0.0.1:5", auth: "Bearer " + opsToken + "x"},
		"tokens: basic scheme":         {tokens: toks, remote: "127.0.0.1:5", auth: "Basic " + opsToken},
		"tokens: bare token":           {tokens: toks, remote: "127.0.0.1:5", auth: opsToken},
		"tokens: all tenants":          {tokens: toks, remote: "192.0.2.9:5", auth: "Bearer " + opsToken, tenant: "*", all: true, ok: true},
		"tokens: one tenant":           {tokens: toks, remote: "192.0.2.9:5", auth: "Bearer " + acmeToken, tenant: "acme", ok: true},
		"tokens: digest entry":         {tokens: toks, remote: "192.0.2.9:5", auth: "bearer " + globexRaw, tenant: "globex", ok: true},
		"tokens: loopback needs token": {tokens: toks, remote: "[::1]:5"},
		"tokens: sent twice":           {tokens: toks, remote: "192.0.2.9:5", auth: "Bearer " + opsToken + "\x00Bearer bogus"},
		"no tokens: loopback v4":       {remote: "127.0.0.1:5", all: true, ok: true},
		"no tokens: loopback v6":       {remote: "[::1]:5", all: true, ok: true},
		"no tokens: remote":            {remote: "192.0.2.9:5", all: true},
		"no tokens: garbage addr":      {remote: "nonsense", all: true},
		"no tokens: remote opened":     {remote: "192.0.2.9:5", remoteReads: true, all: true, ok: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := New(Options{Tokens: tc.tokens, AllowRemoteReads: tc.remoteReads})
			r := httptest.NewRequest(http.MethodGet, "/v1/audit/au_x", nil)
			r.RemoteAddr, r.Host = tc.remote, "localhost:8181"
			for a := range strings.SplitSeq(tc.auth, "\x00") {
				if a != "" {
					r.Header.Add("Authorization", a)
				}
			}
			tenant, all, ok := g.Authorize(r)
			if tenant != tc.tenant || all != tc.all || ok != tc.ok {
				t.Fatalf("Authorize = (%q, %v, %v), want (%q, %v, %v)", tenant, all, ok, tc.tenant, tc.all, tc.ok)
			}
		})
	}
}

func TestHandler(t *testing.T) {
	toks := testTokens(t)
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	tests := map[string]struct {
		tokens      []Token
		remoteReads bool
		method      string
		path        string
		remote      string
		host        string // "" is localhost:8181
		forwarded   bool   // carries X-Forwarded-For, as a proxy sets it
		auth        string
		status      int
		code        string
	}{
		"local read passes":     {method: "GET", path: "/v1/preflight/pf_x", remote: "127.0.0.1:9", status: http.StatusTeapot},
		"local read by address": {method: "GET", path: "/v1/preflight/pf_x", remote: "[::1]:9", host: "[::1]:8181", status: http.StatusTeapot},
		"local read, no Host":   {method: "GET", path: "/v1/preflight/pf_x", remote: "127.0.0.1:9", host: "-", status: http.StatusTeapot},
		// A browser page whose name was pointed at 127.0.0.1 (DNS
		// rebinding) connects over loopback but names its own host.
		"local read naming another host": {method: "GET", path: "/v1/audit/au_x", remote: "127.0.0.1:9", host: "rebind.evil.example:8181",
			status: http.StatusForbidden, code: preflight.CodeRemoteReadsForbidden},
		"local read naming only a port": {method: "GET", path: "/v1/audit/au_x", remote: "127.0.0.1:9", host: ":8181",
			status: http.StatusForbidden, code: preflight.CodeRemoteReadsForbidden},
		// A proxy on this host that keeps the client's Host connects over
		// loopback for every client: what it forwarded is not local.
		"proxied read over loopback": {method: "GET", path: "/v1/audit/au_x", remote: "127.0.0.1:9", forwarded: true,
			status: http.StatusForbidden, code: preflight.CodeRemoteReadsForbidden},
		"remote read refused":         {method: "GET", path: "/v1/preflight/pf_x", remote: "192.0.2.9:9", status: http.StatusForbidden, code: preflight.CodeRemoteReadsForbidden},
		"remote audit refused":        {method: "GET", path: "/v1/audit/au_x", remote: "192.0.2.9:9", status: http.StatusForbidden, code: preflight.CodeRemoteReadsForbidden},
		"remote explain refused":      {method: "GET", path: "/ui/audit/au_x", remote: "192.0.2.9:9", status: http.StatusForbidden, code: preflight.CodeRemoteReadsForbidden},
		"remote HEAD refused":         {method: "HEAD", path: "/v1/audit/au_x", remote: "192.0.2.9:9", status: http.StatusForbidden},
		"remote read opened":          {remoteReads: true, method: "GET", path: "/v1/audit/au_x", remote: "192.0.2.9:9", status: http.StatusTeapot},
		"remote preflight POST":       {method: "POST", path: "/v1/preflight", remote: "192.0.2.9:9", status: http.StatusTeapot},
		"remote check":                {method: "GET", path: "/v1/authz/v1/tool", remote: "192.0.2.9:9", status: http.StatusTeapot},
		"remote health":               {method: "GET", path: "/readyz", remote: "192.0.2.9:9", status: http.StatusTeapot},
		"tokens: no token":            {tokens: toks, method: "GET", path: "/v1/audit/au_x", remote: "127.0.0.1:9", status: http.StatusUnauthorized, code: preflight.CodeUnauthorized},
		"tokens: wrong token":         {tokens: toks, method: "GET", path: "/v1/audit/au_x", remote: "127.0.0.1:9", auth: "Bearer " + strings.Repeat("z", 30), status: http.StatusUnauthorized, code: preflight.CodeUnauthorized},
		"tokens: tenant token passes": {tokens: toks, method: "GET", path: "/v1/audit/au_x", remote: "192.0.2.9:9", auth: "Bearer " + acmeToken, status: http.StatusTeapot},
		"tokens: POST needs none":     {tokens: toks, method: "POST", path: "/v1/preflight", remote: "192.0.2.9:9", status: http.StatusTeapot},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			g := New(Options{Tokens: tc.tokens, AllowRemoteReads: tc.remoteReads})
			r := httptest.NewRequest(tc.method, tc.path, nil)
			r.RemoteAddr = tc.remote
			switch tc.host {
			case "":
				r.Host = "localhost:8181"
			case "-":
				r.Host = ""
			default:
				r.Host = tc.host
			}
			if tc.auth != "" {
				r.Header.Set("Authorization", tc.auth)
			}
			if tc.forwarded {
				r.Header.Set("X-Forwarded-For", "198.51.100.7")
			}
			w := httptest.NewRecorder()
			g.Handler(next).ServeHTTP(w, r)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d (%s)", w.Code, tc.status, w.Body)
			}
			if got := w.Header().Get("WWW-Authenticate"); (tc.status == http.StatusUnauthorized) != (got != "") {
				t.Errorf("WWW-Authenticate %q on a %d", got, tc.status)
			}
			if tc.code == "" || tc.method == "HEAD" {
				return
			}
			var body struct {
				Error struct{ Code string } `json:"error"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || body.Error.Code != tc.code {
				t.Fatalf("body %s, want code %s", w.Body, tc.code)
			}
		})
	}
}

// TestNoTokenLogged presents right and wrong tokens and checks that no
// token text reaches the log.
func TestNoTokenLogged(t *testing.T) {
	var logs bytes.Buffer
	g := New(Options{Tokens: testTokens(t), Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	h := g.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	wrong := "wrong-token-0123456789abcdef"
	for _, auth := range []string{"Bearer " + wrong, "Bearer " + acmeToken, "Basic " + opsToken, "Bearer " + opsToken + " trailing"} {
		r := httptest.NewRequest(http.MethodGet, "/v1/audit/au_x", nil)
		r.Header.Set("Authorization", auth)
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	if logs.Len() == 0 {
		t.Fatal("refused reads logged nothing")
	}
	for _, secret := range []string{wrong, acmeToken, opsToken, globexRaw} {
		if strings.Contains(logs.String(), secret) {
			t.Fatalf("log holds a token: %s", logs.String())
		}
	}
}

// TestRemoteOverRealSocket serves on every interface and reads over loopback
// and over the host's own non-loopback address: the first is served, the
// second refused.
func TestRemoteOverRealSocket(t *testing.T) {
	remoteIP := nonLoopbackIP(t)
	ln, err := net.Listen("tcp", net.JoinHostPort("", "0"))
	if err != nil {
		t.Fatal(err)
	}
	g := New(Options{})
	srv := &http.Server{Handler: g.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := g.Authorize(r); !ok {
			t.Errorf("handler reached for a request Authorize refuses (%s)", r.RemoteAddr)
		}
		w.Write([]byte("record"))
	}))}
	go srv.Serve(ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	tests := map[string]struct {
		host   string
		status int
	}{
		"loopback":     {host: "127.0.0.1", status: http.StatusOK},
		"non-loopback": {host: remoteIP.String(), status: http.StatusForbidden},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(tc.host)}}
			client := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
			resp, err := client.Get("http://" + net.JoinHostPort(tc.host, strconv.Itoa(port)) + "/v1/audit/au_x")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, b)
			}
		})
	}
}

// nonLoopbackIP returns an address of this host that is not loopback, or
// skips (fails under CI, where the runner has one).
func nonLoopbackIP(t *testing.T) net.IP {
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
	t.Skip("no non-loopback IPv4 address on this host")
	return nil
}

// TestErrorBodyMatchesAPI reads the 401 and the 403 over real HTTP and
// checks that their bodies have the HTTP API's error shape (docs/API.md#errors):
// contractVersion and supportedVersions as in httpapi's 404, and the codes,
// messages and headers of this package.
func TestErrorBodyMatchesAPI(t *testing.T) {
	type apiError struct {
		Code              string   `json:"code"`
		ContractVersion   *string  `json:"contractVersion"`
		Path              *string  `json:"path"`
		Message           string   `json:"message"`
		Retryable         *bool    `json:"retryable"`
		SupportedVersions []string `json:"supportedVersions"`
	}
	type errorBody struct {
		Error  apiError   `json:"error"`
		Errors []apiError `json:"errors"`
	}
	get := func(t *testing.T, h http.Handler, auth string) (*http.Response, errorBody) {
		t.Helper()
		srv := httptest.NewServer(h)
		defer srv.Close()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/audit/", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var body errorBody
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			t.Fatalf("body %s: %v", b, err)
		}
		return resp, body
	}

	api := httpapi.New(httpapi.Options{})
	notFound, want := get(t, api, "")
	if notFound.StatusCode != http.StatusNotFound || want.Error.ContractVersion == nil || *want.Error.ContractVersion == "" || len(want.Error.SupportedVersions) == 0 {
		t.Fatalf("httpapi 404: status %d, body %+v", notFound.StatusCode, want)
	}

	remote := New(Options{})
	remoteGuard := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.RemoteAddr = "192.0.2.9:9" // a remote client, whatever the test's socket
		remote.Handler(api).ServeHTTP(w, r)
	})
	tests := map[string]struct {
		h       http.Handler
		auth    string
		status  int
		code    string
		message string
		wwwAuth string
	}{
		"401 unauthorized": {
			h: New(Options{Tokens: testTokens(t)}).Handler(api), auth: "Bearer " + strings.Repeat("z", 30),
			status: http.StatusUnauthorized, code: preflight.CodeUnauthorized,
			message: "A valid bearer token is required.", wwwAuth: `Bearer realm="autonomy"`,
		},
		"403 remote-reads-forbidden": {
			h: remoteGuard, status: http.StatusForbidden, code: preflight.CodeRemoteReadsForbidden,
			message: "Reads are served to loopback clients only; configure access.tokens_file or access.allow_remote_reads.",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			resp, body := get(t, tc.h, tc.auth)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if ct := resp.Header.Get("Content-Type"); ct != notFound.Header.Get("Content-Type") || ct != "application/json" {
				t.Fatalf("Content-Type %q, want %q", ct, "application/json")
			}
			if got := resp.Header.Get("WWW-Authenticate"); got != tc.wwwAuth {
				t.Fatalf("WWW-Authenticate %q, want %q", got, tc.wwwAuth)
			}
			if len(body.Errors) != 1 {
				t.Fatalf("errors has %d entries, want 1: %+v", len(body.Errors), body)
			}
			for _, e := range []apiError{body.Error, body.Errors[0]} {
				if e.Code != tc.code || e.Message != tc.message || e.Path == nil || *e.Path != "" || e.Retryable == nil || *e.Retryable {
					t.Fatalf("error %+v, want code %s, message %q, path \"\", retryable false", e, tc.code, tc.message)
				}
				if e.ContractVersion == nil || *e.ContractVersion != *want.Error.ContractVersion {
					t.Fatalf("contractVersion %v, want %q as in httpapi's 404", e.ContractVersion, *want.Error.ContractVersion)
				}
				if !slices.Equal(e.SupportedVersions, want.Error.SupportedVersions) {
					t.Fatalf("supportedVersions %q, want %q as in httpapi's 404", e.SupportedVersions, want.Error.SupportedVersions)
				}
			}
		})
	}
}
