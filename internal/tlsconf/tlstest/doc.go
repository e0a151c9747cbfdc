// Package tlstest makes throwaway certificate authorities and certificates
// for tests, so no test depends on key material checked into the repository
// or on certificates that expire.
package tlstest
