// Command toolruntime is the example tool runtime that ContractRefine guards:
// it serves POST /v1/tool for a few harmless tools behind Envoy in the Docker
// Compose and Kubernetes examples.
//
// Usage:
//
//	toolruntime [--addr 127.0.0.1:8080] [--log-file PATH]
//	toolruntime healthcheck [--url http://127.0.0.1:8080/healthz]
//
// The server logs JSON lines to stdout, and appends them to --log-file when
// given: first {"msg":"listening","addr":...} with the address it bound (so
// --addr 127.0.0.1:0 works), then one line per tool call. It shuts down
// gracefully on SIGTERM or SIGINT. The healthcheck subcommand exits 0 only if
// the URL answers 200; container health checks use it because the runtime
// image has no shell and no curl.
package main
