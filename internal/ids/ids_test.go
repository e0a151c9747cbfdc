package ids

import (
	"encoding/base64"
	"regexp"
	"sort"
	"testing"
	"time"
)

func TestShapeAndUniqueness(t *testing.T) {
	shape := regexp.MustCompile(`^[A-Za-z0-9_-]{16,128}$`)
	seen := map[string]bool{}
	for range 1000 {
		for _, id := range []string{Preflight(), Audit()} {
			if !shape.MatchString(id) {
				t.Fatalf("id %q does not match %s", id, shape)
			}
			if seen[id] {
				t.Fatalf("id %q repeated", id)
			}
			seen[id] = true
		}
	}
}

// TestIDsSortByTime: ids made at later milliseconds sort after earlier
// ones, across every carry of the encoding, and the random part is 96 bits.
func TestIDsSortByTime(t *testing.T) {
	if !sort.StringsAreSorted([]string{sortable}) || len(sortable) != 64 {
		t.Fatal("alphabet")
	}
	for i := 1; i < len(sortable); i++ {
		if sortable[i-1] >= sortable[i] {
			t.Fatalf("alphabet not in byte order at %d", i)
		}
	}
	base := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	steps := []time.Duration{0, time.Millisecond, 63 * time.Millisecond, 64 * time.Millisecond,
		4095 * time.Millisecond, 4096 * time.Millisecond, time.Hour, 24 * time.Hour, 8000 * 24 * time.Hour}
	var made []string
	for _, d := range steps {
		made = append(made, at(AuditPrefix, base.Add(d)))
	}
	if !sort.StringsAreSorted(made) {
		t.Fatalf("ids out of time order: %q", made)
	}
	id := made[0]
	rnd, err := base64.RawURLEncoding.DecodeString(id[len(AuditPrefix)+timeChars:])
	if err != nil || len(rnd) != 12 {
		t.Fatalf("random part of %q: %d bytes, %v", id, len(rnd), err)
	}
	if a, b := at("", base), at("", base); a[:timeChars] != b[:timeChars] || a == b {
		t.Fatalf("same millisecond: %q %q", a, b)
	}
}
