// Package ids makes preflight and audit ids: 128 bits from crypto/rand,
// base64url without padding, behind a short prefix ("pf_", "au_"), so every
// id matches ^[A-Za-z0-9_-]{16,128}$.
package ids

import (
	"crypto/rand"
	"encoding/base64"
)

// Prefixes of the two id kinds.
const (
	PreflightPrefix = "pf_"
	AuditPrefix     = "au_"
)

// New returns prefix followed by 128 random bits, base64url-encoded.
func New(prefix string) string {
	var b [16]byte
	// crypto/rand.Read never returns an error on supported platforms; it
	// panics rather than hand out predictable bytes.
	_, _ = rand.Read(b[:])
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// Preflight returns a new preflight id.
func Preflight() string { return New(PreflightPrefix) }

// Audit returns a new audit id.
func Audit() string { return New(AuditPrefix) }
