package cli

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHealthcheckTrustsTheCAFile: a service serving https with a
// certificate of a private CA fails the health check until --ca-file names
// that CA; a file holding no certificate is refused. (The test process's
// transport keeps the CA once trusted, so the order matters.)
func TestHealthcheckTrustsTheCAFile(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	url := srv.URL + "/readyz"
	if code, _, errs := runCLI(t, "healthcheck", "--url", url); code == 0 || !strings.Contains(errs, "certificate") {
		t.Fatalf("without --ca-file: exit %d, %s; want a certificate error", code, errs)
	}
	if code, _, errs := runCLI(t, "healthcheck", "--url", url, "--ca-file", junk); code == 0 || !strings.Contains(errs, "no PEM certificate") {
		t.Fatalf("--ca-file of no certificate: exit %d, %s", code, errs)
	}
	if code, _, errs := runCLI(t, "healthcheck", "--url", url, "--ca-file", filepath.Join(dir, "missing.pem")); code == 0 || !strings.Contains(errs, "--ca-file") {
		t.Fatalf("--ca-file of a missing file: exit %d, %s", code, errs)
	}
	if code, out, errs := runCLI(t, "healthcheck", "--url", url, "--ca-file", ca); code != 0 || out != "ok\n" {
		t.Fatalf("with --ca-file: exit %d, %q %s", code, out, errs)
	}
	// Every command that calls the service takes it; serve, whose own
	// clients it would reach, and the offline commands do not.
	for _, path := range clientCommands {
		if code, _, errs := runCLI(t, append(path, "--help")...); code != 0 || !strings.Contains(errs+runHelp(t, path), "--ca-file") {
			t.Errorf("%v --help: exit %d, no --ca-file", path, code)
		}
	}
	for _, args := range [][]string{{"serve", "--ca-file", ca}, {"version", "--ca-file", ca}, {"check-config", "--ca-file", ca}} {
		if code, _, errs := runCLI(t, args...); code == 0 || !strings.Contains(errs, "unknown flag: --ca-file") {
			t.Errorf("%v: exit %d, %s; want the flag unknown", args, code, errs)
		}
	}
}

// runHelp is the help text of the command at path.
func runHelp(t *testing.T, path []string) string {
	t.Helper()
	_, out, _ := runCLI(t, append(path, "--help")...)
	return out
}
