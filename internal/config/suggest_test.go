package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnknownKeySuggestsTheNearest: a misspelt key is named with the key
// it is closest to in the same section; one far from every key gets none.
func TestUnknownKeySuggestsTheNearest(t *testing.T) {
	cases := map[string]struct {
		yaml, want string
	}{
		"nested":        {"http:\n  max_body_byte: 10\n", `line 2: unknown key "max_body_byte" (did you mean "max_body_bytes"?)`},
		"top level":     {"contract_refin:\n  mode: enforce\n", `line 1: unknown key "contract_refin" (did you mean "contract_refine"?)`},
		"dash for _":    {"gate:\n  kind-header: x\n", `line 2: unknown key "kind-header" (did you mean "kind_header"?)`},
		"nothing close": {"gate:\n  zebra: x\n", `line 2: unknown key "zebra"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(path)
			if err == nil || !strings.HasSuffix(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to end %q", err, tc.want)
			}
		})
	}
}
