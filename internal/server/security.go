package server

import (
	"crypto/tls"
	"log/slog"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/contractrefine/autonomy/internal/access"
	"github.com/contractrefine/autonomy/internal/config"
	"github.com/contractrefine/autonomy/internal/tlsconf"
)

// security is what the tls, access and store.etcd.tls keys configure.
type security struct {
	tls    tlsconf.Configs
	access *access.Guard
	// etcdTLS is the etcd client's TLS configuration; nil without it.
	etcdTLS *tls.Config
}

// loadSecurity reads the TLS material, the tokens file and the etcd
// client's TLS files, so a bad file stops the server before it listens
// (Options.Listen) or opens the WAL.
func loadSecurity(cfg *config.Config, log *slog.Logger, onRefusal func(code string)) (security, error) {
	var sec security
	var err error
	sec.tls, err = tlsconf.Load(tlsconf.Options{CertFile: cfg.TLS.CertFile, KeyFile: cfg.TLS.KeyFile,
		ClientCAFile: cfg.TLS.ClientCAFile})
	if err != nil {
		return sec, err
	}
	if sec.etcdTLS, err = cfg.Store.Etcd.TLS.ClientConfig(); err != nil {
		return sec, err
	}
	var tokens []access.Token
	if cfg.Access.TokensFile != "" {
		if tokens, err = access.LoadFile(cfg.Access.TokensFile); err != nil {
			return sec, err
		}
	}
	sec.access = access.New(access.Options{Tokens: tokens, AllowRemoteReads: cfg.Access.AllowRemoteReads, Logger: log,
		OnRefusal: onRefusal})
	return sec, nil
}

// CheckSecurity reads the files loadSecurity reads the way New does, for
// check-config.
func CheckSecurity(cfg *config.Config) error {
	_, err := loadSecurity(cfg, nil, nil)
	return err
}

// grpcOptions are the gRPC server's transport options: TLS, and mTLS with
// a client CA (extauthz then takes the caller identity from the verified
// client certificate when the CheckRequest names no principal).
func (sec *security) grpcOptions() []grpc.ServerOption {
	if sec.tls.GRPC == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(sec.tls.GRPC))}
}

// wrapHTTP puts TLS on an HTTP listener when it is configured.
func (sec *security) wrapHTTP(ln net.Listener) net.Listener {
	if sec.tls.HTTP == nil {
		return ln
	}
	conf := sec.tls.HTTP.Clone()
	conf.NextProtos = []string{"http/1.1"}
	return tls.NewListener(ln, conf)
}
