package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/contractrefine/autonomy/internal/state"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/preflight/submit"
	"github.com/contractrefine/autonomy/wal"
)

// Log is where the audit join reads the frames of an audit id.
type Log interface {
	AuditFrames(ctx context.Context, auditID string) ([]wal.Frame, error)
	AuditFramesOf(ctx context.Context, auditID string, kinds []string) ([]wal.Frame, error)
}

var _ Log = (*wal.DB)(nil)

// Observer is told about refused requests; metrics implement it.
type Observer interface {
	APIError(code string)
}

// Access decides who may read stored records (docs/SECURITY.md). A nil Access lets
// everyone read everything.
type Access interface {
	// Authorize returns the tenant scope of the request's credentials: ok is
	// false when the request may not read at all; all is true when it may
	// read every tenant.
	Authorize(r *http.Request) (tenant string, all bool, ok bool)
}

// Options configures the API. Zero values mean the defaults.
type Options struct {
	// Submit decides the preflights POSTed.
	Submit *submit.Service
	// Store holds the bindings and decisions GET reads (internal/state).
	Store state.Store
	// Log answers the audit join.
	Log Log
	// MaxBodyBytes is http.max_body_bytes (default 1 MiB).
	MaxBodyBytes int64
	Logger       *slog.Logger
	Observer     Observer
	Access       Access
	// Approvers tells who presents a decision to the approvals API
	// (docs/API.md); nil refuses every decision.
	Approvers Approvers
	// Outcomes judges the tool runtimes' own reports (POST /v1/outcome);
	// nil answers every report 404.
	Outcomes Reporter
	// Replica names this replica in the frames it writes.
	Replica string
	// Now is the approvals API's clock.
	Now func() time.Time
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
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
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
	a.routeOutcome()
	return a
}

// ServeHTTP routes the API's paths.
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Answers carry agents' text (args, summaries) as JSON: no browser may
	// sniff them as HTML, and no cache along the way may keep a record.
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	if id, step, ok := stepApproval(r); ok {
		if r.Method != http.MethodPost {
			a.methodNotAllowed("POST")(w, r)
			return
		}
		r.SetPathValue("preflight_id", id)
		r.SetPathValue("step_id", step)
		a.postApproval(w, r)
		return
	}
	a.mux.ServeHTTP(w, r)
}

func (a *API) methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a.o.Observer != nil {
			a.o.Observer.APIError(preflight.CodeMethodNotAllowed)
		}
		WriteMethodNotAllowed(w, r, allow)
	}
}

func (a *API) notFound(w http.ResponseWriter, r *http.Request) {
	a.fail(w, http.StatusNotFound, preflight.CodeNotFound, "", "No record has this path.", false)
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
func jsonMediaType(h http.Header) bool {
	values := h.Values("Content-Type")
	switch len(values) {
	case 0:
		return true
	case 1:
	default:
		return false // two declarations: which one the body follows is not known
	}
	mt, params, err := mime.ParseMediaType(values[0])
	if err != nil {
		return false
	}
	// JSON is UTF-8 (RFC 8259); a body declared in another charset would
	// be read as something it is not.
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// queryProblem says what is wrong with a query dryRunOf refused: a
// parameter other than dry_run is named as unknown, not as a repeated
// dry_run.
func queryProblem(rawQuery string) string {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "The query string does not parse: " + err.Error() + "."
	}
	for _, name := range slices.Sorted(maps.Keys(q)) {
		if name != "dry_run" {
			return fmt.Sprintf("Unknown query parameter %q: POST /v1/preflight takes only dry_run.", name)
		}
	}
	if len(q["dry_run"]) != 1 {
		return "The dry_run parameter is given more than once; give it once."
	}
	return "The dry_run parameter must be true or false (or 1, t, 0, f)."
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
	if e := a.o.Submit.Enabled(); e != nil {
		a.refuse(w, e)
		return
	}
	// The declared Content-Type is not read: the body decides. A body that
	// is not a PreflightRequest in JSON is 400 malformed-request, as the
	// spec's error table has it, before anything is recorded or spent.
	tooLarge := func() {
		a.fail(w, http.StatusRequestEntityTooLarge, preflight.CodeRequestTooLarge, "", "The request body is larger than http.max_body_bytes.", false)
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
		a.fail(w, http.StatusBadRequest, preflight.CodeMalformedRequest, "", "The request body could not be read.", false)
		return
	}
	dryRun, ok := dryRunOf(r.URL.RawQuery)
	if !ok {
		a.fail(w, http.StatusBadRequest, preflight.CodeMalformedRequest, "", queryProblem(r.URL.RawQuery), false)
		return
	}
	ans, e := a.o.Submit.Submit(r.Context(), submit.Submission{Body: body, DryRun: dryRun, Arrived: start})
	if e != nil {
		a.refuse(w, e)
		return
	}
	w.Header().Set("Content-Type", contentTypeJSON)
	if ans.Replayed {
		w.Header().Set(headerIdempotentReplayed, "true")
	}
	w.WriteHeader(http.StatusOK)
	w.Write(ans.Body)
}

// refuse answers a submission that got no decision.
func (a *API) refuse(w http.ResponseWriter, e *submit.Error) {
	errs := make([]apiError, len(e.Fields))
	for i, f := range e.Fields {
		errs[i] = apiError{Code: f.Code, Path: f.Path, Message: f.Message, Retryable: e.Retryable}
	}
	if a.o.Observer != nil {
		a.o.Observer.APIError(errs[0].Code)
	}
	writeErrors(w, e.Status, errs)
}

func (a *API) unavailable(w http.ResponseWriter, op string, err error) {
	a.o.Logger.Error("preflight cannot be decided", "op", op, "err", err)
	a.fail(w, http.StatusServiceUnavailable, preflight.CodeVerifierUnavailable, "", "The verifier cannot decide right now; nothing was recorded.", true)
}

// getPreflight returns a stored decision, byte for byte.
func (a *API) getPreflight(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	tenant, all, ok := a.authorize(r)
	if !ok {
		a.fail(w, http.StatusUnauthorized, preflight.CodeUnauthorized, "", "A valid bearer token is required.", false)
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
		a.fail(w, http.StatusNotFound, preflight.CodeNotFound, "", "No preflight decision has this id.", false)
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

// getAudit returns the audit join (docs/API.md, GET /v1/audit/{audit_id}).
func (a *API) getAudit(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	tenant, all, ok := a.authorize(r)
	if !ok {
		a.fail(w, http.StatusUnauthorized, preflight.CodeUnauthorized, "", "A valid bearer token is required.", false)
		return
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		// url.Values would drop the bad pair: ?include=all;x must not
		// answer with fewer frames than the client asked for.
		a.fail(w, http.StatusBadRequest, preflight.CodeMalformedRequest, "", "The query string does not parse: "+err.Error()+".", false)
		return
	}
	for _, name := range slices.Sorted(maps.Keys(q)) {
		if name != "include" {
			a.fail(w, http.StatusBadRequest, preflight.CodeMalformedRequest, "",
				fmt.Sprintf("Unknown query parameter %q: GET /v1/audit takes only include.", name), false)
			return
		}
	}
	kinds, ok := wal.AuditKinds(q["include"])
	if !ok {
		a.fail(w, http.StatusBadRequest, preflight.CodeMalformedRequest, "", "include must name outcome, approval or all.", false)
		return
	}
	frames, err := a.o.Log.AuditFramesOf(r.Context(), id, kinds)
	if err != nil {
		a.unavailable(w, "read audit frames", err)
		return
	}
	if !all && len(frames) > 0 && !wal.AuditInTenant(frames, tenant) {
		frames = nil
	}
	if len(frames) == 0 {
		a.fail(w, http.StatusNotFound, preflight.CodeNotFound, "", "No frames have this audit id.", false)
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

func (a *API) authorize(r *http.Request) (tenant string, all, ok bool) {
	if a.o.Access == nil {
		return "", true, true
	}
	return a.o.Access.Authorize(r)
}
