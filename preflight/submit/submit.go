// Package submit owns one preflight submission end to end: it decodes and
// validates the PreflightRequest, replays or refuses an idempotency key,
// checks the deadline, counts the attempt against its repair session,
// evaluates the contracts, binds the decision and records it through the
// state seam (internal/state) before it is answered. The HTTP API, the
// load command and the tests call Service.Submit; the HTTP handler only
// reads the body and maps an *Error to its answer.
package submit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/contractrefine/autonomy/internal/canon"
	"github.com/contractrefine/autonomy/internal/observe"
	"github.com/contractrefine/autonomy/internal/state"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/preflight/envelope"
	"github.com/contractrefine/autonomy/wal"
)

// Bundle is the loaded policy bundle as the verifier needs it.
type Bundle interface {
	Governance() *preflight.Governance
	Clauses() preflight.ClauseChecker
	Revision() string
}

// Observer is told about each decided preflight, in the context of its
// submission; metrics and tracing implement it.
type Observer interface {
	Preflight(ctx context.Context, p observe.Preflight)
}

// Options configures a Service. Zero values mean the defaults.
type Options struct {
	Verifier preflight.Verifier
	// Store holds bindings, decisions, idempotency records and repair
	// sessions.
	Store state.Store
	// Bundle returns the current policy bundle.
	Bundle func() Bundle
	// Disabled refuses every submission with 503 preflight-disabled.
	Disabled bool
	// BindingWindow is contract_refine.binding_window.
	BindingWindow time.Duration
	// MaxRepairAttempts is contract_refine.max_repair_attempts.
	MaxRepairAttempts int
	// SessionWait bounds how long a submission waits, from its arrival,
	// while other submissions of its repair session are decided (they are
	// decided one at a time); past it the answer is a retryable 503 and
	// nothing is recorded. Zero waits for as long as ctx lasts.
	SessionWait time.Duration
	// StoreRawRequests keeps the raw request in the preflight frame.
	StoreRawRequests bool
	Now              func() time.Time
	NewPreflightID   func() string
	NewAuditID       func() string
	// Logger gets one line per decision and one per failure. Nil discards.
	Logger *slog.Logger
	// NoDecisionLog leaves out the line per decision (log.decisions: false).
	NoDecisionLog bool
	Observer      Observer
	// ApprovalsRequested, when set, is called once a recorded preflight's
	// approvals are pending (the approvals.webhook_url notification), with
	// the time they were recorded as requested at.
	ApprovalsRequested func(ctx context.Context, b *preflight.Binding, at time.Time)
	// Recorded, when set, is called with each binding once it is durable
	// in Store, before the submission is answered (the gate caches it).
	Recorded func(b *preflight.Binding)
}

// Service decides submissions. It is safe for concurrent use.
type Service struct{ o Options }

// New returns a Service.
func New(o Options) *Service {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{o: o}
}

// Submission is one PreflightRequest as it arrived.
type Submission struct {
	Body   []byte
	DryRun bool
	// Arrived is when it arrived, from which SessionWait counts; zero is
	// when Submit is called.
	Arrived time.Time
}

// Answer is a decided (or replayed) submission.
type Answer struct {
	// Body is the decision JSON as answered: canonical, and byte for byte
	// what GET /v1/preflight/{id} serves.
	Body []byte
	// Replayed is set when Body is the recorded decision of an idempotency
	// key, not a new one; Decision is then nil.
	Replayed bool
	Decision *preflight.Decision
}

// Submit decides one submission. A decision, whatever its outcome, is an
// Answer; a submission that got no decision is an *Error, and then nothing
// was recorded.
func (s *Service) Submit(ctx context.Context, sub Submission) (*Answer, *Error) {
	start := sub.Arrived
	if start.IsZero() {
		start = time.Now()
	}
	if err := s.Enabled(); err != nil {
		return nil, err
	}
	in, ferr := s.read(sub)
	if ferr != nil {
		return nil, ferr
	}
	now := s.o.Now()
	if !sub.DryRun && in.env != nil {
		release, ans, err := s.claim(ctx, in)
		if err != nil || ans != nil {
			return ans, err
		}
		defer release()
	}
	// The deadline is checked after the idempotency lookup: a retry of a
	// recorded effect gets the recorded outcome, even late: the key names the
	// effect, not the attempt.
	if in.env != nil && !in.env.Deadline.IsZero() && !now.Before(in.env.Deadline) {
		return nil, fieldError(http.StatusBadRequest, preflight.CodeDeadlineExceeded, "/context/request/deadlineUtc", "The request deadline has already passed.")
	}
	if in.hasSession {
		// A client that has gone, or has waited past what it can still be
		// answered in, is not decided for: its attempt would be spent on
		// an answer nobody reads.
		waitCtx := ctx
		if s.o.SessionWait > 0 {
			var cancel context.CancelFunc
			waitCtx, cancel = context.WithDeadline(ctx, start.Add(s.o.SessionWait))
			defer cancel()
		}
		unlock, err := s.o.Store.LockSession(waitCtx, in.sessionKey)
		if err != nil {
			// The wait ran out while others held the lock, or the store
			// could not be asked (etcd down).
			msg := "The state store could not be reached to lock this repair session; nothing was recorded, retry."
			if waitCtx.Err() != nil {
				msg = "Other submissions of this repair session are being decided; nothing was recorded, retry."
			}
			return nil, &Error{Status: http.StatusServiceUnavailable, Retryable: true, Err: err,
				Fields: []Field{{Code: preflight.CodeVerifierUnavailable, Message: msg}}}
		}
		defer unlock()
	}
	d, err := s.decide(ctx, in, now, sub.DryRun)
	if err != nil {
		return nil, err
	}
	if s.o.Observer != nil {
		s.o.Observer.Preflight(ctx, observe.Preflight{AuditID: d.AuditID, PreflightID: d.PreflightID,
			Outcome: string(d.Outcome), Reason: d.Reason, Attempt: d.Attempt, BundleRevision: in.revision,
			Took: time.Since(start)})
	}
	if !s.o.NoDecisionLog {
		s.o.Logger.InfoContext(ctx, "preflight decided", "audit_id", d.AuditID, "preflight_id", d.PreflightID,
			"outcome", string(d.Outcome), "reason", d.Reason, "attempt", d.Attempt, "dry_run", sub.DryRun)
	}
	return &Answer{Body: in.out, Decision: d}, nil
}

// Enabled is the error every submission gets while preflight is disabled,
// or nil. Callers that can refuse a submission before reading it ask first.
func (s *Service) Enabled() *Error {
	if s.o.Disabled {
		return fieldError(http.StatusServiceUnavailable, preflight.CodePreflightDisabled, "", "Preflight is disabled (contract_refine.mode: disabled).")
	}
	return nil
}

// submission is what Submit works out about one submission.
type submission struct {
	body       []byte
	req        *preflight.Request
	env        *envelope.Envelope
	digest     string
	sessionKey string
	hasSession bool
	// idem is the record to write under the key; stale the preflight id
	// the key named whose decision is gone.
	idem     *wal.IdempotencyRecord
	stale    string
	attempt  int
	revision string
	out      []byte
}

// read decodes and validates the body.
func (s *Service) read(sub Submission) (*submission, *Error) {
	req, rerr := preflight.DecodeRequest(sub.Body)
	if rerr != nil {
		return nil, fieldError(http.StatusBadRequest, rerr.Code, rerr.Path, rerr.Message)
	}
	in := &submission{body: sub.Body, req: req, attempt: 1}
	if len(req.Context.Request) > 0 && string(req.Context.Request) != "null" {
		env, ferrs := envelope.Validate(req.Context.Request)
		if len(ferrs) > 0 {
			e := &Error{Status: http.StatusBadRequest, Fields: make([]Field, len(ferrs))}
			for i, fe := range ferrs {
				e.Fields[i] = Field{Code: fe.Code, Path: "/context/request" + fe.Path, Message: fe.Message}
			}
			return nil, e
		}
		in.env = env
	}
	if path, ok := keyFieldsFit(req, in.env); !ok {
		return nil, fieldError(http.StatusBadRequest, preflight.CodeMalformedRequest, path,
			fmt.Sprintf("The value is longer than %d bytes; it names a record in the WAL.", MaxKeyFieldBytes))
	}
	digest, err := canon.Digest(json.RawMessage(sub.Body))
	if err != nil {
		return nil, fieldError(http.StatusBadRequest, preflight.CodeMalformedRequest, "", "The request body is not canonicalizable JSON: "+err.Error())
	}
	in.digest = digest
	tenant := ""
	if in.env != nil {
		tenant = in.env.TenantIDRef
	}
	in.sessionKey, in.hasSession = req.SessionKey(tenant)
	return in, nil
}

// claim takes the submission's idempotency key and answers a retry of a
// recorded decision with that decision. release is set when the key is
// held and the submission goes on to be decided.
func (s *Service) claim(ctx context.Context, in *submission) (release func(), replay *Answer, e *Error) {
	key := idempotencyKey(in.env, in.req)
	release, err := s.o.Store.ClaimIdempotency(ctx, key)
	if errors.Is(err, wal.ErrInProgress) {
		return nil, nil, &Error{Status: http.StatusConflict, Retryable: true, Fields: []Field{{Code: preflight.CodeIdempotencyInProgress,
			Path: "/context/request/idempotencyKey", Message: "A request with this idempotency key is still being decided."}}}
	}
	if err != nil {
		return nil, nil, s.unavailable(ctx, "claim idempotency key", err)
	}
	rec, err := s.o.Store.Idempotency(ctx, key)
	var recorded []byte
	if err == nil {
		// A key whose decision compaction removed (its sweep of keys may
		// not have run yet, or was cut short) names no effect any more:
		// ErrNotFound, and the request is decided afresh.
		recorded, err = s.o.Store.Decision(ctx, rec.PreflightID)
	}
	switch {
	case err == nil && rec.RequestDigest == in.digest:
		release()
		return nil, &Answer{Body: recorded, Replayed: true}, nil
	case err == nil:
		release()
		return nil, nil, fieldError(http.StatusConflict, preflight.CodeIdempotencyKeyReused, "/context/request/idempotencyKey",
			"This idempotency key was already used with a different request.")
	case !errors.Is(err, wal.ErrNotFound):
		release()
		return nil, nil, s.unavailable(ctx, "read idempotency record", err)
	}
	in.idem = &wal.IdempotencyRecord{Key: key, RequestDigest: in.digest}
	in.stale = rec.PreflightID
	return release, nil, nil
}

// decide evaluates the submission (under its session lock, when it has a
// session) and, unless it is a dry run, records it.
func (s *Service) decide(ctx context.Context, in *submission, now time.Time, dryRun bool) (*preflight.Decision, *Error) {
	exhausted := false
	if in.hasSession {
		sess, err := s.o.Store.Session(ctx, in.sessionKey)
		if err != nil {
			return nil, s.unavailable(ctx, "read repair session", err)
		}
		// The budget opens with the session's first repair_required
		// (docs/API.md#how-the-outcome-is-composed): from then on max_repair_attempts more submissions.
		in.attempt = sess.Attempts + 1
		exhausted = sess.RepairFrom > 0 && in.attempt > sess.RepairFrom+s.o.MaxRepairAttempts
	}
	bundle := s.o.Bundle()
	if bundle == nil {
		return nil, s.unavailable(ctx, "no policy bundle loaded", errors.New("bundle missing"))
	}
	in.revision = bundle.Revision()
	var d *preflight.Decision
	if exhausted {
		d = preflight.NotEvaluated(preflight.ReasonRepairExhausted, in.attempt, in.req, in.env, now, s.o.BindingWindow)
	} else {
		var err error
		d, err = s.o.Verifier.Evaluate(ctx, preflight.Input{Request: in.req, Envelope: in.env,
			Governance: bundle.Governance(), Clauses: bundle.Clauses(), Attempt: in.attempt})
		if err != nil {
			return nil, s.unavailable(ctx, "evaluate preflight", err)
		}
		if !in.hasSession {
			denyWith(d, preflight.ReasonSessionMetadataMissing)
		}
	}
	if !dryRun {
		d.PreflightID, d.AuditID = s.o.NewPreflightID(), s.o.NewAuditID()
	}
	out, err := d.CanonicalJSON()
	if err != nil {
		return nil, s.unavailable(ctx, "encode decision", err)
	}
	in.out = out
	if dryRun {
		return d, nil
	}
	rec, err := s.record(in, d, now)
	if err != nil {
		return nil, s.unavailable(ctx, "bind decision", err)
	}
	rec.DecisionChecked = true // in.out is d.CanonicalJSON()'s, above
	if _, err := s.o.Store.RecordPreflight(ctx, rec); err != nil {
		return nil, s.unavailable(ctx, "record preflight", err)
	}
	if s.o.Recorded != nil {
		s.o.Recorded(&rec.Binding)
	}
	if s.o.ApprovalsRequested != nil && rec.Binding.NeedsApproval() {
		s.o.ApprovalsRequested(ctx, &rec.Binding, rec.Time)
	}
	return d, nil
}

// record is what a decided submission is recorded as.
func (s *Service) record(in *submission, d *preflight.Decision, now time.Time) (wal.PreflightRecord, error) {
	expires, _ := time.Parse(time.RFC3339Nano, d.Eligibility.ExpiresAt)
	b, err := preflight.BindingOf(in.req, d, expires)
	if err != nil {
		return wal.PreflightRecord{}, err
	}
	var actorRef string
	if in.env != nil {
		b.Tenant = in.env.TenantIDRef
		if in.env.ActorIDRef != b.ActorID {
			actorRef = in.env.ActorIDRef
		}
	}
	// The explain page shows the intent; compaction finds a repair
	// session's attempt count under session_key, the key it was counted
	// under.
	attrs := &wal.SubmitAttrs{Attempt: d.Attempt, BundleRevision: in.revision, IntentSummary: in.req.Intent.Summary,
		PlanHash: in.req.Intent.PlanHash, Reason: d.Reason, RequestDigest: in.digest, SessionID: in.req.Context.Actor.SessionID}
	if in.hasSession {
		attrs.SessionKey = in.sessionKey
	}
	if s.o.StoreRawRequests {
		attrs.Request = in.body
	}
	if in.idem != nil {
		in.idem.PreflightID = d.PreflightID
	}
	at, err := time.Parse(time.RFC3339Nano, d.DecidedAt)
	if err != nil {
		at = now
	}
	rec := wal.PreflightRecord{Binding: b, Decision: in.out, Time: at, Submit: attrs, Idempotency: in.idem, ActorRef: actorRef,
		IdempotencyReplaces: in.stale}
	if in.hasSession {
		rec.SessionKey, rec.SessionAttempt = in.sessionKey, in.attempt
	}
	if in.env != nil {
		// The gate holds the tool's response to it (docs/API.md).
		rec.OutputMaxBytes = in.env.OutputMaxBytes
	}
	return rec, nil
}

func (s *Service) unavailable(ctx context.Context, op string, err error) *Error {
	s.o.Logger.ErrorContext(ctx, "preflight cannot be decided", "op", op, "err", err)
	return &Error{Status: http.StatusServiceUnavailable, Retryable: true, Err: err, Fields: []Field{{Code: preflight.CodeVerifierUnavailable,
		Message: "The verifier cannot decide right now; nothing was recorded."}}}
}

// MaxKeyFieldBytes bounds each request field that becomes part of a WAL
// key (a repair session, an idempotency record): bbolt refuses keys over
// 32 KiB, which would otherwise fail the commit and answer 503, inviting
// a retry that can never succeed.
const MaxKeyFieldBytes = 4096

// keyFieldsFit reports whether every key-bearing field of the request is
// within MaxKeyFieldBytes, and the JSON Pointer of the first that is not.
func keyFieldsFit(req *preflight.Request, env *envelope.Envelope) (path string, ok bool) {
	fields := []struct{ path, value string }{
		{"/intent/plan_hash", req.Intent.PlanHash},
		{"/context/actor/id", req.Context.Actor.ID},
		{"/context/actor/session_id", req.Context.Actor.SessionID},
	}
	if env != nil {
		fields = append(fields, []struct{ path, value string }{
			{"/context/request/idempotencyKey", env.IdempotencyKey},
			{"/context/request/actor/idRef", env.ActorIDRef},
			{"/context/request/tenant/idRef", env.TenantIDRef},
		}...)
	}
	for _, f := range fields {
		if len(f.value) > MaxKeyFieldBytes {
			return f.path, false
		}
	}
	return "", true
}

// idempotencyKey scopes the envelope's key by tenant and actor (docs/API.md#idempotency).
func idempotencyKey(env *envelope.Envelope, req *preflight.Request) string {
	actor := env.ActorIDRef
	if actor == "" {
		actor = req.Context.Actor.ID
	}
	b, _ := json.Marshal([3]string{env.TenantIDRef, actor, env.IdempotencyKey})
	return string(b)
}

// denyWith turns an evaluated decision into a deny for a reason outside the
// catalog (a request without session metadata). The rows stay as evaluated,
// so the caller still sees what else would fail.
func denyWith(d *preflight.Decision, reason string) {
	d.Outcome, d.Reason = preflight.OutcomeDeny, reason
	d.Eligibility.Allowed = false
	d.Eligibility.BoundToolKinds = []string{}
	d.Eligibility.ApprovalsRequired = nil
}

// Recorder returns, for a submission body, the function that builds the
// record Submit writes for a decision d of it (out being d's JSON), for
// callers that fill a log with many decisions of one request, such as the
// load command. Those records count their session's attempts without the
// check Submit makes under the session lock.
func (s *Service) Recorder(body []byte, revision string) (func(d *preflight.Decision, out []byte, now time.Time) (wal.PreflightRecord, error), *Error) {
	in, e := s.read(Submission{Body: body})
	if e != nil {
		return nil, e
	}
	in.revision, in.attempt = revision, 0
	return func(d *preflight.Decision, out []byte, now time.Time) (wal.PreflightRecord, error) {
		c := *in
		c.out = out
		return s.record(&c, d, now)
	}, nil
}
