// Package envelope validates the aruntime.runtime-request.v1 envelope a
// PreflightRequest may carry in context.request, and reads the parts of it
// the contracts check a plan against.
//
// # Rules
//
// Validate applies every rule of the aruntime.runtime-request.v1 contract. Those a JSON Schema can state live
// in schema/runtime-request.v1.schema.json (draft 2020-12, embedded and
// compiled once with santhosh-tekuri/jsonschema/v6): the required fields,
// types, the riskLevel and dataClassification enums, non-empty ids, tenant
// and session as an object or null, non-negative limits. Additional
// properties are allowed everywhere, because the contract lets a major version
// gain optional fields that older consumers ignore. The schema also requires
// the nested authority and limit fields (actor.idRef, the idRef of a given
// tenant or session, toolPolicy.defaultDecision, maxCalls and
// allowSideEffects, budget.maxToolCalls), since the contract forbids filling a
// missing authority or limit with a default. The contracts read maxCalls,
// allowSideEffects, maxToolCalls and allowedTools (docs/API.md#preflightdecision);
// defaultDecision is required and validated but decides nothing, because
// docs/API.md#preflightrequest checks a kind against allowedTools only when the list is
// given.
//
// The rest is code: timestampUtc and deadlineUtc are RFC 3339 instants
// written in UTC with a trailing "Z" (an offset such as -05:00 is refused),
// deadlineUtc is not before timestampUtc, and a contractVersion outside
// SupportedVersions is answered with CodeUnsupportedVersion alone. Two
// further rules protect the reader rather than the contract: a member name
// may not repeat within an object (readers disagree on which copy wins),
// and a number literal must stay within 256 characters, an exponent of
// ±400 and float64 range, because the schema library panics on numbers
// math/big cannot parse.
//
// Whether the deadline has passed needs the clock and is left to the caller.
//
// # Error order
//
// Validate reports every failure, one per JSON Pointer, in document order:
//
//   - An error about a value that is present sorts where that value starts
//     in the input, so nested errors sit inside their parent's place.
//   - A missing member of a nested object sorts at the end of that object,
//     after every error inside it.
//   - A missing top-level field sorts right after the nearest field that
//     precedes it in the contract's field order (fieldOrder) and is present in the document
//     (before everything when none is). With the table's order in the input,
//     errors therefore read in table order: for the invalid example (testdata/invalid.json),
//     /idempotencyKey (missing), then /timestampUtc, then /riskLevel.
//     Several missing fields sharing one anchor keep the table's order.
//
// The first error is the one docs/API.md#errors puts in the response's "error".
package envelope
