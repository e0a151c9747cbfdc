package extauthz

import "crypto/x509"

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
