// Package e2e proves the service from the outside: its tests build the real
// autonomy binary, start it as a separate process on a temporary data
// directory and loopback ports, and talk to it over HTTP and gRPC the way an
// agent and Envoy would. Killing and restarting that process is how they
// show what survives a crash.
//
// harness_test.go holds the shared helpers: Binary builds cmd/autonomy once
// per test run, StartServer runs `autonomy serve` and waits for its
// "listening" log line, and Server.Stop, Server.Kill and Server.Restart end
// and restart it on the same data directory. The package has no non-test
// code beyond this file.
package e2e
