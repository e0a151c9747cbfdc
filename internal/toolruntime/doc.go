// Package toolruntime is the example tool runtime that ContractRefine guards: an
// HTTP handler serving POST /v1/tool for a handful of harmless tools.
//
// It stands in for an operator's existing runtime in the Docker Compose and
// Kubernetes examples and in the in-process demo, so nothing here has a real
// effect: tool.shell runs nothing and refund.create.v2 moves no money. Every
// call that reaches the handler is logged as one JSON line carrying the
// ContractRefine headers (x-autonomy-audit-id, x-autonomy-preflight-id,
// x-request-id), which is how tests prove which calls got past the gate.
//
// A request body is {"kind": "<tool kind>", "args": {...}}; the answer is the
// tool's result as JSON, or {"error": {"code": "...", "message": "..."}}.
package toolruntime
