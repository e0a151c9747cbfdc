package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFlagMessagesNameFlags: a rule broken by flags is reported in flag
// names, and audit refuses two sources at once instead of using one.
func TestFlagMessagesNameFlags(t *testing.T) {
	bboltFile := filepath.Join(t.TempDir(), "bbolt.yaml")
	if err := os.WriteFile(bboltFile, []byte("store:\n  backend: bbolt\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		args []string
		want string
	}{
		"--upstream alone": {[]string{"check-config", "--upstream", "http://127.0.0.1:1"},
			"--upstream and --gateway-addr go together"},
		"--gateway-addr alone": {[]string{"check-config", "--gateway-addr", "127.0.0.1:0"},
			"--upstream and --gateway-addr go together"},
		// An unset variable in --bundle "$DIR" must not swap in the
		// embedded default policy.
		"--bundle empty": {[]string{"check-config", "--bundle", ""}, "--bundle: must not be empty"},
		// Nor an unset --config "$FILE" the defaults (advisory mode, no
		// tokens), nor --data-dir "$DIR" ./data, on any command.
		"--config empty":          {[]string{"check-config", "--config", ""}, "--config: must not be empty"},
		"--config empty, serve":   {[]string{"serve", "--config", ""}, "--config: must not be empty"},
		"--config empty, wal":     {[]string{"wal", "verify", "--config", ""}, "--config: must not be empty"},
		"--data-dir empty, wal":   {[]string{"wal", "stats", "--data-dir", ""}, "--data-dir: must not be empty"},
		"--data-dir empty, serve": {[]string{"serve", "--data-dir", ""}, "--data-dir: must not be empty"},
		// As --gateway-addr "" is: the gateway goes with both or neither.
		"--upstream empty":          {[]string{"check-config", "--upstream", "", "--gateway-addr", "127.0.0.1:0"}, "--upstream: must not be empty"},
		"--config empty, audit":     {[]string{"audit", "au_x", "--config", ""}, "--config: must not be empty"},
		"--timeout zero, preflight": {[]string{"preflight", "--timeout", "0s", "-f", "x.json"}, "--timeout must be positive, got 0s"},
		"audit from a server and a WAL": {[]string{"audit", "au_x", "--server", "http://127.0.0.1:1", "--data-dir", t.TempDir()},
			"[data-dir server] were all set"},
		"audit from a server and a config": {[]string{"audit", "au_x", "--server", "http://127.0.0.1:1", "--config", "x.yaml"},
			"[config server] were all set"},
		// The endpoints came from the flag, not from a key the file holds.
		"--etcd-endpoints against a bbolt file": {[]string{"check-config", "--config", bboltFile, "--etcd-endpoints", "http://127.0.0.1:1"},
			"line 2: store.backend: bbolt, yet --etcd-endpoints is given: name one backend"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			code, _, errs := runCLI(t, tc.args...)
			if code != 1 || !strings.Contains(errs, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 1 with %q", code, errs, tc.want)
			}
		})
	}
}
