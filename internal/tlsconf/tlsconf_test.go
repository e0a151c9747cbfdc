package tlsconf

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/contractrefine/autonomy/internal/tlsconf/tlstest"
)

type files struct{ cert, key, ca, otherCA, garbage string }

func writeFiles(t *testing.T) (files, *tlstest.CA, *tlstest.CA) {
	t.Helper()
	dir := t.TempDir()
	ca, err := tlstest.NewCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := tlstest.NewCA("other CA")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.Issue(tlstest.Names{CommonName: "server", IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	var f files
	if f.cert, f.key, err = srv.WriteFiles(dir, "server"); err != nil {
		t.Fatal(err)
	}
	if f.ca, err = ca.WriteFile(dir, "ca"); err != nil {
		t.Fatal(err)
	}
	if f.otherCA, err = other.WriteFile(dir, "other"); err != nil {
		t.Fatal(err)
	}
	f.garbage = filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(f.garbage, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f, ca, other
}

func TestLoad(t *testing.T) {
	f, _, _ := writeFiles(t)
	tests := map[string]struct {
		opts     Options
		wantErr  error
		anyErr   bool
		off      bool
		httpAuth tls.ClientAuthType
		grpcAuth tls.ClientAuthType
	}{
		"off":                  {opts: Options{}, off: true},
		"cert without key":     {opts: Options{CertFile: f.cert}, wantErr: ErrIncomplete},
		"key without cert":     {opts: Options{KeyFile: f.key}, wantErr: ErrIncomplete},
		"client CA alone":      {opts: Options{ClientCAFile: f.ca}, wantErr: ErrClientCAWithoutCert},
		"missing cert file":    {opts: Options{CertFile: f.cert + ".missing", KeyFile: f.key}, anyErr: true},
		"key of another cert":  {opts: Options{CertFile: f.cert, KeyFile: f.garbage}, anyErr: true},
		"client CA not PEM":    {opts: Options{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.garbage}, wantErr: ErrNoClientCAs},
		"client CA missing":    {opts: Options{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.ca + ".missing"}, anyErr: true},
		"server TLS only":      {opts: Options{CertFile: f.cert, KeyFile: f.key}, httpAuth: tls.NoClientCert, grpcAuth: tls.NoClientCert},
		"mTLS with client CAs": {opts: Options{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.ca}, httpAuth: tls.VerifyClientCertIfGiven, grpcAuth: tls.RequireAndVerifyClientCert},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Load(tc.opts)
			switch {
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			case tc.anyErr:
				if err == nil {
					t.Fatal("no error")
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if tc.off {
				if c.HTTP != nil || c.GRPC != nil {
					t.Fatalf("TLS on without options: %+v", c)
				}
				return
			}
			if c.HTTP.ClientAuth != tc.httpAuth || c.GRPC.ClientAuth != tc.grpcAuth {
				t.Fatalf("client auth http %v grpc %v, want %v %v", c.HTTP.ClientAuth, c.GRPC.ClientAuth, tc.httpAuth, tc.grpcAuth)
			}
			if c.HTTP.MinVersion < tls.VersionTLS12 || c.GRPC.MinVersion < tls.VersionTLS12 {
				t.Fatal("accepts TLS below 1.2")
			}
		})
	}
}

// TestGRPCConfigRequiresClientCert handshakes over a real socket: the gRPC
// configuration refuses a client without a certificate and one whose
// certificate another CA signed.
func TestGRPCConfigRequiresClientCert(t *testing.T) {
	f, ca, other := writeFiles(t)
	c, err := Load(Options{CertFile: f.cert, KeyFile: f.key, ClientCAFile: f.ca})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", c.GRPC)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				if err := conn.(*tls.Conn).Handshake(); err == nil {
					conn.Write([]byte("ok"))
				}
			}()
		}
	}()
	good, err := ca.Issue(tlstest.Names{CommonName: "envoy", URIs: []string{"spiffe://mesh/envoy"}})
	if err != nil {
		t.Fatal(err)
	}
	forged, err := other.Issue(tlstest.Names{CommonName: "envoy", URIs: []string{"spiffe://mesh/envoy"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		certs []tls.Certificate
		ok    bool
	}{
		"no client certificate":       {},
		"certificate of another CA":   {certs: []tls.Certificate{forged.TLS}},
		"certificate of the right CA": {certs: []tls.Certificate{good.TLS}, ok: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool(), Certificates: tc.certs})
			if err != nil {
				if tc.ok {
					t.Fatal(err)
				}
				return
			}
			defer conn.Close()
			// In TLS 1.3 the server judges the client certificate after the
			// client's handshake returns; the verdict shows on the first read.
			b, err := io.ReadAll(conn)
			if got := err == nil && string(b) == "ok"; got != tc.ok {
				t.Fatalf("accepted = %v (read %q, %v), want %v", got, b, err, tc.ok)
			}
		})
	}
}
