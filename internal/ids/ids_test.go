package ids

import (
	"regexp"
	"testing"
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
