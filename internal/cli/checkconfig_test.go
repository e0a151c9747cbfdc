package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/contractrefine/autonomy/internal/bundle/bundletest"
)

// checkConfigPolicy is a minimal valid policy for bundles written here.
const checkConfigPolicy = "package autonomy\n\nimport rego.v1\n\ndefault allow := false\n"

func writeCheckConfigBundle(t *testing.T, data string) string {
	t.Helper()
	return bundletest.Dir(t, map[string]string{"policy.rego": checkConfigPolicy, "data.yaml": data})
}

// TestCheckConfigClauses runs check-config in process on bundles with good,
// malformed and unenforced clauses.
func TestCheckConfigClauses(t *testing.T) {
	tests := map[string]struct {
		data       string
		config     string // YAML of --config, when set
		wantCode   int
		wantStdout []string
		wantStderr []string
		notStderr  []string
	}{
		"three malformed clauses in two capabilities are all listed": {
			data: `autonomy:
  capabilities:
    account.withdraw:
      contract:
        preconditions: ["args.amount > 0", "args.amount >"]
        invariants: ["size(args.account)"]
    refund.create.v2:
      contract:
        preconditions: ["positive(args.amountUsd)"]
`,
			wantCode: 1,
			wantStderr: []string{
				"clause: 3 invalid clauses",
				`capability "account.withdraw": preconditions[1] at 1:14: Syntax error:`,
				`capability "account.withdraw": invariants[0] at 1:1: clause must evaluate to bool, found int`,
				`capability "refund.create.v2": preconditions[0] at 1:9: undeclared reference to 'positive'`,
			},
			notStderr: []string{`preconditions[0] at 1:1`},
		},
		"good clauses pass and unenforced ones are noted": {
			data: `autonomy:
  capabilities:
    account.withdraw:
      contract:
        preconditions: ["args.amount > 0", "args.amount <= args.account.balance"]
        postconditions: ["result.balance == old(args.account.balance) - args.amount"]
        invariants: ["args.account.balance >= 0"]
`,
			wantCode: 0,
			wantStdout: []string{
				"configuration ok: mode advisory",
				"1 capabilities",
			},
		},
		"the etcd store and the replica are named": {
			data:       "autonomy:\n  capabilities: {}\n",
			config:     "store:\n  etcd:\n    endpoints: [\"http://127.0.0.1:2379\"]\nreplica_id: replica-7\n",
			wantCode:   0,
			wantStdout: []string{"store: etcd at http://127.0.0.1:2379, prefix \"/contractrefine/\", replica replica-7"},
		},
		"the bbolt store is named": {
			data:       "autonomy:\n  capabilities: {}\n",
			wantCode:   0,
			wantStdout: []string{"store: bbolt, WAL in "},
		},
		"a bad cost limit value is named": {
			data:       "autonomy:\n  capabilities: {}\n",
			config:     "clauses:\n  cost_limit: -1\n",
			wantCode:   1,
			wantStderr: []string{"cost_limit"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			args := []string{"check-config", "--bundle", writeCheckConfigBundle(t, tc.data)}
			if tc.config != "" {
				cfg := filepath.Join(t.TempDir(), "autonomy.yaml")
				if err := os.WriteFile(cfg, []byte(tc.config), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config", cfg)
			}
			var stdout, stderr bytes.Buffer
			code := Main(args, &stdout, &stderr)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.wantCode, stdout.String(), stderr.String())
			}
			for _, want := range tc.wantStdout {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
				}
			}
			for _, want := range tc.wantStderr {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
				}
			}
			for _, not := range tc.notStderr {
				if strings.Contains(stderr.String(), not) {
					t.Errorf("stderr has %q:\n%s", not, stderr.String())
				}
			}
		})
	}
}

// TestCheckConfigWarnsOfNoAllow: a bundle whose policy defines no
// data.autonomy.allow passes check-config (it denies every call, as an
// undefined allow does) with a warning line that says so.
func TestCheckConfigWarnsOfNoAllow(t *testing.T) {
	dir := bundletest.Dir(t, map[string]string{"policy.rego": "package authz\n\nallow := true\n",
		"data.yaml": "autonomy:\n  capabilities: {}\n"})
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"check-config", "--bundle", dir}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, want 0\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "warning: the policy defines no rule data.autonomy.allow") {
		t.Fatalf("stdout lacks the warning:\n%s", stdout.String())
	}
}

// TestCheckConfigRefusesAPolicyThatCannotDecide: a policy that loads but
// fails on every input (a non-boolean allow, a builtin error) is refused by
// check-config, as serve is unready with it and answers every call 503;
// one that fails for some inputs only passes.
func TestCheckConfigRefusesAPolicyThatCannotDecide(t *testing.T) {
	for name, tc := range map[string]struct {
		rules string
		ok    bool
	}{
		"allow not a boolean": {`allow := "yes"`, false},
		"division by zero":    {`allow if 1 / count(input.action.args) > 0`, false},
		"fails for some":      {`allow if 10 / count(input.action.kind) > 0`, true},
	} {
		t.Run(name, func(t *testing.T) {
			dir := bundletest.Dir(t, map[string]string{"policy.rego": "package autonomy\n\nimport rego.v1\n\n" + tc.rules + "\n",
				"data.yaml": "autonomy:\n  capabilities:\n    tool.echo: {zones: [\"*\"]}\n"})
			var stdout, stderr bytes.Buffer
			code := Main([]string{"check-config", "--bundle", dir, "--data-dir", t.TempDir()}, &stdout, &stderr)
			if (code == 0) != tc.ok || (!tc.ok && !strings.Contains(stderr.String(), "the policy cannot decide")) {
				t.Fatalf("exit %d, want ok %v\nstdout: %s\nstderr: %s", code, tc.ok, stdout.String(), stderr.String())
			}
		})
	}
}

// TestCheckConfigWarnsOfKindsNoPlanCanName: under the /v1/tool protocol a
// capability whose name the plan step kind rule refuses loads (bundles
// named kinds freely before the rule), with a warning that no preflight
// can name it.
func TestCheckConfigWarnsOfKindsNoPlanCanName(t *testing.T) {
	dir := bundletest.Dir(t, map[string]string{"policy.rego": "package autonomy\n\nimport rego.v1\n\nallow := true\n",
		"data.yaml": "autonomy:\n  capabilities:\n    GetWeather: {zones: [\"*\"]}\n    tool.echo: {zones: [\"*\"]}\n"})
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"check-config", "--bundle", dir, "--data-dir", t.TempDir()}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, `warning: capability "GetWeather" does not follow the plan step kind rule`) || strings.Contains(out, `"tool.echo" does not`) {
		t.Fatalf("stdout:\n%s", out)
	}
}
