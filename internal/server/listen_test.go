//go:build unix

package server

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestListenUnixSocket: a socket file a live server listens on is in use
// (a second server must not take it over, nor remove it when it stops); a
// stale one, left by a server that died, is replaced.
func TestListenUnixSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "authz.sock")
	live, err := Listen("unix:" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if ln, err := Listen("unix:" + path); !errors.Is(err, syscall.EADDRINUSE) {
		if ln != nil {
			ln.Close()
		}
		t.Fatalf("second listener on a live socket: %v, want EADDRINUSE", err)
	}
	if c, err := net.Dial("unix", path); err != nil {
		t.Fatalf("the live server's socket is gone: %v", err)
	} else {
		c.Close()
	}

	stale := filepath.Join(t.TempDir(), "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("no stale socket file to replace: %v", err)
	}
	again, err := Listen("unix:" + stale)
	if err != nil {
		t.Fatalf("a stale socket is not replaced: %v", err)
	}
	again.Close()
}
