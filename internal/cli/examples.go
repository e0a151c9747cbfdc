package cli

import (
	"bytes"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
)

// examples are the PreflightRequests docs/API.md shows, byte for byte:
// plain.json without an envelope, envelope.json with one. Both pass on the
// embedded default bundle once their times are fresh.
//
//go:embed examples/*.json
var examples embed.FS

// The fixed values the example files hold where a request must be fresh.
const (
	exampleIssuedAt = `"2026-06-23T14:29:00Z"` // attestation issued_at, envelope timestampUtc
	exampleDeadline = `"2026-06-23T14:39:00Z"` // envelope deadlineUtc
	exampleIdemKey  = `"idem_882_refund_v1"`   // envelope idempotencyKey
	// exampleDeadlineAfter is how far past now a fresh deadline lies.
	exampleDeadlineAfter = 10 * time.Minute
)

// ExampleNames lists the examples `autonomy preflight --example` prints.
func ExampleNames() []string {
	entries, _ := examples.ReadDir("examples")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".json"))
	}
	slices.Sort(names)
	return names
}

// ExampleText is the example as the docs show it, with its fixed times.
func ExampleText(name string) ([]byte, error) {
	b, err := examples.ReadFile("examples/" + name + ".json")
	if err != nil {
		return nil, fmt.Errorf("no example %q: one of %s", name, strings.Join(ExampleNames(), ", "))
	}
	return b, nil
}

// Freshen makes an example's text a request that passes at now: the
// attestation and the envelope's timestamp become now, its deadline ten
// minutes later, and its idempotency key a new one (a key names one
// effect: the same key with other times would be 409
// idempotency-key-reused).
func Freshen(text []byte, now time.Time) []byte {
	now = now.UTC().Truncate(time.Second)
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	out := bytes.ReplaceAll(text, []byte(exampleIssuedAt), []byte(`"`+now.Format(time.RFC3339)+`"`))
	out = bytes.ReplaceAll(out, []byte(exampleDeadline), []byte(`"`+now.Add(exampleDeadlineAfter).Format(time.RFC3339)+`"`))
	return bytes.ReplaceAll(out, []byte(exampleIdemKey), []byte(`"idem_882_refund_`+hex.EncodeToString(rnd[:])+`"`))
}
