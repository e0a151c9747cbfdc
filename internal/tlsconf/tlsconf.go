package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

var (
	// ErrIncomplete reports a certificate without its key or the reverse.
	ErrIncomplete = errors.New("tlsconf: tls.cert_file and tls.key_file go together")
	// ErrClientCAWithoutCert reports a client CA configured without a server
	// certificate: mTLS needs TLS.
	ErrClientCAWithoutCert = errors.New("tlsconf: tls.client_ca_file needs tls.cert_file and tls.key_file")
	// ErrNoClientCAs reports a client CA file with no PEM certificate in it.
	ErrNoClientCAs = errors.New("tlsconf: tls.client_ca_file holds no PEM certificate")
)

// Options are the tls keys of the configuration. The zero value turns TLS off.
type Options struct {
	// CertFile and KeyFile are the PEM server certificate (chain) and key.
	CertFile string
	KeyFile  string
	// ClientCAFile is a PEM bundle of the CAs that sign client certificates.
	ClientCAFile string
}

// Enabled reports whether the options turn TLS on.
func (o Options) Enabled() bool { return o.CertFile != "" || o.KeyFile != "" }

// Configs are the TLS configurations of the two listeners. Both are nil when
// TLS is off.
type Configs struct {
	// HTTP serves the HTTP API, the HTTP check and the gateway. With a
	// client CA it verifies a client certificate when one is given.
	HTTP *tls.Config
	// GRPC serves ext_authz. With a client CA it requires and verifies one.
	GRPC *tls.Config
}

// Load reads the certificate, the key and the client CAs.
func Load(o Options) (Configs, error) {
	if !o.Enabled() {
		if o.ClientCAFile != "" {
			return Configs{}, ErrClientCAWithoutCert
		}
		return Configs{}, nil
	}
	if o.CertFile == "" || o.KeyFile == "" {
		return Configs{}, ErrIncomplete
	}
	cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
	if err != nil {
		return Configs{}, fmt.Errorf("tlsconf: load tls.cert_file %s and tls.key_file %s: %w", o.CertFile, o.KeyFile, err)
	}
	base := &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
	}
	httpConf, grpcConf := base.Clone(), base.Clone()
	if o.ClientCAFile != "" {
		pool, err := loadPool(o.ClientCAFile)
		if err != nil {
			return Configs{}, err
		}
		httpConf.ClientCAs, httpConf.ClientAuth = pool, tls.VerifyClientCertIfGiven
		grpcConf.ClientCAs, grpcConf.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return Configs{HTTP: httpConf, GRPC: grpcConf}, nil
}

func loadPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: read tls.client_ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: %s", ErrNoClientCAs, path)
	}
	return pool, nil
}
