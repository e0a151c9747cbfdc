// Package cli is the autonomy command line: serve, check-config, version,
// healthcheck, audit, wal and demo. cmd/autonomy only calls Main.
package cli
