// Package preflight decides whether a planned sequence of tool calls is
// consistent with the operator's governance configuration, before any of
// it runs: it decodes a PreflightRequest, runs the seven-contract catalog
// and the declared clauses, and composes the PreflightDecision of docs/API.md.
//
// The package is pure logic. It does no HTTP and no storage: the server
// decodes the body with DecodeRequest, validates context.request with the
// envelope package, calls Verifier.Evaluate with the bundle's Governance
// and clause checker, assigns the ids, and records the decision and its
// Binding (BindingOf) in the WAL.
//
// # Decisions the specification leaves open
//
// Decoding. Field names match exactly (encoding/json alone would match
// "Intent" to "intent"), a name may appear once per object (args included,
// so a body cannot mean two things to two parsers), and a null stands for
// an absent field except inside arrays and maps. Errors name the first
// problem in document order, with the JSON Pointer of the value including
// array indices ("/plan/steps/1/id"). Nesting is limited to MaxNesting
// levels over the whole document. A number in args beyond the range of an
// IEEE double is refused, since its canonical digest could not be bound.
// context.request is kept raw and only
// checked to be an object; its own rules belong to the envelope package.
//
// Rows. Every row has non-nil repair_hints and evidence. A failing row's
// evidence lists its violations ({"step", "field", "message"}) in plan
// order; a not_applicable row's evidence says why under "detail". A row
// offers hints only if every violation it found has one: a row that mixes
// a repairable and an unrepairable problem offers none, so the decision is
// deny instead of a repair_required that no retry could turn into a pass.
// Steps whose kind is not a capability in the bundle are failed by
// capability_in_zone and skipped by every other contract.
//
// plan_shape: its evidence always carries the step count ("steps"). A
// plan longer than an envelope limit is repaired by trimming
// it to the limit (one hint per exceeded limit); a limit below 1 leaves no
// valid plan, so it has no hint. The 32-step limit has no hint of its own,
// but an envelope-limit hint of at most 32 also repairs it.
//
// argument_provenance: args are checked in name order. Provenance entries
// for names that are not args are ignored. "input:" needs an envelope; the
// comparison is over canonical JSON, so 125 equals 125.0.
//
// capability_in_zone: an empty step zone is a zone like any other and
// matches only "*". A capability with no zones admits no step and has no
// hint.
//
// rollback_contract: context.required_rollback may be provided by any
// step's rollback, whether or not that step's capability requires one.
// When no step provides it, its hint sets the rollback of the first step
// whose capability declares it (preferring one whose own rollback fails)
// to the required rollback; if that step's
// rollback also fails, this one hint (not the capability's first rollback)
// repairs both, so a field never gets two suggestions. When no step's
// capability declares it, the violation has no hint.
//
// attestation_freshness: the attestation must name a node even when the
// bundle enrols none. issued_at is parsed as RFC 3339 (fractional seconds
// allowed); an age equal to max_age is still fresh.
//
// decision_chain_complete: an empty audit id is blocking even offline
// (it cannot exist anywhere); repeated ids are resolved once. Offline, the
// row is advisory only when every failure is an id the resolver did not
// find; any id found but not passed makes the row blocking. A verifier
// without a ChainResolver fails a non-empty chain closed with
// contract: resolver_error.
//
// Fail-closed. A contract that panics becomes a blocking row with
// contract: verifier_unavailable and a contract returning an error (only
// the chain resolver does) one with contract: resolver_error; either makes
// the decision deny with the first such reason in catalog order,
// overriding the composition. A clause checker that panics on a step adds
// a row "<step id>:clauses" with contract: verifier_unavailable.
package preflight
