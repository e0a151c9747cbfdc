// Package gateway is the built-in gateway: a reverse proxy in front of the
// tool runtime that runs the gate in-process before forwarding, for a
// drop-in deployment with no Envoy. It shares the one decision path with the
// ext_authz servers (binding.Gate.Check).
//
// Like the shipped Envoy configs, the gateway is the one front URL of a
// deployment: it serves the service's own API (/v1/preflight, /v1/audit/)
// ungated when Options.API is set, normalizes paths before the check, and
// gives every request its own x-request-id so a client cannot pass a replay
// off as a retry of a request that already consumed its preflight.
package gateway
