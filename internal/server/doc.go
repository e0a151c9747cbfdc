// Package server wires the service together: it opens the WAL, loads the
// policy bundle, builds the gate, the verifier and the HTTP API, and serves
// them on the HTTP, gRPC and (optionally) gateway listeners until its
// context ends, then shuts down gracefully.
package server
