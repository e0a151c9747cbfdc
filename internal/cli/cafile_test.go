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
	if code, out, errs := runCLI(t, "--ca-file", ca, "healthcheck", "--url", url); code != 0 || out != "ok\n" {
		t.Fatalf("with --ca-file: exit %d, %q %s", code, out, errs)
	}
}
