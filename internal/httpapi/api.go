package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/contractrefine/autonomy/internal/canon"
	"github.com/contractrefine/autonomy/internal/state"
	"github.com/contractrefine/autonomy/internal/tracing"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/preflight/envelope"
	"github.com/contractrefine/autonomy/wal"
)

// Log is where the audit join reads the frames of an audit id.
type Log interface {
	AuditFrames(ctx context.Context, auditID string) ([]wal.Frame, error)
	AuditFramesOf(ctx context.Context, auditID string, kinds []string) ([]wal.Frame, error)
}

var _ Log = (*wal.DB)(nil)

// Bundle is the loaded policy bundle as the verifier needs it.
type Bundle interface {
	Governance() *preflight.Governance
	Clauses() preflight.ClauseChecker
	Revision() string
}

// Observer is told about each preflight; metrics implement it.
type Observer interface {
	Preflight(outcome preflight.Outcome, reason string, attempt int, took time.Duration)
	APIError(code string)
}

// Access decides who may read stored records (SPEC §8). A nil Access lets
// everyone read everything.
type Access interface {
	// Authorize returns the tenant scope of the request's credentials: ok is
	// false when the request may not read at all; all is true when it may
	// read every tenant.
	Authorize(r *http.Request) (tenant string, all bool, ok bool)
}

// Options configures the API. Zero values mean the defaults.
type Options struct {
	Verifier preflight.Verifier
	// Store holds the bindings, decisions, idempotency records and repair
	// sessions (internal/state).
	Store state.Store
	// Log answers the audit join.
	Log Log
	// Bundle returns the current policy bundle.
	Bundle func() Bundle
	// Disabled answers every preflight with 503 preflight-disabled.
	Disabled bool
	// MaxBodyBytes is http.max_body_bytes (default 1 MiB).
	MaxBodyBytes int64
	// BindingWindow is contract_refine.binding_window.
	BindingWindow time.Duration
	// MaxRepairAttempts is contract_refine.max_repair_attempts.
	MaxRepairAttempts int
	// SessionWait bounds how long a submission waits, from its arrival,
	// while other submissions of its repair session are decided (they are
	// decided one at a time); past it the answer is a retryable 503 and
	// nothing is recorded. Zero waits for as long as the client stays.
	SessionWait time.Duration
	// StoreRawRequests keeps the raw request in the preflight frame.
	StoreRawRequests bool
	Now              func() time.Time
	NewPreflightID   func() string
	NewAuditID       func() string
	Logger           *slog.Logger
	// NoDecisionLog drops the "preflight decided" line (log.decisions
	// false); the preflight frame is written either way.
	NoDecisionLog bool
	Observer      Observer
	Access        Access
	// Approvers tells who presents a decision to the approvals API
	// (SPEC §13); nil refuses every decision.
	Approvers Approvers
	// ApprovalsRequested, when set, is called once a recorded preflight's
	// approvals are pending (the approvals.webhook_url notification).
	ApprovalsRequested func(ctx context.Context, b *preflight.Binding)
	// Replica names this replica in the frames it writes.
	Replica string
}

// API is the HTTP handler.
type API struct {
	o   Options
	mux *http.ServeMux
}

// New returns the API.
func New(o Options) *API {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 1 << 20
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	a := &API{o: o}
	a.mux = http.NewServeMux()
	a.mux.HandleFunc("POST /v1/preflight", a.postPreflight)
	a.mux.HandleFunc("GET /v1/preflight/{id}", a.getPreflight)
	a.mux.HandleFunc("GET /v1/audit/{id}", a.getAudit)
	// Anything else under the API's paths: a GET that names no single
	// record is 404, like an unknown id; another method is 405 with the
	// Allow header RFC 9110 requires.
	a.mux.HandleFunc("GET /v1/preflight/", a.notFound)
	a.mux.HandleFunc("GET /v1/audit/", a.notFound)
	a.mux.HandleFunc("/v1/audit", a.notFound) // else a redirect to /v1/audit/
	a.mux.HandleFunc("/v1/preflight", a.methodNotAllowed("POST"))
	a.mux.HandleFunc("/v1/preflight/", a.methodNotAllowed("GET, HEAD"))
	a.mux.HandleFunc("/v1/audit/", a.methodNotAllowed("GET, HEAD"))
	a.routeApprovals()
	return a
}

// ServeHTTP routes the API's paths.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Answers carry agents' text (args, summaries) as JSON: no browser may
	// sniff them as HTML, and no cache along the way may keep a record.
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	a.mux.ServeHTTP(w, r)
}

func (a *API) methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a.o.Observer != nil {
			a.o.Observer.APIError(CodeMethodNotAllowed)
		}
		WriteMethodNotAllowed(w, r, allow)
	}
}

func (a *API) notFound(w http.ResponseWriter, r *http.Request) {
	a.fail(w, http.StatusNotFound, CodeNotFound, "", "No record has this path.", false)
}

func (a *API) fail(w http.ResponseWriter, status int, code, path, message string, retryable bool) {
	if a.o.Observer != nil {
		a.o.Observer.APIError(code)
	}
	writeError(w, status, code, path, message, retryable)
}

// jsonMediaType reports whether a Content-Type names JSON:
// application/json or a +json type, with any parameters. An absent header
// is taken as JSON (RFC 9110 §8.3 lets the recipient decide), so clients
// that send none keep working; a declared non-JSON type never is.
func jsonMediaType(contentType string) bool {
	if contentType == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// dryRunOf reads ?dry_run: absent is a real run; a value strconv.ParseBool
// takes decides; anything else, the parameter twice, any other parameter
// (dry-run, dryRun, DRY_RUN), or a query that does not parse (url.Values
// would drop the bad pair), is not ok, so a client that meant a dry run
// never gets a recorded one by a spelling.
func dryRunOf(rawQuery string) (dryRun, ok bool) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return false, false
	}
	for name := range q {
		if name != "dry_run" { // dry-run, dryRun, DRY_RUN: POST takes no other parameter
			return false, false
		}
	}
	vs, present := q["dry_run"]
	if !present {
		return false, true
	}
	if len(vs) != 1 {
		return false, false
	}
	b, err := strconv.ParseBool(vs[0])
	return b, err == nil
}

// postPreflight decides one PreflightRequest.
func (a *API) postPreflight(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if a.o.Disabled {
		a.fail(w, http.StatusServiceUnavailable, CodePreflightDisabled, "", "Preflight is disabled (contract_refine.mode: disabled).", false)
		return
	}
	if !jsonMediaType(r.Header.Get("Content-Type")) {
		// Refused before the body is read: a form or text body is not a
		// PreflightRequest, and deciding it would spend an attempt.
		a.fail(w, http.StatusUnsupportedMediaType, CodeUnsupportedMediaType, "", "The request body must be JSON: send Content-Type: application/json.", false)
		return
	}
	tooLarge := func() {
		a.fail(w, http.StatusRequestEntityTooLarge, CodeRequestTooLarge, "", "The request body is larger than http.max_body_bytes.", false)
	}
	if r.ContentLength > a.o.MaxBodyBytes {
		// Refused before reading: a client waiting on Expect:
		// 100-continue gets its 413 at once.
		tooLarge()
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.o.MaxBodyBytes))
	if err != nil {
		var over *http.MaxBytesError
		if errors.As(err, &over) {
			tooLarge()
			return
		}
		a.fail(w, http.StatusBadRequest, CodeMalformedRequest, "", "The request body could not be read.", false)
		return
	}
	dryRun, ok := dryRunOf(r.URL.RawQuery)
	if !ok {
		a.fail(w, http.StatusBadRequest, CodeMalformedRequest, "", "The dry_run parameter must be given once, as true or false (or 1, t, 0, f).", false)
		return
	}
	req, rerr := preflight.DecodeRequest(body)
	if rerr != nil {
		a.fail(w, http.StatusBadRequest, rerr.Code, rerr.Path, rerr.Message, false)
		return
	}
	now := a.o.Now()
	var env *envelope.Envelope
	if len(req.Context.Request) > 0 && string(req.Context.Request) != "null" {
		var ferrs []envelope.FieldError
		env, ferrs = envelope.Validate(req.Context.Request)
		if len(ferrs) > 0 {
			errs := make([]apiError, len(ferrs))
			for i, fe := range ferrs {
				errs[i] = apiError{Code: fe.Code, Path: "/context/request" + fe.Path, Message: fe.Message}
			}
			if a.o.Observer != nil {
				a.o.Observer.APIError(errs[0].Code)
			}
			writeErrors(w, http.StatusBadRequest, errs)
			return
		}
	}
	if path, ok := keyFieldsFit(req, env); !ok {
		a.fail(w, http.StatusBadRequest, CodeMalformedRequest, path, fmt.Sprintf("The value is longer than %d bytes; it names a record in the WAL.", MaxKeyFieldBytes), false)
		return
	}
	digest, err := canon.Digest(json.RawMessage(body))
	if err != nil {
		a.fail(w, http.StatusBadRequest, CodeMalformedRequest, "", "The request body is not canonicalizable JSON: "+err.Error(), false)
		return
	}

	var idem *wal.IdempotencyRecord
	var stale string // the preflight a key names whose decision is gone
	if env != nil && !dryRun {
		key := idempotencyKey(env, req)
		release, err := a.o.Store.ClaimIdempotency(r.Context(), key)
		if errors.Is(err, wal.ErrInProgress) {
			a.fail(w, http.StatusConflict, CodeIdempotencyInProgress, "/context/request/idempotencyKey", "A request with this idempotency key is still being decided.", true)
			return
		}
		if err != nil {
			a.unavailable(w, "claim idempotency key", err)
			return
		}
		defer release()
		rec, err := a.o.Store.Idempotency(r.Context(), key)
		var recorded []byte
		if err == nil {
			// A key whose decision compaction removed (its sweep of keys
			// may not have run yet, or was cut short) names no effect any
			// more: ErrNotFound, and the request is decided afresh.
			recorded, err = a.o.Store.Decision(r.Context(), rec.PreflightID)
		}
		switch {
		case err == nil && rec.RequestDigest == digest:
			replay(w, recorded)
			return
		case err == nil:
			a.fail(w, http.StatusConflict, CodeIdempotencyKeyReused, "/context/request/idempotencyKey", "This idempotency key was already used with a different request.", false)
			return
		case !errors.Is(err, wal.ErrNotFound):
			a.unavailable(w, "read idempotency record", err)
			return
		}
		idem = &wal.IdempotencyRecord{Key: key, RequestDigest: digest}
		stale = rec.PreflightID
	}
	// The deadline is checked after the idempotency lookup: a retry of a
	// recorded effect gets the recorded outcome (seed 003), even late.
	if env != nil && !env.Deadline.IsZero() && !now.Before(env.Deadline) {
		a.fail(w, http.StatusBadRequest, CodeDeadlineExceeded, "/context/request/deadlineUtc", "The request deadline has already passed.", false)
		return
	}

	tenant := ""
	if env != nil {
		tenant = env.TenantIDRef
	}
	sessionKey, hasSession := req.SessionKey(tenant)
	attempt, exhausted := 1, false
	if hasSession {
		// A client that has gone, or has waited past what it can still be
		// answered in, is not decided for: its attempt would be spent on
		// an answer nobody reads.
		waitCtx := r.Context()
		if a.o.SessionWait > 0 {
			var cancel context.CancelFunc
			waitCtx, cancel = context.WithDeadline(waitCtx, start.Add(a.o.SessionWait))
			defer cancel()
		}
		unlock, err := a.o.Store.LockSession(waitCtx, sessionKey)
		if err != nil {
			a.fail(w, http.StatusServiceUnavailable, CodeVerifierUnavailable, "", "Other submissions of this repair session are being decided; nothing was recorded, retry.", true)
			return
		}
		defer unlock()
		s, err := a.o.Store.Session(r.Context(), sessionKey)
		if err != nil {
			a.unavailable(w, "read repair session", err)
			return
		}
		// The budget opens with the session's first repair_required
		// (SPEC §3.6): from then on max_repair_attempts more submissions.
		attempt = s.Attempts + 1
		exhausted = s.RepairFrom > 0 && attempt > s.RepairFrom+a.o.MaxRepairAttempts
	}

	bundle := a.o.Bundle()
	if bundle == nil {
		a.unavailable(w, "no policy bundle loaded", errors.New("bundle missing"))
		return
	}
	var d *preflight.Decision
	switch {
	case exhausted:
		d = preflight.NotEvaluated(preflight.ReasonRepairExhausted, attempt, req, env, now, a.o.BindingWindow)
	default:
		d, err = a.o.Verifier.Evaluate(r.Context(), preflight.Input{Request: req, Envelope: env,
			Governance: bundle.Governance(), Clauses: bundle.Clauses(), Attempt: attempt})
		if err != nil {
			a.unavailable(w, "evaluate preflight", err)
			return
		}
		if !hasSession {
			denyWith(d, preflight.ReasonSessionMetadataMissing)
		}
	}
	if !dryRun {
		d.PreflightID, d.AuditID = a.o.NewPreflightID(), a.o.NewAuditID()
	}
	out, err := d.CanonicalJSON()
	if err != nil {
		a.unavailable(w, "encode decision", err)
		return
	}
	if !dryRun {
		expires, _ := time.Parse(time.RFC3339Nano, d.Eligibility.ExpiresAt)
		b, err := preflight.BindingOf(req, d, expires)
		if err != nil {
			a.unavailable(w, "bind decision", err)
			return
		}
		if env != nil {
			b.Tenant = env.TenantIDRef
		}
		attrs := map[string]any{"request_digest": digest, "attempt": d.Attempt, "reason": d.Reason,
			"bundle_revision": bundle.Revision(), "dry_run": false}
		// The explain page shows the intent; compaction finds a repair
		// session's attempt count under session_key, the key it was counted
		// under (frames from before the key held the actor have only
		// session_id and plan_hash).
		attrs["intent_summary"] = req.Intent.Summary
		if req.Intent.PlanHash != "" {
			attrs["plan_hash"] = req.Intent.PlanHash
		}
		if req.Context.Actor.SessionID != "" {
			attrs["session_id"] = req.Context.Actor.SessionID
		}
		if hasSession {
			attrs["session_key"] = sessionKey
		}
		if a.o.StoreRawRequests {
			attrs["request"] = json.RawMessage(body)
		}
		if idem != nil {
			idem.PreflightID = d.PreflightID
		}
		at, err := time.Parse(time.RFC3339Nano, d.DecidedAt)
		if err != nil {
			at = now
		}
		rec := wal.PreflightRecord{Binding: b, Decision: out, Time: at, Attrs: attrs, Idempotency: idem,
			IdempotencyReplaces: stale}
		if hasSession {
			rec.SessionKey, rec.SessionAttempt = sessionKey, attempt
		}
		if _, err := a.o.Store.RecordPreflight(r.Context(), rec); err != nil {
			a.unavailable(w, "record preflight", err)
			return
		}
		if a.o.ApprovalsRequested != nil && b.NeedsApproval() {
			a.o.ApprovalsRequested(r.Context(), &b)
		}
	}
	if a.o.Observer != nil {
		a.o.Observer.Preflight(d.Outcome, d.Reason, d.Attempt, time.Since(start))
	}
	tracing.AnnotatePreflight(r.Context(), d, bundle.Revision())
	if !a.o.NoDecisionLog {
		a.o.Logger.InfoContext(r.Context(), "preflight decided", "audit_id", d.AuditID, "preflight_id", d.PreflightID,
			"outcome", string(d.Outcome), "reason", d.Reason, "attempt", d.Attempt, "dry_run", dryRun)
	}
	w.Header().Set("Content-Type", contentTypeJSON)
	w.WriteHeader(http.StatusOK)
	w.Write(out)
}

// idempotencyKey scopes the envelope's key by tenant and actor (SPEC §3.4).
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

func idempotencyKey(env *envelope.Envelope, req *preflight.Request) string {
	actor := env.ActorIDRef
	if actor == "" {
		actor = req.Context.Actor.ID
	}
	b, _ := json.Marshal([3]string{env.TenantIDRef, actor, env.IdempotencyKey})
	return string(b)
}

// replay answers with the recorded decision of an idempotency key.
func replay(w http.ResponseWriter, d []byte) {
	w.Header().Set("Content-Type", contentTypeJSON)
	w.Header().Set(headerIdempotentReplayed, "true")
	w.WriteHeader(http.StatusOK)
	w.Write(d)
}

func (a *API) unavailable(w http.ResponseWriter, op string, err error) {
	a.o.Logger.Error("preflight cannot be decided", "op", op, "err", err)
	a.fail(w, http.StatusServiceUnavailable, CodeVerifierUnavailable, "", "The verifier cannot decide right now; nothing was recorded.", true)
}

// getPreflight returns a stored decision, byte for byte.
func (a *API) getPreflight(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	tenant, all, ok := a.authorize(r)
	if !ok {
		a.fail(w, http.StatusUnauthorized, CodeUnauthorized, "", "A valid bearer token is required.", false)
		return
	}
	// The binding (its tenant) and the decision bytes are read apart, as the
	// WAL keeps them: a compact record for the gate, the frame for the bytes.
	// Another tenant's decision is not read at all.
	var decision []byte
	b, err := a.o.Store.Binding(r.Context(), id)
	if err == nil && (all || b.Tenant == tenant) {
		decision, err = a.o.Store.Decision(r.Context(), id)
	}
	if errors.Is(err, wal.ErrNotFound) || (err == nil && !all && b.Tenant != tenant) {
		a.fail(w, http.StatusNotFound, CodeNotFound, "", "No preflight decision has this id.", false)
		return
	}
	if err != nil {
		a.unavailable(w, "read preflight", err)
		return
	}
	w.Header().Set("Content-Type", contentTypeJSON)
	w.WriteHeader(http.StatusOK)
	w.Write(decision)
}

// getAudit returns the audit join of SPEC §9.
func (a *API) getAudit(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	tenant, all, ok := a.authorize(r)
	if !ok {
		a.fail(w, http.StatusUnauthorized, CodeUnauthorized, "", "A valid bearer token is required.", false)
		return
	}
	kinds, msg := auditKindsOf(r.URL.Query()["include"])
	if msg != "" {
		a.fail(w, http.StatusBadRequest, CodeMalformedRequest, "", msg, false)
		return
	}
	frames, err := a.o.Log.AuditFramesOf(r.Context(), id, kinds)
	if err != nil {
		a.unavailable(w, "read audit frames", err)
		return
	}
	if !all && len(frames) > 0 && !framesInTenant(frames, tenant) {
		frames = nil
	}
	if len(frames) == 0 {
		a.fail(w, http.StatusNotFound, CodeNotFound, "", "No frames have this audit id.", false)
		return
	}
	// HTML escaping stays off so each frame's attrs are the bytes its hash
	// covers, and a client can check the chain from this answer.
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(map[string]any{"audit_id": id, "frames": frames}); err != nil {
		a.unavailable(w, "encode audit frames", err)
		return
	}
	w.Header().Set("Content-Type", contentTypeJSON)
	w.WriteHeader(http.StatusOK)
	w.Write(bytes.TrimSuffix(body.Bytes(), []byte("\n")))
}

// KindOutcome is the frame kind of a tool outcome (SPEC §12), joined with
// include=outcome.
const KindOutcome = "autonomy.outcome"

// auditKindsOf reads the include parameter of an audit join: outcome,
// approval or all, comma-separated or repeated, added to the default
// kinds; another value is refused with the message to answer.
func auditKindsOf(include []string) ([]string, string) {
	kinds := slices.Clone(wal.DefaultAuditKinds)
	add := func(k string) {
		if !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	for _, v := range include {
		for name := range strings.SplitSeq(v, ",") {
			switch strings.TrimSpace(name) {
			case "outcome":
				add(KindOutcome)
			case "approval":
				add(wal.KindApproval)
			case "all":
				add(KindOutcome)
				add(wal.KindApproval)
			default:
				return nil, "include must name outcome, approval or all."
			}
		}
	}
	return kinds, ""
}

func (a *API) authorize(r *http.Request) (tenant string, all, ok bool) {
	if a.o.Access == nil {
		return "", true, true
	}
	return a.o.Access.Authorize(r)
}

// framesInTenant reports whether the audit id's preflight belongs to tenant.
// An audit id with no preflight frame (a call made without one) belongs to
// no tenant.
func framesInTenant(frames []wal.Frame, tenant string) bool {
	for _, f := range frames {
		if f.Kind != wal.KindPreflight {
			continue
		}
		var t string
		if _, err := f.Attr("tenant", &t); err == nil && t == tenant {
			return true
		}
		return false
	}
	return tenant == ""
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
