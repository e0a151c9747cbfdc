package httpapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/preflight"
)

// RoleOutcomeReporter is the role a token's entry must list for its holder
// (a tool runtime) to report its own results to POST /v1/outcome.
const RoleOutcomeReporter = "role:outcome-reporter"

// Reporter judges a runtime's report; *binding.Gate implements it.
type Reporter interface {
	Report(ctx context.Context, rep *binding.Report) (binding.Verdict, error)
}

var _ Reporter = (*binding.Gate)(nil)

// OutcomeAnswer is the 200 answer of POST /v1/outcome: the recorded
// outcome of a response the runtime may return.
type OutcomeAnswer struct {
	AuditID   string `json:"audit_id"`
	RequestID string `json:"request_id"`
	// Outcome is ok or violated; Reason as in the outcome frame.
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
	// Warning is true when a strict: false postcondition failed: the
	// runtime returns its result with x-autonomy-postcondition-warning.
	Warning    bool   `json:"warning"`
	ReportedBy string `json:"reported_by"`
}

func (a *API) routeOutcome() {
	a.mux.HandleFunc("POST /v1/outcome", a.postOutcome)
	a.mux.HandleFunc("/v1/outcome", a.methodNotAllowed("POST"))
}

// postOutcome records a tool runtime's own report of a call's result
// (docs/API.md, "POST /v1/outcome"). A result the call's clauses refuse in
// enforce mode is answered with the 502 and body of docs/API.md, for the
// runtime to return instead of its result.
func (a *API) postOutcome(w http.ResponseWriter, r *http.Request) {
	ap, ok := a.bearer(w, r, "report an outcome")
	if !ok {
		return
	}
	if !slices.Contains(ap.Roles, RoleOutcomeReporter) {
		a.fail(w, http.StatusForbidden, preflight.CodeReporterNotAuthorized, "", "The token's roles do not include "+RoleOutcomeReporter+".", false)
		return
	}
	if !jsonMediaType(r.Header) {
		a.fail(w, http.StatusUnsupportedMediaType, preflight.CodeUnsupportedMediaType, "", "The request body must be JSON: send Content-Type: application/json.", false)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.o.MaxBodyBytes))
	if err != nil {
		var over *http.MaxBytesError
		if errors.As(err, &over) {
			a.fail(w, http.StatusRequestEntityTooLarge, preflight.CodeRequestTooLarge, "", "The request body is larger than http.max_body_bytes.", false)
			return
		}
		a.fail(w, http.StatusBadRequest, preflight.CodeMalformedRequest, "", "The request body could not be read.", false)
		return
	}
	in, rerr := preflight.DecodeOutcomeReport(body)
	if rerr != nil {
		a.fail(w, http.StatusBadRequest, rerr.Code, rerr.Path, rerr.Message, false)
		return
	}
	if a.o.Outcomes == nil {
		a.fail(w, http.StatusNotFound, preflight.CodeNotFound, "", "No allowed gated call has this audit id and request id.", false)
		return
	}
	v, err := a.o.Outcomes.Report(r.Context(), &binding.Report{AuditID: in.AuditID, RequestID: in.RequestID,
		PreflightID: in.PreflightID, StepID: in.StepID, Request: in.Request, Status: in.Status, Result: in.Result,
		Reporter: ap.Name, Tenant: ap.Tenant, AllTenants: ap.All})
	var mismatch *binding.MismatchError
	switch {
	case errors.Is(err, binding.ErrNoCall):
		a.fail(w, http.StatusNotFound, preflight.CodeNotFound, "", "No allowed gated call has this audit id and request id.", false)
		return
	case errors.Is(err, binding.ErrOutcomeReported):
		a.fail(w, http.StatusConflict, preflight.CodeOutcomeAlreadyReported, "", "This call's outcome is already recorded; it is recorded once.", false)
		return
	case errors.As(err, &mismatch):
		a.fail(w, http.StatusConflict, preflight.CodeOutcomeMismatch, "/"+mismatch.Field, "The report does not match the allowed call: "+mismatch.Detail+".", false)
		return
	case errors.Is(err, binding.ErrReportRequest):
		a.fail(w, http.StatusBadRequest, preflight.CodeMalformedRequest, "/request", "The request cannot be read as the gate reads a tool call: "+err.Error()+".", false)
		return
	case err != nil:
		a.o.Logger.Error("outcome report not recorded", "audit_id", in.AuditID, "request_id", in.RequestID, "err", err)
		a.fail(w, http.StatusServiceUnavailable, preflight.CodeVerifierUnavailable, "", "The outcome cannot be judged or recorded right now; nothing was recorded.", true)
		return
	}
	w.Header().Set(binding.HeaderAuditID, v.AuditID)
	if !v.Release {
		w.Header().Set("Content-Type", contentTypeJSON)
		w.WriteHeader(v.Status)
		w.Write(v.Body)
		return
	}
	if v.Warning != "" {
		w.Header().Set(binding.HeaderPostconditionWarning, v.Warning)
	}
	writeJSON(w, http.StatusOK, OutcomeAnswer{AuditID: v.AuditID, RequestID: in.RequestID, Outcome: v.Attrs.Outcome,
		Reason: v.Attrs.Reason, Warning: v.Attrs.Warning, ReportedBy: v.Attrs.ReportedBy})
}
