package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// Approver is the holder of a bearer token as the approvals API sees it.
type Approver struct {
	// Name is the token entry's name, recorded with every decision.
	Name string
	// Tenant is the token's tenant; All when it may act on every tenant.
	Tenant string
	All    bool
	// Roles are the authorities the holder has.
	Roles []string
	// Subject is the holder's actor id ("" when the tokens file names none).
	Subject string
}

// mayDecide reports whether ap holds one of a's authorities in a's tenant.
func (ap *Approver) mayDecide(a *wal.Approval) bool {
	if !ap.All && ap.Tenant != a.Tenant {
		return false
	}
	for _, r := range ap.Roles {
		if slices.Contains(a.Authorities, r) {
			return true
		}
	}
	return false
}

// isActor reports whether ap is the person whose step a is.
func (ap *Approver) isActor(a *wal.Approval) bool {
	return ap.Subject != "" && (ap.Subject == a.ActorID || ap.Subject == a.ActorRef)
}

// Approvers tells who presents a request to the approvals API and to
// POST /v1/outcome.
type Approvers interface {
	// Approver returns the holder of the request's bearer token; ok is
	// false without a valid one.
	Approver(r *http.Request) (ap Approver, ok bool)
}

// ApprovalObserver is told about approvals; metrics implement it.
type ApprovalObserver interface {
	ApprovalDecided(state string, waited time.Duration)
}

// ApprovalView is an approval as the API answers it.
type ApprovalView struct {
	PreflightID string   `json:"preflight_id"`
	StepID      string   `json:"step_id"`
	AuditID     string   `json:"audit_id"`
	Tenant      string   `json:"tenant,omitempty"`
	ActorID     string   `json:"actor_id"`
	ToolKind    string   `json:"tool_kind"`
	ArgsDigest  string   `json:"args_digest"`
	Authorities []string `json:"authorities"`
	RequestedAt string   `json:"requested_at"`
	ExpiresAt   string   `json:"expires_at"`
	// State is pending, approved, rejected or expired.
	State     string   `json:"state"`
	Decision  string   `json:"decision,omitempty"`
	Approver  string   `json:"approver,omitempty"`
	Roles     []string `json:"roles,omitempty"`
	Comment   string   `json:"comment,omitempty"`
	DecidedAt string   `json:"decided_at,omitempty"`
}

// ViewOf is the answer for a at now.
func ViewOf(a *wal.Approval, now time.Time) ApprovalView {
	v := ApprovalView{PreflightID: a.PreflightID, StepID: a.StepID, AuditID: a.AuditID, Tenant: a.Tenant,
		ActorID: a.ActorID, ToolKind: a.ToolKind, ArgsDigest: a.ArgsDigest, Authorities: a.Authorities,
		RequestedAt: a.RequestedAt.UTC().Format(time.RFC3339Nano), ExpiresAt: a.ExpiresAt.UTC().Format(time.RFC3339Nano),
		State: a.StateAt(now)}
	if v.Authorities == nil {
		v.Authorities = []string{}
	}
	if d := a.Decided; d != nil {
		v.Decision, v.Approver, v.Roles, v.Comment = d.Decision, d.Approver, d.Roles, d.Comment
		v.DecidedAt = d.DecidedAt.UTC().Format(time.RFC3339Nano)
	}
	return v
}

// ApprovalList is the answer of GET /v1/approvals.
type ApprovalList struct {
	Approvals []ApprovalView `json:"approvals"`
	// NextCursor, when set, is the cursor parameter of the next page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// Page sizes of GET /v1/approvals.
const (
	DefaultApprovalPage = 50
	MaxApprovalPage     = 500
)

func (a *API) routeApprovals() {
	// POST /v1/approvals/{preflight_id}/{step_id} is routed by ServeHTTP
	// (stepApproval), on the path as sent.
	a.mux.HandleFunc("GET /v1/approvals", a.listApprovals)
	a.mux.HandleFunc("/v1/approvals", a.methodNotAllowed("GET, HEAD"))
	a.mux.HandleFunc("/v1/approvals/", func(w http.ResponseWriter, _ *http.Request) {
		// /v1/approvals/{id} alone, or a path past the step: no endpoint.
		a.fail(w, http.StatusNotFound, preflight.CodeNotFound, "", "No endpoint has this path.", false)
	})
}

// IsStepApproval reports whether r's path names one step's approval,
// /v1/approvals/{preflight_id}/{step_id}: a path the API serves as it was
// sent, since cleaning it could make it another path.
func IsStepApproval(r *http.Request) bool {
	_, _, ok := stepApproval(r)
	return ok
}

// stepApproval reads /v1/approvals/{preflight_id}/{step_id} from r's
// escaped path, each segment unescaped, and reports whether the path is
// one. Plan step ids are any non-empty string: "." and "..", or one
// holding an escaped "/" (a%2F..), name a step, where a path cleaner or a
// router matching the decoded path would see another path.
func stepApproval(r *http.Request) (id, step string, ok bool) {
	rest, found := strings.CutPrefix(r.URL.EscapedPath(), "/v1/approvals/")
	if !found {
		return "", "", false
	}
	rawID, rawStep, found := strings.Cut(rest, "/")
	if !found || strings.Contains(rawStep, "/") {
		return "", "", false
	}
	id, err1 := url.PathUnescape(rawID)
	step, err2 := url.PathUnescape(rawStep)
	if err1 != nil || err2 != nil || id == "" || step == "" {
		return "", "", false
	}
	return id, step, true
}

// postApproval records one person's decision on one step.
func (a *API) postApproval(w http.ResponseWriter, r *http.Request) {
	ap, ok := a.bearer(w, r, "decide an approval")
	if !ok {
		return
	}
	if !jsonMediaType(r.Header) {
		a.fail(w, http.StatusUnsupportedMediaType, preflight.CodeUnsupportedMediaType, "", "The request body must be JSON: send Content-Type: application/json.", false)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, min(a.o.MaxBodyBytes, 64<<10)))
	if err != nil {
		var over *http.MaxBytesError
		if errors.As(err, &over) {
			a.fail(w, http.StatusRequestEntityTooLarge, preflight.CodeRequestTooLarge, "", "The request body is too large for an approval.", false)
			return
		}
		a.fail(w, http.StatusBadRequest, preflight.CodeMalformedRequest, "", "The request body could not be read.", false)
		return
	}
	in, rerr := preflight.DecodeApprovalBody(body)
	if rerr != nil {
		a.fail(w, http.StatusBadRequest, rerr.Code, rerr.Path, rerr.Message, false)
		return
	}
	preflightID, stepID := r.PathValue("preflight_id"), r.PathValue("step_id")
	rec, err := a.o.Store.Approval(r.Context(), preflightID, stepID)
	if err == nil && !ap.All && rec.Tenant != ap.Tenant {
		err = wal.ErrNotFound // another tenant's approval: not even its existence is told
	}
	switch {
	case errors.Is(err, wal.ErrNotFound):
		a.fail(w, http.StatusNotFound, preflight.CodeNotFound, "", "No step of this preflight waits for an approval.", false)
		return
	case err != nil:
		a.approvalUnavailable(w, "read approval", err)
		return
	case !ap.mayDecide(&rec):
		a.fail(w, http.StatusForbidden, preflight.CodeApproverNotAuthorized, "", "The token holds none of the step's authorities.", false)
		return
	case ap.isActor(&rec):
		a.fail(w, http.StatusConflict, preflight.CodeApproverIsActor, "", "The approver is the preflight's actor; someone else must decide.", false)
		return
	}
	now := a.o.Now()
	decided, err := a.o.Store.DecideApproval(r.Context(), wal.ApprovalInput{PreflightID: preflightID, StepID: stepID,
		ApprovalDecision: wal.ApprovalDecision{Decision: in.Decision, Approver: ap.Name, Roles: ap.Roles,
			Subject: ap.Subject, Comment: in.Comment, DecidedAt: now}, Replica: a.o.Replica})
	switch {
	case errors.Is(err, wal.ErrApprovalDecided):
		a.fail(w, http.StatusConflict, preflight.CodeApprovalAlreadyDecided, "", "This step was already "+decided.State+".", false)
		return
	case errors.Is(err, wal.ErrApprovalExpired):
		a.fail(w, http.StatusGone, preflight.CodeApprovalExpired, "", "The time to decide this approval has passed.", false)
		return
	case errors.Is(err, wal.ErrNotFound):
		a.fail(w, http.StatusNotFound, preflight.CodeNotFound, "", "No step of this preflight waits for an approval.", false)
		return
	case err != nil:
		a.approvalUnavailable(w, "record approval", err)
		return
	}
	if o, ok := a.o.Observer.(ApprovalObserver); ok {
		o.ApprovalDecided(decided.State, now.Sub(decided.RequestedAt))
	}
	a.o.Logger.InfoContext(r.Context(), "approval decided", "audit_id", decided.AuditID, "preflight_id", preflightID,
		"step_id", stepID, "state", decided.State, "approver", ap.Name)
	writeJSON(w, http.StatusOK, ViewOf(&decided, now))
}

func (a *API) approvalUnavailable(w http.ResponseWriter, op string, err error) {
	a.o.Logger.Error("approval cannot be served", "op", op, "err", err)
	a.fail(w, http.StatusServiceUnavailable, preflight.CodeVerifierUnavailable, "", "Approvals cannot be read or recorded right now; retry (a decision already recorded answers 409 approval-already-decided).", true)
}

// listApprovals answers GET /v1/approvals?state=pending|decided: for
// pending, what the token may decide (its tenant, one of its roles, not
// its own steps); for decided, its tenant's decisions; newest first.
func (a *API) listApprovals(w http.ResponseWriter, r *http.Request) {
	tenant, all, ok := a.authorize(r)
	if !ok {
		a.fail(w, http.StatusUnauthorized, preflight.CodeUnauthorized, "", "A valid bearer token is required.", false)
		return
	}
	var ap *Approver
	if a.o.Approvers != nil {
		if got, ok := a.o.Approvers.Approver(r); ok {
			ap = &got
		}
	}
	q, msg := approvalQueryOf(r.URL.RawQuery)
	if msg != "" {
		a.fail(w, http.StatusBadRequest, preflight.CodeMalformedRequest, "", msg, false)
		return
	}
	now := a.o.Now()
	pending := q.state == wal.ApprovalPending
	query := wal.ApprovalQuery{After: q.after, Limit: q.limit, Match: func(x *wal.Approval) bool {
		if !all && x.Tenant != tenant {
			return false
		}
		st := x.StateAt(now)
		if pending {
			return st == wal.ApprovalPending && (ap == nil || (ap.mayDecide(x) && !ap.isActor(x)))
		}
		return st == wal.ApprovalApproved || st == wal.ApprovalRejected
	}}
	list, next, err := a.o.Store.ListApprovals(r.Context(), query)
	if err != nil {
		a.approvalUnavailable(w, "list approvals", err)
		return
	}
	out := ApprovalList{Approvals: make([]ApprovalView, 0, len(list))}
	for i := range list {
		out.Approvals = append(out.Approvals, ViewOf(&list[i], now))
	}
	if next != "" {
		out.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(next))
	}
	writeJSON(w, http.StatusOK, out)
}

type approvalQuery struct {
	state string
	after string
	limit int
}

// approvalQueryOf reads state (pending, the default, or decided), limit
// (1 to MaxApprovalPage) and cursor; anything else, or a parameter given
// twice, is refused with the message to answer.
func approvalQueryOf(raw string) (approvalQuery, string) {
	q := approvalQuery{state: wal.ApprovalPending, limit: DefaultApprovalPage}
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return q, "The query string does not parse."
	}
	for name, vs := range vals {
		if len(vs) != 1 {
			return q, "The parameter " + name + " is given more than once."
		}
		v := vs[0]
		switch name {
		case "state":
			switch v {
			case "pending":
			case "decided":
				q.state = "decided"
			default:
				return q, "state must be pending or decided."
			}
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxApprovalPage {
				return q, "limit must be an integer from 1 to " + strconv.Itoa(MaxApprovalPage) + "."
			}
			q.limit = n
		case "cursor":
			// A cursor names the last approval of a page: its preflight
			// id, a NUL, its step id (wal.ApprovalKey).
			b, err := base64.RawURLEncoding.DecodeString(v)
			if i := bytes.IndexByte(b, 0); err != nil || i <= 0 || i == len(b)-1 {
				return q, "cursor is not one this API gave."
			}
			q.after = string(b)
		default:
			return q, "Unknown parameter " + name + " (want state, limit, cursor)."
		}
	}
	return q, ""
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, preflight.CodeVerifierUnavailable, "", "The answer could not be encoded.", true)
		return
	}
	w.Header().Set("Content-Type", contentTypeJSON)
	w.WriteHeader(status)
	w.Write(b)
}

// PendingNotice is the JSON body the approvals webhook receives for a
// recorded preflight whose steps wait for approvals.
type PendingNotice struct {
	// Event is always "approvals.pending".
	Event       string         `json:"event"`
	PreflightID string         `json:"preflight_id"`
	AuditID     string         `json:"audit_id"`
	Tenant      string         `json:"tenant,omitempty"`
	ActorID     string         `json:"actor_id"`
	Approvals   []ApprovalView `json:"approvals"`
}

// NoticeOf is the notice for binding b, its approvals recorded as
// requested at at, as GET /v1/approvals lists them.
func NoticeOf(b *preflight.Binding, at time.Time) PendingNotice {
	n := PendingNotice{Event: "approvals.pending", PreflightID: b.PreflightID, AuditID: b.AuditID,
		Tenant: b.Tenant, ActorID: b.ActorID, Approvals: []ApprovalView{}}
	for _, s := range b.Steps {
		if s.Approval == nil {
			continue
		}
		a := wal.Approval{PreflightID: b.PreflightID, StepID: s.ID, AuditID: b.AuditID, Tenant: b.Tenant,
			ActorID: b.ActorID, ToolKind: s.Kind, ArgsDigest: s.ArgsDigest, Authorities: s.Approval.Authorities,
			RequestedAt: at.UTC(), ExpiresAt: s.Approval.ExpiresAt, State: wal.ApprovalPending}
		n.Approvals = append(n.Approvals, ViewOf(&a, at))
	}
	return n
}

// bearer is the token entry of a request that must carry one to do what;
// without a valid token it answers 401 with the Bearer challenge.
func (a *API) bearer(w http.ResponseWriter, r *http.Request, what string) (Approver, bool) {
	if a.o.Approvers != nil {
		if ap, ok := a.o.Approvers.Approver(r); ok {
			return ap, true
		}
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="autonomy"`)
	a.fail(w, http.StatusUnauthorized, preflight.CodeUnauthorized, "", "A valid bearer token is required to "+what+".", false)
	return Approver{}, false
}
