package envelope

import (
	"encoding/json"
	"time"
)

// ContractVersion is the one envelope version this service supports.
const ContractVersion = "aruntime.runtime-request.v1"

// SupportedVersions lists the envelope versions this service accepts.
var SupportedVersions = []string{ContractVersion}

// Envelope is the part of an aruntime.runtime-request.v1 envelope that the
// contracts read. It is produced only from an envelope that passed Validate.
type Envelope struct {
	ContractVersion string
	RequestID       string
	IdempotencyKey  string
	Timestamp       time.Time
	// Deadline is the zero time when the envelope sets no deadlineUtc.
	Deadline     time.Time
	ActorIDRef   string
	TenantIDRef  string // "" when tenant is absent or null
	SessionIDRef string // "" when session is absent or null
	RiskLevel    string // low, medium, high, critical
	// Input is the task input, decoded with json.Number for numbers.
	Input json.RawMessage
	// AllowedTools is nil when the envelope does not give allowedTools.
	AllowedTools []string
	ToolPolicy   ToolPolicy
	Budget       Budget
	Approval     ApprovalPolicy
	// OutputMaxBytes is outputContract.maxBytes: the largest tool response
	// body the caller accepts (docs/API.md); nil when it is absent (0 is a
	// limit: only an empty body).
	OutputMaxBytes *int64
}

// ApprovalPolicy is the envelope's approvalPolicy. With Mode "always", a
// step whose capability's permission_class is in RequiredFor waits for an
// approval by one of AuthorityRefs, for up to TimeoutSeconds (0: for as
// long as the binding lasts). Other modes ("policy-driven") leave the
// decision to the bundle's capabilities.
type ApprovalPolicy struct {
	Mode           string
	RequiredFor    []string
	TimeoutSeconds int
	AuthorityRefs  []string
}

// ApprovalModeAlways is the approvalPolicy mode that requires approval for
// every step of a class in requiredFor.
const ApprovalModeAlways = "always"

// ToolPolicy is the envelope's toolPolicy.
type ToolPolicy struct {
	DefaultDecision  string
	MaxCalls         int
	AllowSideEffects bool
}

// Budget is the envelope's budget.
type Budget struct {
	MaxToolCalls int
}

// FieldError is one validation failure. Path is a JSON Pointer relative to
// the envelope document; callers embed it under their own prefix.
type FieldError struct {
	Code    string `json:"code"`
	Path    string `json:"path"`
	Message string `json:"message"`
}

// Error codes of docs/API.md#errors that envelope validation produces.
const (
	CodeValidationFailed   = "contract-validation-failed"
	CodeUnsupportedVersion = "unsupported-contract-version"
)
