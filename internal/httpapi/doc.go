// Package httpapi serves the agent-facing HTTP API of docs/API.md:
// POST /v1/preflight, GET /v1/preflight/{preflight_id} and
// GET /v1/audit/{audit_id}. It turns HTTP into calls on the verifier and the
// WAL and back; the decisions themselves live in package preflight.
//
// A preflight is answered only after its autonomy.preflight frame, its
// session attempt and its idempotency record are durable. The decision body
// is canonical JSON (package internal/canon), so the same request, bundle
// and clock give the same bytes, and GET /v1/preflight/{id} returns exactly
// the bytes that were returned.
package httpapi
