package cli

import (
	"net"
	"strings"
	"testing"
	"time"
)

// TestServerCommandsGiveUp: against a service that takes the connection
// and never answers, audit --server, approvals list and approve fail
// after the request bound instead of hanging.
func TestServerCommandsGiveUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conns := make(chan net.Conn, 16)
	defer func() {
		ln.Close()
		for c := range conns {
			c.Close()
		}
	}()
	go func() {
		defer close(conns)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c // read nothing, answer nothing
		}
	}()
	old, oldClient := serverTimeout, serverClient.Timeout
	serverTimeout, serverClient.Timeout = 200*time.Millisecond, 200*time.Millisecond
	defer func() { serverTimeout, serverClient.Timeout = old, oldClient }()
	server := "http://" + ln.Addr().String()
	for name, args := range map[string][]string{
		"audit":          {"audit", "au_x", "--server", server},
		"approvals list": {"approvals", "list", "--server", server, "--token", "t"},
		"approve":        {"approve", "pf_x", "s1", "--server", server, "--token", "t"},
	} {
		t.Run(name, func(t *testing.T) {
			type result struct {
				code int
				errs string
			}
			done := make(chan result, 1)
			go func() {
				code, _, errs := runCLI(t, args...)
				done <- result{code, errs}
			}()
			select {
			case r := <-done:
				if r.code != 1 || !(strings.Contains(r.errs, "deadline") || strings.Contains(r.errs, "Timeout")) {
					t.Fatalf("exit %d, stderr %q; want exit 1 naming the timeout", r.code, r.errs)
				}
			case <-time.After(time.Minute): // a guard, so a hang fails rather than stalls the run
				t.Fatal("the command still waits on a service that never answers")
			}
		})
	}
}

// TestApprovalsListStateCheckedFirst: a --state other than pending or
// decided is refused before any request is sent.
func TestApprovalsListStateCheckedFirst(t *testing.T) {
	code, _, errs := runCLI(t, "approvals", "list", "--server", "http://127.0.0.1:1", "--token", "t", "--state", "bogus")
	if code == 0 || !strings.Contains(errs, `--state "bogus": want pending or decided`) {
		t.Fatalf("exit %d: %s", code, errs)
	}
}

// TestApprovalsListLimitChecked: a negative --limit is refused before any
// request is sent, not read as the service's default.
func TestApprovalsListLimitChecked(t *testing.T) {
	code, _, errs := runCLI(t, "approvals", "list", "--server", "http://127.0.0.1:1", "--token", "t", "--limit", "-1")
	if code == 0 || !strings.Contains(errs, `--limit -1: want a page size of 1 or more`) {
		t.Fatalf("exit %d: %s", code, errs)
	}
}
