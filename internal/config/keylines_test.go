package config

import (
	"strings"
	"testing"
)

// TestErrorsNameKeyAndLine: a bad value names both its key and its line,
// whether yaml rejects its type or Validate rejects its range.
func TestErrorsNameKeyAndLine(t *testing.T) {
	tests := map[string]struct {
		yaml string
		want string
	}{
		"range, block style":                 {"data_dir: ./d\ncontract_refine:\n  mode: strict\n", `line 3: contract_refine.mode: "strict" is not one of`},
		"range, after blank line":            {"contract_refine:\n\n  max_repair_attempts: 4\n", "line 3: contract_refine.max_repair_attempts: must be between 0 and 3"},
		"range, flow style":                  {"http: {max_body_bytes: -1}\n", "line 1: http.max_body_bytes: must be positive"},
		"type, block style":                  {"contract_refine:\n  binding_cache_ttl: soon\n", "line 2: contract_refine.binding_cache_ttl: cannot unmarshal"},
		"type, flow style":                   {"contract_refine: {offline: maybe}\n", "line 1: contract_refine.offline: cannot unmarshal"},
		"type, second key of a flow mapping": {"contract_refine: {mode: enforce, binding_window: 300}\n", "line 1: contract_refine.binding_window: cannot unmarshal"},
		"type, nested flow mappings":         {"store: {etcd: {endpoints: [\"http://127.0.0.1:2379\"], dial_timeout: 5}}\n", "line 1: store.etcd.dial_timeout: cannot unmarshal"},
		"type, a long value cut short":       {"contract_refine: {mode: enforce, binding_window: 30000000000000}\n", "line 1: contract_refine.binding_window: cannot unmarshal"},
		"type, a mapping in a block":         {"contract_refine:\n  mode: {a: 1}\n", "line 2: contract_refine.mode: cannot unmarshal"},
		"unknown key keeps line":             {"wal:\n  retention: 1h\n  retain: 2h\n", `line 3: unknown key "retain"`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Load(writeFile(t, tc.yaml))
			if err == nil {
				err = c.Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestDefaultsNameNoLine: with no file there are no lines to name.
func TestDefaultsNameNoLine(t *testing.T) {
	c := Default()
	c.ContractRefine.BindingCacheSize = 0
	err := c.Validate()
	if err == nil || err.Error() != "contract_refine.binding_cache_size: must be positive, got 0" {
		t.Fatalf("error %v", err)
	}
}
