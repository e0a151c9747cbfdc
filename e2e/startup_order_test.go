package e2e

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/contractrefine/autonomy/wal"
)

// TestServeOnABusyPortLeavesNoWAL: serve on a port another process holds
// fails before it opens the WAL, so the data dir stays empty.
func TestServeOnABusyPortLeavesNoWAL(t *testing.T) {
	t.Parallel()
	busy := holdPort(t)
	for name, flag := range map[string]string{"http": "--http-addr", "grpc": "--grpc-addr"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			args := []string{"serve", "--data-dir", dir, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", flag, busy}
			res := RunAutonomy(t, args...)
			if res.Code == 0 || !strings.Contains(res.Stderr, "address already in use") {
				t.Fatalf("serve on a busy %s port: exit %d, stderr %s", name, res.Code, res.Stderr)
			}
			if _, err := os.Stat(filepath.Join(dir, wal.FileName)); !os.IsNotExist(err) {
				t.Errorf("serve that could not listen left %s (stat: %v)", wal.FileName, err)
			}
		})
	}
}

// TestCheckConfigRefusesADataDirServeCannotOpen: check-config says no for
// a data dir that is a file, or one this user cannot write, as serve
// would, and yes for a fresh one it would create.
func TestCheckConfigRefusesADataDirServeCannotOpen(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	file := filepath.Join(base, "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if res := RunAutonomy(t, "check-config", "--data-dir", filepath.Join(base, "new", "data")); res.Code != 0 {
		t.Fatalf("check-config on a data dir serve would create: exit %d, %s", res.Code, res.Stderr)
	}
	if _, err := os.Stat(filepath.Join(base, "new")); !os.IsNotExist(err) {
		t.Errorf("check-config created the data dir (stat: %v)", err)
	}
	if res := RunAutonomy(t, "check-config", "--data-dir", file); res.Code != 1 || !strings.Contains(res.Stderr, "is not a directory") {
		t.Errorf("check-config on a file as data dir: exit %d, %s", res.Code, res.Stderr)
	}

	// A data dir this user cannot write: serve fails on it, so must check-config.
	ro := filepath.Join(base, "ro")
	if err := os.Mkdir(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	var res Result
	if os.Geteuid() == 0 {
		// root writes anywhere: ask as nobody, who can reach but not write ro.
		for p := ro; p != filepath.Dir(p) && p != os.TempDir(); p = filepath.Dir(p) {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		res = runAutonomyAs(t, &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}},
			"check-config", "--data-dir", ro)
	} else {
		if err := os.Chmod(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(ro, 0o700) })
		res = RunAutonomy(t, "check-config", "--data-dir", ro)
	}
	if res.Code != 1 || !strings.Contains(res.Stderr, "cannot write in "+ro) {
		t.Errorf("check-config on an unwritable data dir: exit %d, %s", res.Code, res.Stderr)
	}
}

// TestListeningLineAtEveryLogLevel: the line naming the bound addresses is
// how a service started on port 0 is found, so it is written whatever
// log.level lets through (the harness reads it to find the ports).
func TestListeningLineAtEveryLogLevel(t *testing.T) {
	for _, level := range []string{"warn", "error"} {
		t.Run(level, func(t *testing.T) {
			cfg := writeFile(t, "log.yaml", "log:\n  level: "+level+"\n")
			s := StartServer(t, ServeOptions{Config: cfg})
			if status, _ := getBody(t, s.URL("/healthz")); status != 200 {
				t.Fatalf("/healthz at the logged address: %d", status)
			}
		})
	}
}

// TestServeChecksItsFilesBeforeItListens: a TLS, tokens or etcd client
// file that cannot be read stops serve before it binds a port (docs/OPERATIONS.md),
// so with its port held by another process it names the file's key, not
// the port, and it leaves nothing in the data directory. The etcd client's
// files were once read after the WAL was opened.
func TestServeChecksItsFilesBeforeItListens(t *testing.T) {
	t.Parallel()
	busy := holdPort(t)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for key, yaml := range map[string]string{
		"store.etcd.tls.ca_file": "store:\n  etcd:\n    endpoints: [https://127.0.0.1:1]\n    tls:\n      ca_file: " + missing + "\n",
		"tls.cert_file":          "tls:\n  cert_file: " + missing + "\n  key_file: " + missing + "\n",
		"access.tokens_file":     "access:\n  tokens_file: " + missing + "\n",
	} {
		t.Run(key, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			cfg := writeFile(t, "serve.yaml", yaml)
			res := RunAutonomy(t, "serve", "--config", cfg, "--data-dir", dir, "--http-addr", busy, "--grpc-addr", "127.0.0.1:0")
			if res.Code == 0 || strings.Contains(res.Stderr, "address already in use") || !strings.Contains(res.Stderr, missing) {
				t.Fatalf("serve with %s missing: exit %d, stderr %s; want the file named before any port", key, res.Code, res.Stderr)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("serve that could not read %s left %s (stat: %v)", key, dir, err)
			}
		})
	}
}

// holdPort holds a loopback port for the test's length and returns its
// address: a port serve finds in use.
func holdPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}
