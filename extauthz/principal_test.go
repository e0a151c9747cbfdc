package extauthz_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/url"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/extauthz"
)

// mtlsCA is a throwaway certificate authority for one test.
type mtlsCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newMTLSCA(t testing.TB) *mtlsCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &mtlsCA{cert: cert, key: key, pool: pool}
}

// issue returns a leaf for 127.0.0.1 (server) or for the URI SAN uri
// (client).
func (ca *mtlsCA) issue(t testing.TB, serial int64, uri string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature}
	if uri == "" {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	} else {
		u, err := url.Parse(uri)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = []*url.URL{u}
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestCheckPrincipalOverMTLS: when Envoy itself connects over mTLS, the
// caller is the downstream principal Envoy reports in the CheckRequest
// (docs/SECURITY.md), never Envoy's own certificate; only a direct client, whose
// CheckRequest has no source at all, is named by its certificate.
func TestCheckPrincipalOverMTLS(t *testing.T) {
	const (
		envoyID   = "spiffe://cluster.local/ns/mesh/sa/envoy"
		malloryID = "spiffe://cluster.local/ns/agents/sa/mallory"
	)
	ca := newMTLSCA(t)
	e := newEnv(t, binding.ModeEnforce)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{ca.issue(t, 2, "")}, ClientCAs: ca.pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})))
	extauthz.NewServer(e.gate).Register(srv)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	clientAs := func(t *testing.T, serial int64, id string) authv3.AuthorizationClient {
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			Certificates: []tls.Certificate{ca.issue(t, serial, id)}, RootCAs: ca.pool, MinVersion: tls.VersionTLS12})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return authv3.NewAuthorizationClient(conn)
	}

	tests := map[string]struct {
		connectAs string // the certificate of the gRPC client
		// source is the CheckRequest's attributes.source: "envoy" keeps the
		// one envoyCheck fills (with downstreamPrincipal), "none" drops it.
		source              string
		downstreamPrincipal string
		wantAllow           bool
	}{
		"envoy forwards a downstream without a certificate": {
			connectAs: envoyID, source: "envoy", downstreamPrincipal: "", wantAllow: true,
		},
		"envoy forwards the actor's certificate": {
			connectAs: envoyID, source: "envoy", downstreamPrincipal: principal, wantAllow: true,
		},
		"envoy forwards another caller's certificate": {
			connectAs: envoyID, source: "envoy", downstreamPrincipal: malloryID,
		},
		"direct client holding the actor's certificate": {
			connectAs: principal, source: "none", wantAllow: true,
		},
		"direct client holding another certificate": {
			connectAs: malloryID, source: "none",
		},
	}
	serial := int64(10)
	for name, tc := range tests {
		serial++
		t.Run(name, func(t *testing.T) {
			c := clientAs(t, serial, tc.connectAs)
			b := e.record("tool.echo", map[string]any{"text": "hi"})
			req := envoyCheck("tool.echo", map[string]any{"text": "hi"}, b.PreflightID, "req-"+name)
			req.Attributes.Source.Principal = tc.downstreamPrincipal
			if tc.source == "none" {
				req.Attributes.Source = nil
			}
			resp := check(t, c, req)
			if tc.wantAllow {
				wantAllowed(t, resp, b.AuditID, "enforce", "contract: passed", "")
				return
			}
			wantDenied(t, resp, codes.PermissionDenied, typev3.StatusCode_Forbidden, "contract: preflight_binding_mismatch")
		})
	}
}
