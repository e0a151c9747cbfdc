package wal

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/contractrefine/autonomy/internal/canon"
	"github.com/contractrefine/autonomy/preflight"
)

// The attrs of each frame kind have one type here (OutcomeAttrs in
// outcome.go), which writers fill and readers decode into. Each of the four
// written on the preflight and Check paths (preflight, decision, consumed,
// approval) writes its own canonical JSON (writeCanonical): its members in
// sorted order, the optional ones only when set, so a frame carries the
// bytes canon.Marshal writes for the same value (frameattrs_test.go holds
// both to that, and internal/httpapi/testdata/frames to the bytes of logs
// already written).

// typedAttrs is attrs that write their own canonical JSON. sizeHint is
// about the size of that JSON, so the buffer is allocated once.
type typedAttrs interface {
	writeCanonical(w *canon.Writer)
	sizeHint() int
}

// canonicalOf is the canonical JSON of a, or the first error writing it.
func canonicalOf(a typedAttrs) ([]byte, error) { return canonicalNaming(a, nil) }

// canonicalNaming is canonicalOf(a) with the member "replica": replica
// (canonical JSON) in its place unless a names a replica itself; nil adds
// nothing.
func canonicalNaming(a typedAttrs, replica []byte) ([]byte, error) {
	var w canon.Writer
	w.Grow(a.sizeHint() + len(AttrReplica) + len(replica) + 4)
	if replica != nil {
		w.Insert(AttrReplica, replica)
	}
	a.writeCanonical(&w)
	return w.Bytes()
}

// member writes the name and string value of one member.
func member(w *canon.Writer, name, v string) {
	w.Name(name)
	w.String(v)
}

// writeStrings writes xs as an array of strings; nil is the empty array.
func writeStrings(w *canon.Writer, xs []string) {
	if xs == nil {
		xs = []string{}
	}
	w.Strings(xs)
}

func writeTime(w *canon.Writer, t time.Time) {
	w.String(t.UTC().Format(TimestampFormat))
}

// PreflightAttrs is the attrs of an autonomy.preflight frame: the binding
// the gate enforces, the decision JSON returned to the caller and, for a
// preflight submitted through the API, what SubmitAttrs adds.
type PreflightAttrs struct {
	ActorID string `json:"actor_id"`
	// ActorRef is the envelope's actor.idRef when it names another actor
	// than ActorID (PreflightRecord.ActorRef): the approvals of the steps
	// carry it, and verification compares them with it.
	ActorRef string `json:"actor_ref,omitempty"`
	// Decision is the decision JSON exactly as returned, canonical; null
	// when the record had none.
	Decision json.RawMessage `json:"decision"`
	// decisionChecked: Decision is known to be JSON (DecisionChecked).
	decisionChecked bool
	ExpiresAt       time.Time             `json:"expires_at"`
	Outcome         preflight.Outcome     `json:"outcome"`
	Steps           []preflight.BoundStep `json:"steps"`
	// OutputMaxBytes is the envelope's outputContract.maxBytes, written
	// only when it set one (0 included).
	OutputMaxBytes *int64 `json:"output_max_bytes,omitempty"`
	PreflightID    string `json:"preflight_id"`
	Tenant         string `json:"tenant,omitempty"`
	*SubmitAttrs
}

// SubmitAttrs are the attrs a preflight submitted through the API
// (preflight/submit) adds to its autonomy.preflight frame.
type SubmitAttrs struct {
	Attempt        int    `json:"attempt"`
	BundleRevision string `json:"bundle_revision"`
	DryRun         bool   `json:"dry_run"`
	IntentSummary  string `json:"intent_summary"`
	PlanHash       string `json:"plan_hash,omitempty"`
	Reason         string `json:"reason"`
	// Request is the request body as received, kept with
	// wal.store_raw_requests; it is written in canonical form.
	Request       json.RawMessage `json:"request,omitempty"`
	RequestDigest string          `json:"request_digest"`
	SessionID     string          `json:"session_id,omitempty"`
	// SessionKey is the key the repair session's attempt was counted
	// under, which compaction releases.
	SessionKey string `json:"session_key,omitempty"`
}

func (a *PreflightAttrs) sizeHint() int {
	n := 256 + len(a.ActorID) + len(a.ActorRef) + len(a.Decision) + len(a.PreflightID) + len(a.Tenant)
	for i := range a.Steps {
		n += 128 + len(a.Steps[i].ID) + len(a.Steps[i].Kind) + len(a.Steps[i].ArgsDigest)
	}
	if s := a.SubmitAttrs; s != nil {
		n += 192 + len(s.BundleRevision) + len(s.IntentSummary) + len(s.PlanHash) + len(s.Reason) + len(s.Request) +
			len(s.RequestDigest) + len(s.SessionID) + len(s.SessionKey)
	}
	return n
}

func (a *PreflightAttrs) writeCanonical(w *canon.Writer) {
	s := a.SubmitAttrs
	if s == nil {
		s = &SubmitAttrs{}
	}
	sub := a.SubmitAttrs != nil
	w.Open()
	w.Name("actor_id")
	w.String(a.ActorID)
	if a.ActorRef != "" {
		w.Name("actor_ref")
		w.String(a.ActorRef)
	}
	if sub {
		w.Name("attempt")
		w.Value(s.Attempt)
		w.Name("bundle_revision")
		w.String(s.BundleRevision)
	}
	w.Name("decision")
	switch {
	case len(a.Decision) == 0:
		w.Null()
	case a.decisionChecked || validJSON(a.Decision):
		w.Value(canon.Canonical(a.Decision))
	default:
		w.Any(a.Decision) // fails: the decision is not JSON
	}
	if sub {
		w.Name("dry_run")
		w.Bool(s.DryRun)
	}
	w.Name("expires_at")
	writeTime(w, a.ExpiresAt)
	if sub {
		w.Name("intent_summary")
		w.String(s.IntentSummary)
	}
	w.Name("outcome")
	w.String(string(a.Outcome))
	if a.OutputMaxBytes != nil {
		w.Name("output_max_bytes")
		w.Value(*a.OutputMaxBytes)
	}
	if s.PlanHash != "" {
		w.Name("plan_hash")
		w.String(s.PlanHash)
	}
	w.Name("preflight_id")
	w.String(a.PreflightID)
	if sub {
		w.Name("reason")
		w.String(s.Reason)
	}
	if len(s.Request) > 0 {
		w.Name("request")
		w.Any(s.Request)
	}
	if sub {
		w.Name("request_digest")
		w.String(s.RequestDigest)
	}
	if s.SessionID != "" {
		w.Name("session_id")
		w.String(s.SessionID)
	}
	if s.SessionKey != "" {
		w.Name("session_key")
		w.String(s.SessionKey)
	}
	w.Name("steps")
	steps := a.Steps
	if steps == nil {
		steps = []preflight.BoundStep{}
	}
	canon.Array(w, steps, func(s *preflight.BoundStep) {
		w.Open()
		if s.Approval != nil {
			w.Name("approval")
			w.Open()
			w.Name("authorities")
			writeStrings(w, s.Approval.Authorities)
			w.Name("expires_at")
			writeTime(w, s.Approval.ExpiresAt)
			w.Close()
		}
		w.Name("args_digest")
		w.String(s.ArgsDigest)
		w.Name("id")
		w.String(s.ID)
		w.Name("kind")
		w.String(s.Kind)
		w.Close()
	})
	if a.Tenant != "" {
		w.Name("tenant")
		w.String(a.Tenant)
	}
	w.Close()
}

// DecisionAttrs is the attrs of an autonomy.decision frame: what the gate
// decided for one gated request (docs/API.md, the audit join).
type DecisionAttrs struct {
	// Actor is the caller identity, when the request carried one.
	Actor string `json:"actor,omitempty"`
	// AdvisoryReason is the contract failure advisory mode let through,
	// on a request denied for another reason.
	AdvisoryReason string `json:"advisory_reason,omitempty"`
	// Args are the call's args as received, kept with
	// wal.store_raw_requests: generic JSON values (canon.Parse).
	Args       any    `json:"args,omitempty"`
	ArgsDigest string `json:"args_digest,omitempty"`
	// BundleRevision is the revision of the bundle that decided; nil when
	// the request was refused before a bundle was consulted.
	BundleRevision *string `json:"bundle_revision,omitempty"`
	// Clause is the capability's clause the call failed at the gate,
	// when one did (a precondition or an invariant on the call's args):
	// its kind, place and expression, never the values it read.
	Clause *DecisionClause `json:"clause,omitempty"`
	// Enforced is false for a failure advisory mode did not enforce.
	Enforced bool   `json:"enforced"`
	Method   string `json:"method"`
	Mode     string `json:"mode"`
	// Outcome is allow or deny.
	Outcome string `json:"outcome"`
	Path    string `json:"path"`
	// PreflightID and StepID are empty when the request named no
	// preflight or consumed no step.
	PreflightID string `json:"preflight_id"`
	Reason      string `json:"reason"`
	RequestID   string `json:"request_id"`
	Status      int    `json:"status"`
	StepID      string `json:"step_id"`
	ToolKind    string `json:"tool_kind"`
}

// LetThrough reports whether this decision let the gated request
// requestID through: an allow, or a failure advisory mode did not enforce.
func (a *DecisionAttrs) LetThrough(requestID string) bool {
	return a.RequestID == requestID && (a.Outcome == "allow" || !a.Enforced)
}

// Canonical returns the attrs' canonical JSON, for a writer that encodes
// them itself before the log's transaction (the gate, on every Check: the
// attrs then need not be on the heap).
func (a *DecisionAttrs) Canonical() (CanonicalAttrs, error) {
	var w canon.Writer
	w.Grow(a.sizeHint())
	a.writeCanonical(&w)
	return w.Bytes()
}

// DecisionClause names the clause a gated call failed.
type DecisionClause struct {
	// Kind is precondition or invariant.
	Kind string `json:"kind"`
	// Index is its place in the capability's list of that kind.
	Index      int    `json:"index"`
	Expression string `json:"expression"`
}

func (a *DecisionAttrs) sizeHint() int {
	n := 184 + len(a.Actor) + len(a.AdvisoryReason) + len(a.ArgsDigest) + len(a.Method) + len(a.Path) +
		len(a.PreflightID) + len(a.Reason) + len(a.RequestID) + len(a.StepID) + len(a.ToolKind)
	if a.Clause != nil {
		n += 64 + len(a.Clause.Kind) + len(a.Clause.Expression)
	}
	if a.BundleRevision != nil {
		n += 20 + len(*a.BundleRevision)
	}
	if a.Args != nil {
		n += 256
	}
	return n
}

func (a *DecisionAttrs) writeCanonical(w *canon.Writer) {
	w.Open()
	if a.Actor != "" {
		member(w, "actor", a.Actor)
	}
	if a.AdvisoryReason != "" {
		member(w, "advisory_reason", a.AdvisoryReason)
	}
	if a.Args != nil {
		w.Name("args")
		w.Value(a.Args)
	}
	if a.ArgsDigest != "" {
		member(w, "args_digest", a.ArgsDigest)
	}
	if a.BundleRevision != nil {
		member(w, "bundle_revision", *a.BundleRevision)
	}
	if c := a.Clause; c != nil {
		w.Name("clause")
		w.Open()
		member(w, "expression", c.Expression)
		w.Name("index")
		w.Value(c.Index)
		member(w, "kind", c.Kind)
		w.Close()
	}
	w.Name("enforced")
	w.Bool(a.Enforced)
	member(w, "method", a.Method)
	member(w, "mode", a.Mode)
	member(w, "outcome", a.Outcome)
	member(w, "path", a.Path)
	member(w, "preflight_id", a.PreflightID)
	member(w, "reason", a.Reason)
	member(w, "request_id", a.RequestID)
	w.Name("status")
	w.Value(a.Status)
	member(w, "step_id", a.StepID)
	member(w, "tool_kind", a.ToolKind)
	w.Close()
}

// ConsumedAttrs is the attrs of an autonomy.preflight_consumed frame: the
// step of a preflight one gated request spent.
type ConsumedAttrs struct {
	// ArgsDigest is the consuming call's (ConsumeRequest.CallDigest),
	// written when it is known.
	ArgsDigest  string `json:"args_digest,omitempty"`
	PreflightID string `json:"preflight_id"`
	RequestID   string `json:"request_id"`
	StepID      string `json:"step_id"`
	ToolKind    string `json:"tool_kind"`
}

func (a *ConsumedAttrs) sizeHint() int {
	return 96 + len(a.ArgsDigest) + len(a.PreflightID) + len(a.RequestID) + len(a.StepID) + len(a.ToolKind)
}

func (a *ConsumedAttrs) writeCanonical(w *canon.Writer) {
	w.Open()
	if a.ArgsDigest != "" {
		w.Name("args_digest")
		w.String(a.ArgsDigest)
	}
	w.Name("preflight_id")
	w.String(a.PreflightID)
	w.Name("request_id")
	w.String(a.RequestID)
	w.Name("step_id")
	w.String(a.StepID)
	w.Name("tool_kind")
	w.String(a.ToolKind)
	w.Close()
}

// ApprovalAttrs is the attrs of an autonomy.approval frame: the step and
// its args digest, the decision, and the approver's token name, roles and
// subject.
type ApprovalAttrs struct {
	Approver   string `json:"approver"`
	ArgsDigest string `json:"args_digest"`
	Comment    string `json:"comment,omitempty"`
	// Decision is approve or reject.
	Decision    string `json:"decision"`
	PreflightID string `json:"preflight_id"`
	// Replica names the replica that recorded the decision, when several
	// share the state.
	Replica  string   `json:"replica,omitempty"`
	Roles    []string `json:"roles"`
	StepID   string   `json:"step_id"`
	Subject  string   `json:"subject,omitempty"`
	Tenant   string   `json:"tenant,omitempty"`
	ToolKind string   `json:"tool_kind"`
}

func (a *ApprovalAttrs) sizeHint() int {
	n := 192 + len(a.Approver) + len(a.ArgsDigest) + len(a.Comment) + len(a.Decision) + len(a.PreflightID) +
		len(a.Replica) + len(a.StepID) + len(a.Subject) + len(a.Tenant) + len(a.ToolKind)
	for _, r := range a.Roles {
		n += 3 + len(r)
	}
	return n
}

func (a *ApprovalAttrs) writeCanonical(w *canon.Writer) {
	opt := func(name, v string) {
		if v != "" {
			w.Name(name)
			w.String(v)
		}
	}
	w.Open()
	w.Name("approver")
	w.String(a.Approver)
	w.Name("args_digest")
	w.String(a.ArgsDigest)
	opt("comment", a.Comment)
	w.Name("decision")
	w.String(a.Decision)
	w.Name("preflight_id")
	w.String(a.PreflightID)
	opt("replica", a.Replica)
	w.Name("roles")
	writeStrings(w, a.Roles)
	w.Name("step_id")
	w.String(a.StepID)
	opt("subject", a.Subject)
	opt("tenant", a.Tenant)
	w.Name("tool_kind")
	w.String(a.ToolKind)
	w.Close()
}

// decodeAttrs decodes the attrs of f, a frame of kind, into a T.
func decodeAttrs[T any](f *Frame, kind string) (T, error) {
	var a T
	if f.Kind != kind {
		return a, fmt.Errorf("wal: frame %d is %s, not %s", f.Seq, f.Kind, kind)
	}
	if err := json.Unmarshal(f.Attrs, &a); err != nil {
		return a, fmt.Errorf("%w: %s frame %d: %v", ErrCorrupt, kind, f.Seq, err)
	}
	return a, nil
}

// Preflight decodes the attrs of an autonomy.preflight frame.
func (f *Frame) Preflight() (PreflightAttrs, error) {
	return decodeAttrs[PreflightAttrs](f, KindPreflight)
}

// Decision decodes the attrs of an autonomy.decision frame.
func (f *Frame) Decision() (DecisionAttrs, error) {
	return decodeAttrs[DecisionAttrs](f, KindDecision)
}

// Consumed decodes the attrs of an autonomy.preflight_consumed frame.
func (f *Frame) Consumed() (ConsumedAttrs, error) {
	return decodeAttrs[ConsumedAttrs](f, KindConsumed)
}

// Approval decodes the attrs of an autonomy.approval frame.
func (f *Frame) Approval() (ApprovalAttrs, error) {
	return decodeAttrs[ApprovalAttrs](f, KindApproval)
}

// Outcome decodes the attrs of an autonomy.outcome frame.
func (f *Frame) Outcome() (OutcomeAttrs, error) {
	return decodeAttrs[OutcomeAttrs](f, KindOutcome)
}
