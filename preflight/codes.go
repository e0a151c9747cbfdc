package preflight

import "github.com/contractrefine/autonomy/preflight/envelope"

// Error codes of the HTTP API, its listeners and the built-in gateway: the
// code of an answer that carries no decision (docs/API.md lists them). Each is also the metric label and the log field of
// that answer. The tool runtime (cmd/toolruntime) is a separate service
// with its own.
const (
	CodeMalformedRequest      = "malformed-request"
	CodeValidationFailed      = envelope.CodeValidationFailed
	CodeUnsupportedVersion    = envelope.CodeUnsupportedVersion
	CodeDeadlineExceeded      = "deadline-exceeded"
	CodeIdempotencyKeyReused  = "idempotency-key-reused"
	CodeIdempotencyInProgress = "idempotency-in-progress"
	CodeRequestTooLarge       = "request-too-large"
	CodeUnsupportedMediaType  = "unsupported-media-type"
	CodePreflightDisabled     = "preflight-disabled"
	CodeVerifierUnavailable   = "verifier-unavailable"
	CodeNotFound              = "not-found"
	CodeUnauthorized          = "unauthorized"
	CodeRemoteReadsForbidden  = "remote-reads-forbidden"
	CodeMethodNotAllowed      = "method-not-allowed"

	// The approvals API's (docs/API.md).
	CodeApproverNotAuthorized  = "approver-not-authorized"
	CodeApprovalAlreadyDecided = "approval-already-decided"
	CodeApproverIsActor        = "approver-is-actor"
	CodeApprovalExpired        = "approval-expired"

	// CodeOverloaded: the listener already holds http.max_body_requests
	// bodies or http.max_bytes_in_flight bytes of them (503).
	CodeOverloaded = "overloaded"

	// The built-in gateway's own answers, besides CodeRequestTooLarge (413:
	// an allowed request's body over the limit).
	CodeUpstreamUnavailable = "upstream-unavailable" // 502: the upstream failed after an allow
	CodePathRejected        = "path-rejected"        // 400: an escaped slash or a backslash
	CodeUpgradeRefused      = "upgrade-refused"      // 400: a protocol upgrade
	CodeBodyUnreadable      = "body-unreadable"      // 400: an allowed request's body could not be read whole

	// POST /v1/outcome's, a tool runtime's own report (docs/API.md).
	CodeReporterNotAuthorized  = "reporter-not-authorized"
	CodeOutcomeAlreadyReported = "outcome-already-reported"
	CodeOutcomeMismatch        = "outcome-mismatch"
)

// Codes returns every error code above. The slice is fresh on each call.
func Codes() []string {
	return []string{
		CodeMalformedRequest, CodeValidationFailed, CodeUnsupportedVersion, CodeDeadlineExceeded,
		CodeIdempotencyKeyReused, CodeIdempotencyInProgress, CodeRequestTooLarge,
		CodeUnsupportedMediaType, CodePreflightDisabled, CodeVerifierUnavailable, CodeNotFound,
		CodeUnauthorized, CodeRemoteReadsForbidden, CodeMethodNotAllowed,
		CodeApproverNotAuthorized, CodeApprovalAlreadyDecided, CodeApproverIsActor, CodeApprovalExpired,
		CodeOverloaded,
		CodeReporterNotAuthorized, CodeOutcomeAlreadyReported, CodeOutcomeMismatch,
		CodeUpstreamUnavailable, CodePathRejected, CodeUpgradeRefused, CodeBodyUnreadable,
	}
}

// Mode is contract_refine.mode: what the gate does with a contract failure.
// The configuration (internal/config) and the gate (binding) name this
// type.
type Mode string

// The three modes.
const (
	// ModeDisabled gates nothing: no ladder, and POST /v1/preflight is 503.
	ModeDisabled Mode = "disabled"
	// ModeAdvisory records contract failures and lets the call through.
	ModeAdvisory Mode = "advisory"
	// ModeEnforce denies contract failures.
	ModeEnforce Mode = "enforce"
)
