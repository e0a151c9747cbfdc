package cli

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/contractrefine/autonomy/internal/config"
	"github.com/contractrefine/autonomy/internal/server"
	"github.com/contractrefine/autonomy/preflight"
)

// startPreflightServer serves the real handler of a real server (real WAL,
// embedded bundle) on a loopback httptest listener.
func startPreflightServer(t *testing.T, mutate func(*config.Config)) string {
	url, _ := startPreflightServerWith(t, t.TempDir(), server.Options{}, mutate)
	return url
}

// startPreflightServerWith is startPreflightServer on a given data dir and
// options; stop closes it early (to free the WAL's file lock).
func startPreflightServerWith(t *testing.T, dataDir string, o server.Options, mutate func(*config.Config)) (url string, stop func()) {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = dataDir
	cfg.ContractRefine.Mode = config.ModeEnforce
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := server.New(context.Background(), cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ts.Close()
			srv.Close()
		})
	}
	t.Cleanup(stop)
	return ts.URL, stop
}

const (
	planPass = `{"intent":{"summary":"Echo a greeting","plan_hash":"plan-echo-1"},
 "plan":{"steps":[{"id":"s1","kind":"tool.echo","zone":"any","args":{"text":"hi"}}]},
 "context":{"actor":{"id":"user:example","session_id":"session:cli-pass"}}}`
	planRepair = `{"intent":{"summary":"Read a case","plan_hash":"plan-read-1"},
 "plan":{"steps":[{"id":"s1","kind":"customer.read.v3","zone":"support","args":{"caseRef":"case:882"}}]},
 "context":{"actor":{"id":"user:example","session_id":"session:cli-repair"}}}`
	planDeny = `{"intent":{"summary":"No session","plan_hash":"plan-echo-2"},
 "plan":{"steps":[{"id":"s1","kind":"tool.echo","zone":"any","args":{}}]},
 "context":{"actor":{"id":"user:example"}}}`
	planAdvisory = `{"intent":{"summary":"Continue a chain","plan_hash":"plan-chain-1"},
 "plan":{"steps":[{"id":"s1","kind":"tool.echo","zone":"any","args":{}}]},
 "context":{"actor":{"id":"user:example","session_id":"session:cli-chain"},"decision_chain":["au_not_in_this_wal_0001"]}}`
)

func TestPreflightCommand(t *testing.T) {
	url := startPreflightServer(t, func(c *config.Config) { c.ContractRefine.Offline = true })
	tests := map[string]struct {
		plan    string
		args    []string
		code    int
		stdout  []string // substrings, in order
		stderr  []string
		noOut   []string
		idShown bool
	}{
		"pass": {plan: planPass, code: 0, idShown: true,
			stdout: []string{"outcome: pass", "reason:  contract: passed", "binds: tool.echo until", "CONTRACT",
				"plan_shape", "argument_provenance", "capability_in_zone", "rollback_contract", "expected_evidence",
				"attestation_freshness", "decision_chain_complete", "explain: " + url + "/ui/audit/au"},
			noOut: []string{"ADVISORY", "repair hints"}},
		"dry run records nothing": {plan: planPass, args: []string{"--dry-run"}, code: 0,
			stdout: []string{"outcome: pass", "dry run: nothing recorded"}, noOut: []string{"preflight_id:", "explain:"}},
		"repair required prints the hint": {plan: planRepair, code: exitPreflightRepairRequired, idShown: true,
			stdout: []string{"outcome: repair_required", "binds: nothing", "capability_in_zone", "fail", "blocking", "contract: capability_not_in_zone",
				"repair hints (field → suggestion):", `/plan/steps/0/zone → "payments" (bounded)  [capability_in_zone]`}},
		"deny": {plan: planDeny, code: exitPreflightDeny, idShown: true,
			stdout: []string{"outcome: deny", "reason:  " + preflight.ReasonSessionMetadataMissing}},
		"advisory row is marked and does not change the outcome": {plan: planAdvisory, code: 0, idShown: true,
			stdout: []string{"outcome: pass", "decision_chain_complete", "advisory", preflight.ReasonChainUnverifiableOffline,
				"ADVISORY: recorded, does not change the outcome"}},
		"malformed body is an error with its code": {plan: `{"intent":`, code: exitPreflightError,
			stderr: []string{"autonomy: POST " + url + "/v1/preflight: 400 malformed-request"}},
		"unknown top-level field names its path": {plan: `{"intent":{"summary":"x"},"plan":{"steps":[]},"context":{"actor":{"id":"a"}},"extra":1}`,
			code: exitPreflightError, stderr: []string{"autonomy: POST " + url + "/v1/preflight: 400 malformed-request at /extra"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "plan.json")
			if err := os.WriteFile(file, []byte(tc.plan), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			code := Main(append([]string{"preflight", "-f", file, "--server", url}, tc.args...), &stdout, &stderr)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, stdout.String(), stderr.String())
			}
			assertInOrder(t, "stdout", stdout.String(), tc.stdout)
			assertInOrder(t, "stderr", stderr.String(), tc.stderr)
			for _, s := range tc.noOut {
				if strings.Contains(stdout.String(), s) {
					t.Errorf("stdout has %q:\n%s", s, stdout.String())
				}
			}
			idRE := regexp.MustCompile(`(?m)^preflight_id: [A-Za-z0-9_-]{16,128}\naudit_id: +[A-Za-z0-9_-]{16,128}$`)
			if tc.idShown != idRE.MatchString(stdout.String()) {
				t.Errorf("ids shown = %v, want %v:\n%s", !tc.idShown, tc.idShown, stdout.String())
			}
		})
	}
}

func TestPreflightCommandJSONAndStdin(t *testing.T) {
	url := startPreflightServer(t, nil)
	var stdout, stderr bytes.Buffer
	root := newRoot(&stdout, &stderr)
	root.SetIn(strings.NewReader(planRepair))
	root.SetArgs([]string{"preflight", "-f", "-", "--server", url, "--json"})
	err := root.Execute()
	if ee, ok := err.(exitError); !ok || ee.code != exitPreflightRepairRequired {
		t.Fatalf("execute: %v, stderr %s", err, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), `{"attempt":1,`) || !strings.Contains(stdout.String(), `"outcome":"repair_required"`) {
		t.Fatalf("--json printed %s", stdout.String())
	}
}

func TestPreflightCommandServerDown(t *testing.T) {
	url := startPreflightServer(t, nil)
	file := filepath.Join(t.TempDir(), "plan.json")
	if err := os.WriteFile(file, []byte(planPass), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	// A path the service has no endpoint for answers the API's error body.
	if code := Main([]string{"preflight", "-f", file, "--server", url + "/nowhere"}, &stdout, &stderr); code != exitPreflightError {
		t.Fatalf("exit %d, stderr %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "404 not-found") {
		t.Fatalf("stderr: %s", stderr.String())
	}
	// Something else at that URL answers 404 without that body; the raw
	// answer is printed.
	other := httptest.NewServer(http.NotFoundHandler())
	defer other.Close()
	stderr.Reset()
	if code := Main([]string{"preflight", "-f", file, "--server", other.URL}, &stdout, &stderr); code != exitPreflightError {
		t.Fatalf("exit %d, stderr %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "answered 404") {
		t.Fatalf("stderr: %s", stderr.String())
	}
	if code := Main([]string{"preflight", "-f", filepath.Join(t.TempDir(), "missing.json"), "--server", url}, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "read plan") {
		t.Fatalf("missing file: exit %d, stderr %s", code, stderr.String())
	}
}

// assertInOrder checks that out contains each of want, in order.
func assertInOrder(t *testing.T, name, out string, want []string) {
	t.Helper()
	rest := out
	for _, w := range want {
		i := strings.Index(rest, w)
		if i < 0 {
			t.Errorf("%s lacks %q (in order):\n%s", name, w, out)
			return
		}
		rest = rest[i+len(w):]
	}
}
