// Package tlsconf builds the TLS configurations of the service's listeners
// from tls.cert_file, tls.key_file and tls.client_ca_file.
//
// Both listeners present the same certificate. With a client CA the gRPC
// listener requires and verifies a client certificate (mTLS): the peer is a
// proxy or a sidecar that must prove who it is before it may ask for a
// decision. The HTTP listener verifies a client certificate only when one is
// given, because agents posting preflights and operators reading audit
// records are authenticated by other means (docs/SECURITY.md) and forward-auth
// proxies that do present a certificate get their principal used as the
// caller identity.
//
// Certificates are read once, when the server starts; rotating them is a
// restart.
package tlsconf
