// Package canon writes JSON in one canonical form, so that equal values
// always have equal bytes and equal digests.
//
// The form follows RFC 8785 (JSON Canonicalization Scheme): no insignificant
// white space; object members sorted by the UTF-16 code units of their names;
// strings escaped only where JSON requires it (quote, backslash and control
// characters, with the short escapes \b \t \n \f \r), everything else written
// as UTF-8; numbers written as ECMAScript's Number.prototype.toString writes
// an IEEE 754 double (125.0 becomes 125, 1e21 becomes 1e+21). Numbers are
// therefore compared as doubles: integers beyond 2^53 lose precision, as they
// do in every JSON peer that follows the RFC.
//
// Digest is "sha256:" followed by the lowercase hex SHA-256 of the canonical
// bytes. The gate compares it with the digest recorded at preflight to bind
// a preflight id to its arguments.
package canon
