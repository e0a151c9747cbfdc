package e2e

// TLS on both listeners, mTLS on the gRPC listener with the client
// certificate's principal as the caller identity, and the gRPC listener on
// a Unix socket, all against the real binary over real sockets. The CA and
// every certificate are made at test time (internal/tlsconf/tlstest).

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/contractrefine/autonomy/internal/tlsconf/tlstest"
)

// tlsPKI is a CA, the server's certificate and a set of client
// certificates, written where the server's config can name them.
type tlsPKI struct {
	ca      *tlstest.CA
	config  string // the autonomy.yaml naming the files
	clients map[string]*tlstest.Leaf
}

func newTLSPKI(t *testing.T, mode string) *tlsPKI {
	t.Helper()
	dir := t.TempDir()
	ca, err := tlstest.NewCA("autonomy test CA")
	tlsMust(t, err)
	rogue, err := tlstest.NewCA("rogue CA")
	tlsMust(t, err)
	srv, err := ca.Issue(tlstest.Names{CommonName: "autonomy", DNSNames: []string{"localhost"},
		IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	tlsMust(t, err)
	certFile, keyFile, err := srv.WriteFiles(dir, "server")
	tlsMust(t, err)
	caFile, err := ca.WriteFile(dir, "client-ca")
	tlsMust(t, err)
	p := &tlsPKI{ca: ca, config: filepath.Join(dir, "autonomy.yaml"), clients: map[string]*tlstest.Leaf{}}
	for name, n := range map[string]tlstest.Names{
		"uri":   {CommonName: "agent-uri", URIs: []string{"spiffe://mesh/agent-1"}, DNSNames: []string{"ignored.mesh"}},
		"dns":   {CommonName: "agent-dns", DNSNames: []string{"agent.mesh.local"}},
		"cn":    {CommonName: "agent-cn"},
		"envoy": {CommonName: "envoy", URIs: []string{"spiffe://mesh/envoy"}},
	} {
		p.clients[name], err = ca.Issue(n)
		tlsMust(t, err)
	}
	p.clients["rogue"], err = rogue.Issue(tlstest.Names{CommonName: "agent-uri", URIs: []string{"spiffe://mesh/agent-1"}})
	tlsMust(t, err)
	cfg := fmt.Sprintf("contract_refine:\n  mode: %s\ntls:\n  cert_file: %s\n  key_file: %s\n  client_ca_file: %s\n",
		mode, certFile, keyFile, caFile)
	tlsMust(t, os.WriteFile(p.config, []byte(cfg), 0o600))
	return p
}

func tlsMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// httpsClient trusts the test CA and presents no certificate.
func (p *tlsPKI) httpsClient() *http.Client {
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: p.ca.Pool()}}}
}

// authz dials the gRPC listener presenting the named client certificate
// ("" for none).
func (p *tlsPKI) authz(t *testing.T, addr, client string) authv3.AuthorizationClient {
	t.Helper()
	conf := &tls.Config{RootCAs: p.ca.Pool()}
	if client != "" {
		conf.Certificates = []tls.Certificate{p.clients[client].TLS}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(conf)))
	tlsMust(t, err)
	t.Cleanup(func() { conn.Close() })
	return authv3.NewAuthorizationClient(conn)
}

// tlsPreflight posts a passing one-step tool.echo preflight for actor over
// HTTPS and returns its id.
func tlsPreflight(t *testing.T, c *http.Client, s *Server, actor, session string) string {
	t.Helper()
	var req map[string]any
	tlsMust(t, json.Unmarshal(soakEchoRequest(session, 1), &req))
	req["context"] = map[string]any{"actor": map[string]any{"id": actor, "session_id": session}}
	body, _ := json.Marshal(req)
	resp, err := c.Post("https://"+s.HTTPAddr+"/v1/preflight", "application/json", strings.NewReader(string(body)))
	tlsMust(t, err)
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	var d soakDecision
	if resp.StatusCode != http.StatusOK || json.Unmarshal(out, &d) != nil || d.Outcome != "pass" {
		t.Fatalf("preflight over HTTPS: %d %s", resp.StatusCode, out)
	}
	return d.PreflightID
}

// TestTLSListeners: the HTTP API answers over TLS only, and the gRPC
// listener admits only clients whose certificate the client CA signed. For
// a direct client (a CheckRequest without attributes.source) the principal
// of that certificate is the caller identity the gate compares with the
// preflight's actor; a CheckRequest with a source (Envoy describing its
// downstream) speaks for itself, even when it names no principal.
func TestTLSListeners(t *testing.T) {
	p := newTLSPKI(t, "enforce")
	s := StartServer(t, ServeOptions{Config: p.config})
	https := p.httpsClient()

	t.Run("HTTP API over TLS only", func(t *testing.T) {
		resp, err := https.Get("https://" + s.HTTPAddr + "/readyz")
		tlsMust(t, err)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.TLS == nil {
			t.Fatalf("/readyz over TLS: %d (TLS %v)", resp.StatusCode, resp.TLS != nil)
		}
		if resp, err := http.Get("http://" + s.HTTPAddr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Fatal("plain HTTP answered 200 on the TLS listener")
			}
		}
	})

	tests := map[string]struct {
		client    string // client certificate presented
		actor     string // the preflight's actor.id
		source    bool   // the CheckRequest has attributes.source, as Envoy's do
		principal string // attributes.source.principal
		connects  bool
		allowed   bool
		reason    string
	}{
		"no client certificate":          {client: "", actor: "spiffe://mesh/agent-1"},
		"certificate of another CA":      {client: "rogue", actor: "spiffe://mesh/agent-1"},
		"URI SAN is the actor":           {client: "uri", actor: "spiffe://mesh/agent-1", connects: true, allowed: true},
		"DNS SAN is the actor":           {client: "dns", actor: "agent.mesh.local", connects: true, allowed: true},
		"subject is the actor":           {client: "cn", actor: "CN=agent-cn,O=tlstest", connects: true, allowed: true},
		"certificate names someone else": {client: "dns", actor: "spiffe://mesh/agent-1", connects: true, reason: "contract: preflight_binding_mismatch"},
		"CheckRequest principal wins":    {client: "envoy", actor: "spiffe://mesh/agent-1", source: true, principal: "spiffe://mesh/agent-1", connects: true, allowed: true},
		"CheckRequest principal differs": {client: "envoy", actor: "spiffe://mesh/agent-1", source: true, principal: "spiffe://mesh/intruder", connects: true, reason: "contract: preflight_binding_mismatch"},
		"Envoy source without principal": {client: "envoy", actor: "spiffe://mesh/agent-1", source: true, connects: true, allowed: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			id := tlsPreflight(t, https, s, tc.actor, "tls-"+strings.ReplaceAll(name, " ", "-"))
			req := ToolCheck("tool.echo", map[string]any{"msg": "soak"}, "req-"+name,
				map[string]string{"x-autonomy-preflight-id": id})
			req.Attributes.Source = nil
			if tc.source {
				req.Attributes.Source = &authv3.AttributeContext_Peer{Principal: tc.principal}
			}
			ctx, cancel := context.WithTimeout(context.Background(), fltWait)
			defer cancel()
			resp, err := p.authz(t, s.GRPCAddr, tc.client).Check(ctx, req)
			if !tc.connects {
				if err == nil {
					t.Fatalf("Check answered without an acceptable client certificate: %v", resp.GetStatus())
				}
				return
			}
			tlsMust(t, err)
			allowed := codes.Code(resp.GetStatus().GetCode()) == codes.OK
			if allowed != tc.allowed || (!allowed && resp.GetStatus().GetMessage() != tc.reason) {
				t.Fatalf("allowed=%v %q, want allowed=%v %q", allowed, resp.GetStatus().GetMessage(), tc.allowed, tc.reason)
			}
		})
	}
}

// TestTLSPlainGRPCRefused: a client that does not speak TLS gets no
// decision from the mTLS listener.
func TestTLSPlainGRPCRefused(t *testing.T) {
	p := newTLSPKI(t, "advisory")
	s := StartServer(t, ServeOptions{Config: p.config})
	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	tlsMust(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), fltWait)
	defer cancel()
	if _, err := authv3.NewAuthorizationClient(conn).Check(ctx, ToolCheck("tool.echo", nil, "req-plain", nil)); err == nil {
		t.Fatal("a plaintext client got a decision from the TLS listener")
	}
}

// TestGRPCOverUnixSocket serves ext_authz on a Unix socket (a sidecar's
// setup): the listening line names it, and a Check over it allows a
// preflight once and denies its replay.
func TestGRPCOverUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "authz.sock")
	s := StartServer(t, ServeOptions{Mode: "enforce", Args: []string{"--grpc-addr", "unix:" + sock}})
	if s.GRPCAddr != "unix:"+sock {
		t.Fatalf("listening grpc_addr %q, want unix:%s", s.GRPCAddr, sock)
	}
	st, err := os.Stat(sock)
	if err != nil || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("%s is not a socket: %v %v", sock, st, err)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	tlsMust(t, err)
	defer conn.Close()
	authz := authv3.NewAuthorizationClient(conn)
	c := newSoakClient(t, s)
	status, body, _, err := c.post(soakEchoRequest("unix-socket", 1))
	var d soakDecision
	if err != nil || status != http.StatusOK || json.Unmarshal(body, &d) != nil {
		t.Fatalf("preflight: %d %s %v", status, body, err)
	}
	for i, want := range []bool{true, false} {
		ctx, cancel := context.WithTimeout(context.Background(), fltWait)
		resp, err := authz.Check(ctx, ToolCheck("tool.echo", map[string]any{"msg": "soak"}, fmt.Sprintf("req-unix-%d", i),
			map[string]string{"x-autonomy-preflight-id": d.PreflightID}))
		cancel()
		tlsMust(t, err)
		if got := codes.Code(resp.GetStatus().GetCode()) == codes.OK; got != want {
			t.Fatalf("check %d over the Unix socket: allowed=%v %q, want %v", i, got, resp.GetStatus().GetMessage(), want)
		}
	}
}
