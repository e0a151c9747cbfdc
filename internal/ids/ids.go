// Package ids makes preflight and audit ids: a short prefix ("pf_", "au_"),
// the time of creation to the millisecond in eight characters that sort as
// the time does, and 96 bits from crypto/rand, base64url without padding.
// Every id matches ^[A-Za-z0-9_-]{16,128}$.
//
// The time comes first so that ids made close together sort close
// together: the WAL keys its binding, consumed and audit indexes by these
// ids, and a new key then lands at the end of its B+tree instead of on a
// random leaf, so a commit rewrites a page or two per index instead of one
// per write (the reason UUIDv7 and ULID put the time first). The random
// part alone carries the 96 unguessable bits docs/API.md#preflightdecision asks for; the time
// is no secret, since the decision states when it was made.
package ids

import (
	"crypto/rand"
	"encoding/base64"
	"time"
)

// Prefixes of the two id kinds.
const (
	PreflightPrefix = "pf_"
	AuditPrefix     = "au_"
)

// sortable is the base64url alphabet in ASCII order, so that the encoded
// time sorts byte by byte as the time does.
const sortable = "-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"

// timeChars encode 48 bits of Unix milliseconds, enough until the year 10889.
const timeChars = 8

// New returns prefix, the current time and 96 random bits.
func New(prefix string) string { return at(prefix, time.Now()) }

func at(prefix string, t time.Time) string {
	var rnd [12]byte
	// crypto/rand.Read never returns an error on supported platforms; it
	// panics rather than hand out predictable bytes.
	_, _ = rand.Read(rnd[:])
	b := make([]byte, len(prefix)+timeChars+base64.RawURLEncoding.EncodedLen(len(rnd)))
	n := copy(b, prefix)
	ms := uint64(t.UnixMilli())
	for i := timeChars - 1; i >= 0; i-- {
		b[n+i] = sortable[ms&63]
		ms >>= 6
	}
	base64.RawURLEncoding.Encode(b[n+timeChars:], rnd[:])
	return string(b)
}

// Preflight returns a new preflight id.
func Preflight() string { return New(PreflightPrefix) }

// Audit returns a new audit id.
func Audit() string { return New(AuditPrefix) }
