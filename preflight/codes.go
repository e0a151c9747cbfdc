package preflight

import "github.com/contractrefine/autonomy/preflight/envelope"

// Error codes of the HTTP API (SPEC §3.3): the code of an answer that
// carries no decision. Each is also the metric label and the log field of
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

	// The approvals API's (SPEC §13).
	CodeApproverNotAuthorized  = "approver-not-authorized"
	CodeApprovalAlreadyDecided = "approval-already-decided"
	CodeApproverIsActor        = "approver-is-actor"
	CodeApprovalExpired        = "approval-expired"
)

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
