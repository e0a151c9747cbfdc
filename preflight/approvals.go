package preflight

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/contractrefine/autonomy/internal/authority"
	"github.com/contractrefine/autonomy/internal/canon"
	"github.com/contractrefine/autonomy/preflight/envelope"
)

// ApprovalSpec is a capability's approval block: with Required, every step
// of the kind waits for a decision by a person holding one of Authorities
// (a token role, e.g. "role:refund-approver"), for up to Timeout after the
// preflight (0: for as long as the binding lasts).
type ApprovalSpec struct {
	Required    bool     `json:"required"`
	Authorities []string `json:"authorities"`
	Timeout     Duration `json:"timeout"`
}

// ErrApprovalSpec reports a capability approval block that cannot be used.
var ErrApprovalSpec = errors.New("preflight: bad approval block")

// Validate reports why a capability's approval block cannot be used: a
// required approval that names no authority could never be given, and an
// authority is never filled in with a default.
func (a *ApprovalSpec) Validate() error {
	if a == nil {
		return nil
	}
	if a.Required && len(a.Authorities) == 0 {
		return fmt.Errorf("%w: authorities: at least one is required when required is true", ErrApprovalSpec)
	}
	if i, problem := authority.ListProblem(a.Authorities); problem != "" {
		return fmt.Errorf("%w: authorities[%d]: %q %s (a token's role must equal it to approve)", ErrApprovalSpec, i, a.Authorities[i], problem)
	}
	return nil
}

// ApprovalRequired is one element of eligibility.approvals_required: a step
// that runs only once a person holding one of Authorities approved it, with
// exactly the args whose digest is ArgsDigest, before ExpiresAt.
type ApprovalRequired struct {
	StepID      string   `json:"step_id"`
	ToolKind    string   `json:"tool_kind"`
	ArgsDigest  string   `json:"args_digest"`
	Authorities []string `json:"authorities"`
	ExpiresAt   string   `json:"expires_at"`
}

// StepApproval is what the gate and the approvals API keep of a bound step
// that needs approval: who may decide and until when.
type StepApproval struct {
	Authorities []string  `json:"authorities"`
	ExpiresAt   time.Time `json:"expires_at"`
}

// stepApproval says whether step s needs approval under gov and env, by
// whom and for how long (0: as long as the binding). A capability's own
// approval block stands as written: an envelope, which the caller writes,
// may add an approval requirement (approvalPolicy mode always, the
// capability's permission_class in requiredFor) but never widen the
// authorities a capability names. When both apply the shorter timeout wins.
func stepApproval(s *Step, gov *Governance, env *envelope.Envelope) (authorities []string, timeout time.Duration, needed bool) {
	c, ok := gov.Capability(s.Kind)
	if !ok {
		return nil, 0, false
	}
	envNeeds := env != nil && env.Approval.Mode == envelope.ApprovalModeAlways &&
		c.PermissionClass != "" && slices.Contains(env.Approval.RequiredFor, c.PermissionClass)
	envTimeout := time.Duration(0)
	if envNeeds {
		envTimeout = time.Duration(env.Approval.TimeoutSeconds) * time.Second
	}
	if c.Approval != nil && c.Approval.Required {
		timeout = time.Duration(c.Approval.Timeout)
		if envNeeds && envTimeout > 0 && (timeout == 0 || envTimeout < timeout) {
			timeout = envTimeout
		}
		return slices.Clone(c.Approval.Authorities), timeout, true
	}
	if envNeeds {
		return slices.Clone(env.Approval.AuthorityRefs), envTimeout, true
	}
	return nil, 0, false
}

// approvalsRequired lists the plan's steps that need approval, in plan
// order, each expiring at min(the binding's expiry, now + its timeout).
func approvalsRequired(req *Request, gov *Governance, env *envelope.Envelope, now, expires time.Time) []ApprovalRequired {
	var out []ApprovalRequired
	for i := range req.Plan.Steps {
		s := &req.Plan.Steps[i]
		authorities, timeout, needed := stepApproval(s, gov, env)
		if !needed {
			continue
		}
		until := expires
		if timeout > 0 && now.Add(timeout).Before(until) {
			until = now.Add(timeout)
		}
		digest, _ := stepArgsDigest(s) // BindingOf refuses a step whose digest fails
		out = append(out, ApprovalRequired{StepID: s.ID, ToolKind: s.Kind, ArgsDigest: digest,
			Authorities: authorities, ExpiresAt: until.UTC().Format(time.RFC3339Nano)})
	}
	return out
}

// stepArgsDigest is the canonical digest of a step's args, {} when absent:
// the digest the gate compares a call's args with.
func stepArgsDigest(s *Step) (string, error) {
	args := s.Args
	if args == nil {
		args = map[string]any{}
	}
	return canon.Digest(args)
}

// ApprovalBody is the body of POST /v1/approvals/{preflight_id}/{step_id}.
type ApprovalBody struct {
	// Decision is "approve" or "reject".
	Decision string `json:"decision"`
	Comment  string `json:"comment,omitempty"`
}

// MaxApprovalComment bounds an approval's comment, which the WAL keeps.
const MaxApprovalComment = 4096

// DecodeApprovalBody decodes an approval body with the rules of
// DecodeRequest: exact names and types, no unknown or duplicate members,
// nothing after the document; the first problem comes with its JSON
// Pointer.
func DecodeApprovalBody(body []byte) (ApprovalBody, *RequestError) {
	var out ApprovalBody
	d, rerr := openObject(body, false)
	if rerr != nil {
		return out, rerr
	}
	sawDecision := false
	rerr = d.members("", func(name, path string) *RequestError {
		var err *RequestError
		switch name {
		case "decision":
			sawDecision = true
			out.Decision, err = d.strictStr(path)
		case "comment":
			out.Comment, err = d.str(path)
		default:
			return unknownField(path, name)
		}
		return err
	})
	if rerr != nil {
		return ApprovalBody{}, rerr
	}
	if _, err := d.dec.Token(); !errors.Is(err, io.EOF) {
		return ApprovalBody{}, malformed("", "unexpected data after the JSON document")
	}
	switch {
	case !sawDecision:
		return ApprovalBody{}, malformed("/decision", `decision is required: "approve" or "reject"`)
	case out.Decision != "approve" && out.Decision != "reject":
		return ApprovalBody{}, malformed("/decision", `decision must be "approve" or "reject"`)
	case len(out.Comment) > MaxApprovalComment:
		return ApprovalBody{}, malformed("/comment", fmt.Sprintf("comment is longer than %d bytes", MaxApprovalComment))
	}
	return out, nil
}
