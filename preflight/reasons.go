package preflight

import "strings"

// Reasons the verifier and the binding ladder emit. Every one has the shape
// "<layer>: <subreason>" that ValidReason checks, everywhere a reason is
// emitted, so dashboards
// and Rego rules can split on ": " without special cases.
const (
	// ReasonPassed: every blocking contract and clause passed.
	ReasonPassed = "contract: passed"
	// ReasonRepairRequired: every blocking failure carries a bounded hint.
	ReasonRepairRequired = "contract: repair_required"
	// ReasonRepairExhausted: the session spent its repair budget
	// (contract_refine.max_repair_attempts, durable across restarts).
	ReasonRepairExhausted = "contract: repair_exhausted"
	// ReasonSessionMetadataMissing: actor.session_id or intent.plan_hash is absent.
	ReasonSessionMetadataMissing = "contract: session_metadata_missing"
	// ReasonVerifierUnavailable: a contract panicked or the verifier cannot run.
	ReasonVerifierUnavailable = "contract: verifier_unavailable"
	// ReasonResolverError: an injected resolver (the decision chain) failed.
	ReasonResolverError = "contract: resolver_error"
	// ReasonIntrospectorError: an introspection dependency of the caller failed.
	ReasonIntrospectorError = "contract: introspector_error"

	// ReasonPreflightRequired: the gate needed a preflight id and had none it knows.
	ReasonPreflightRequired = "contract: preflight_required"
	// ReasonBindingMismatch: kind, actor or argument digest differs from the preflight.
	ReasonBindingMismatch = "contract: preflight_binding_mismatch"
	// ReasonExpired: the binding's expires_at has passed.
	ReasonExpired = "contract: preflight_expired"
	// ReasonReplay: every step of this kind was already consumed.
	ReasonReplay = "contract: preflight_replay"

	// ReasonPlanShapeInvalid is the plan_shape failure.
	ReasonPlanShapeInvalid = "contract: plan_shape_invalid"
	// ReasonArgumentProvenanceInvalid is the argument_provenance failure.
	ReasonArgumentProvenanceInvalid = "contract: argument_provenance_invalid"
	// ReasonCapabilityNotInZone is the capability_in_zone failure.
	ReasonCapabilityNotInZone = "contract: capability_not_in_zone"
	// ReasonRollbackContractNotReady is the rollback_contract failure.
	ReasonRollbackContractNotReady = "contract: rollback_contract_not_ready"
	// ReasonExpectedEvidenceMissing is the expected_evidence failure.
	ReasonExpectedEvidenceMissing = "contract: expected_evidence_missing"
	// ReasonAttestationStale is the attestation_freshness failure.
	ReasonAttestationStale = "contract: attestation_stale"
	// ReasonDecisionChainIncomplete is the blocking decision_chain_complete failure.
	ReasonDecisionChainIncomplete = "contract: decision_chain_incomplete"
	// ReasonChainUnverifiableOffline is the advisory decision_chain_complete
	// failure: offline, the local WAL lacks an id of the chain.
	ReasonChainUnverifiableOffline = "contract: chain_unverifiable_offline"

	// ReasonApprovalPending: the step needs a person's approval and has none.
	// Approvals are a layer of their own: the four contract: preflight_*
	// reasons of the binding ladder are frozen.
	ReasonApprovalPending = "approval: pending"
	// ReasonApprovalRejected: the step's approver rejected it.
	ReasonApprovalRejected = "approval: rejected"

	// ReasonPreconditionViolated: a declared precondition is false for a step's args.
	ReasonPreconditionViolated = "clause: precondition_violated"
	// ReasonInvariantViolated: a declared invariant is false for a step's args.
	ReasonInvariantViolated = "clause: invariant_violated"
	// ReasonPostconditionViolated: a declared postcondition is false for a result.
	ReasonPostconditionViolated = "clause: postcondition_violated"

	// ReasonOutputContractViolated: a tool's response is larger than the
	// envelope's outputContract.maxBytes.
	ReasonOutputContractViolated = "outcome: output_contract_violated"
	// ReasonOutcomeUnverified is a response that could not be judged: its
	// processing failed (a timeout, a broken stream, a body too large to
	// buffer, a message out of order), or no allowed decision is known for
	// it. It is never released as if it had passed.
	ReasonOutcomeUnverified = "outcome: unverified"
	// ReasonOutcomeOK: every after-call clause of a response held.
	ReasonOutcomeOK = "outcome: ok"

	// ReasonPolicyAllowed: the operator's policy allowed the call.
	ReasonPolicyAllowed = "policy: allowed"
	// ReasonPolicyDenied: the operator's policy denied the call and named no
	// deny_reason (PolicyReason builds the reason of one that does).
	ReasonPolicyDenied = "policy: denied"

	// ReasonMalformedToolCall: the gated request cannot be read as one tool
	// call (kind and args).
	ReasonMalformedToolCall = "gate: malformed_tool_call"
	// ReasonPartialBody: Envoy cut the buffered body, so the call the gate
	// would judge is not the call the tool would run.
	ReasonPartialBody = "gate: partial_body"

	// The built-in gateway's own answers (beside CodeUpstreamUnavailable,
	// CodePathRejected, CodeUpgradeRefused, CodeRequestTooLarge and
	// CodeBodyUnreadable).
	ReasonGatewayUpstreamUnavailable = "gateway: upstream_unavailable"
	ReasonGatewayEscapedSlash        = "gateway: escaped_slash"
	ReasonGatewayUpgradeRefused      = "gateway: upgrade_refused"
	ReasonGatewayRequestTooLarge     = "gateway: request_too_large"
	ReasonGatewayBodyUnreadable      = "gateway: body_unreadable"
)

// Reasons returns every fixed reason of the catalog above, layer by layer.
// The reasons PolicyReason builds from an operator's deny_reason are not
// among them. The slice is fresh on each call.
func Reasons() []string {
	return []string{
		ReasonPassed, ReasonRepairRequired, ReasonRepairExhausted,
		ReasonSessionMetadataMissing, ReasonVerifierUnavailable,
		ReasonResolverError, ReasonIntrospectorError,
		ReasonPreflightRequired, ReasonBindingMismatch, ReasonExpired, ReasonReplay,
		ReasonPlanShapeInvalid, ReasonArgumentProvenanceInvalid, ReasonCapabilityNotInZone,
		ReasonRollbackContractNotReady, ReasonExpectedEvidenceMissing, ReasonAttestationStale,
		ReasonDecisionChainIncomplete, ReasonChainUnverifiableOffline,
		ReasonApprovalPending, ReasonApprovalRejected,
		ReasonPreconditionViolated, ReasonInvariantViolated, ReasonPostconditionViolated,
		ReasonOutputContractViolated, ReasonOutcomeUnverified, ReasonOutcomeOK,
		ReasonPolicyAllowed, ReasonPolicyDenied,
		ReasonMalformedToolCall, ReasonPartialBody,
		ReasonGatewayUpstreamUnavailable, ReasonGatewayEscapedSlash, ReasonGatewayUpgradeRefused,
		ReasonGatewayRequestTooLarge, ReasonGatewayBodyUnreadable,
	}
}

// Subreason is the part of reason after its layer: the code of a deny body
// ("preflight_required" for "contract: preflight_required").
func Subreason(reason string) string {
	_, sub, _ := strings.Cut(reason, ": ")
	return sub
}

// policyLayer is the layer of the operator's policy reasons.
const policyLayer = "policy: "

// PolicyReason is the reason of a policy deny whose deny_reason folded to
// sub (already in the [a-z0-9_]+ shape): "policy: <sub>", or
// ReasonPolicyDenied when sub is empty.
func PolicyReason(sub string) string {
	if sub == "" {
		return ReasonPolicyDenied
	}
	return policyLayer + sub
}

// Names of the seven contracts of docs/API.md#preflightdecision.
const (
	ContractPlanShape             = "plan_shape"
	ContractArgumentProvenance    = "argument_provenance"
	ContractCapabilityInZone      = "capability_in_zone"
	ContractRollback              = "rollback_contract"
	ContractExpectedEvidence      = "expected_evidence"
	ContractAttestationFreshness  = "attestation_freshness"
	ContractDecisionChainComplete = "decision_chain_complete"
)

// Catalog returns the contract names in catalog order, the order of every
// decision's contract_results. The slice is fresh on each call, so callers
// may keep or change it.
func Catalog() []string {
	return []string{
		ContractPlanShape,
		ContractArgumentProvenance,
		ContractCapabilityInZone,
		ContractRollback,
		ContractExpectedEvidence,
		ContractAttestationFreshness,
		ContractDecisionChainComplete,
	}
}

// ValidReason reports whether reason has the shape
// ^[a-z][a-z0-9_]*: [a-z0-9_]+$ that every emitted reason must have.
func ValidReason(reason string) bool {
	layer, sub, ok := strings.Cut(reason, ": ")
	if !ok || layer == "" || sub == "" || layer[0] < 'a' || layer[0] > 'z' {
		return false
	}
	return lowerSnake(layer) && lowerSnake(sub)
}

func lowerSnake(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return true
}
