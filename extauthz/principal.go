package extauthz

import (
	"context"
	"crypto/x509"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// principalOf names a client certificate the way Envoy names a peer: the
// first URI SAN (a SPIFFE id), else the first DNS SAN, else the subject.
func principalOf(c *x509.Certificate) string {
	if len(c.URIs) > 0 {
		return c.URIs[0].String()
	}
	if len(c.DNSNames) > 0 {
		return c.DNSNames[0]
	}
	return c.Subject.String()
}

// peerPrincipal names the verified client certificate of a gRPC call over
// mTLS, or returns "" when the call carries none.
func peerPrincipal(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.PeerCertificates) == 0 {
		return ""
	}
	return principalOf(info.State.PeerCertificates[0])
}
