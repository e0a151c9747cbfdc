// Package binding is the gate: it decides whether one tool call may reach the
// tool runtime. It runs the binding ladder of docs/API.md (known preflight id,
// right tool kind, right caller and arguments, not expired, not replayed) in
// the mode of README.md, the capability clauses of docs/CLAUSES.md and the operator's
// Rego policy of docs/CLAUSES.md, consumes one preflighted step durably before it
// allows, and writes one autonomy.decision frame for every gated request.
//
// The package has no server code: the gRPC ext_authz server, the HTTP check
// and the built-in gateway all call Gate.Check with a Request built from
// their own protocol.
//
// # Ladder order
//
//  1. No X-Autonomy-Preflight-Id header: contract: preflight_required if the
//     kind's capability requires_preflight, else no binding.
//  2. Header empty or not id-shaped: contract: preflight_required.
//  3. Id unknown (binding cache, then the WAL): contract: preflight_required.
//  4. Decision not pass, kind not bound, caller identity differs from the
//     preflight's actor, or (bind_arguments) no step of the kind has the
//     call's args digest: contract: preflight_binding_mismatch.
//  5. now >= expires_at: contract: preflight_expired.
//  6. Every matching step consumed by other requests: contract: preflight_replay.
//  7. Clauses, then policy; on allow one step is consumed atomically with a
//     re-check of 6, and the allow is answered only once that is durable.
//
// The caller identity is the gate.actor_header value when that header is
// configured and present, else the mTLS peer principal.
//
// # Modes
//
// In enforce a failed ladder or clause denies (403). In advisory it is
// recorded in the decision frame (outcome deny, enforced false) and the call
// continues to the policy with preflight null; an allow then carries
// x-autonomy-advisory-reason. In disabled the ladder and clauses do not run.
// The policy runs and can deny in every mode. Anything that cannot be decided
// (store or policy error, panic) denies with 503 and
// contract: verifier_unavailable in every mode.
package binding
