// Command load measures the service against the physical floor in one run:
// it starts a trivial gRPC Check server and a trivial HTTP server (each
// answers at once, doing no work) in a child process, then the real
// autonomy binary (a separate process, a temporary data directory, enforce
// mode), and drives each with the same client at every concurrency asked
// for. It prints throughput, p50 and p99 per scenario, the CPU the measured
// process spent per call, the service's WAL commits per call and writes per
// commit (from its /metrics), on etcd the etcd requests and raft entries
// per call (from the etcd member's /metrics, all replicas together), the
// ratios to the floors and the service's RSS, and checks the goals of
// issue 22. With -opa-envoy BIN it runs
// OPA-Envoy beside the service, without and with its decision log
// (opaenvoy.go), and takes the service's ratios to it; it first measures the
// least durable bbolt write on the same file system (boltfloor.go).
//
// Scenarios against the service:
//
//	preflight        POST /v1/preflight, a one-step tool.echo plan, fresh session each
//	check consume    Check with a fresh one-step preflight id each (ids made beforehand, not timed)
//	check replay     Check with an id already consumed (403 contract: preflight_replay)
//	check no-header  Check of tool.shell without the header (403 contract: preflight_required)
//
// The gRPC floor answers OK to every Check; the HTTP floor answers 200 to
// every POST. The service's ratios are taken against them in the same run,
// on the same machine, with the same client, so they hold from one machine
// to another where absolute figures do not. The main run splits every
// scenario into -rounds slices (3 by default, -duration/3 each) and runs
// the targets in turn within each round: floors, OPA-Envoy, then the
// service. Each line it prints merges a scenario's slices (rounds.go), so
// the two sides of every ratio were measured over the same stretches of
// the machine's time; -rounds 1 measures each scenario in one piece.
//
// With -etcd it also runs the service scenarios on the etcd backend: a
// serial and a concurrent put-if-absent transaction against a local
// one-member etcd (the round trip), then one replica and three replicas on
// it, and judges issue 18's goals against a bbolt service that takes turns
// with the one replica in rounds (etcd.go). On one replica the transaction is also made after each serial
// consume, outside its timing (as the least bbolt write is after each
// consume on bbolt), and the serial goal takes that round trip: the
// member's fsync slows as the consumes fill its log.
//
// Scale checks, each on its own data directory:
//
//	-fill N      runs the service scenarios again on a WAL pre-filled with N
//	             frames (written through the wal API in big NoSync commits)
//	             and prints each p50 against the empty-WAL figure;
//	-cached N    pre-fills N live one-step bindings, looks every one up once
//	             through Check (so all N sit in the binding cache) and prints
//	             the service's RSS;
//	-frames N    makes N one-step preflights on a fresh WAL, stops the
//	             service and prints the file size and the stored frame size
//	             per preflight.
//
// Run it from the repository root:
//
//	go run ./e2e/load                                  # 3 s per scenario at 1 and 64
//	go run ./e2e/load -duration 5s -conc 1,8,64
//	go run ./e2e/load -fill 1000000 -cached 100000     # the scale checks too
//	go run ./e2e/load -bin ./autonomy -json out.json   # a prebuilt binary; results as JSON
//	go run ./e2e/load -opa-envoy /tmp/opa-envoy        # beside OPA-Envoy (docs/PERFORMANCE.md)
//	go run ./e2e/load -etcd -frames 0                  # bbolt, etcd ×1 and etcd ×3 in one run
//
// Without -bin it builds ./cmd/autonomy into a temporary directory first.
// docs/PERFORMANCE.md records the figures of a run and how to read them.
package main
