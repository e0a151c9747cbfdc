package binding

import (
	"context"
	"errors"
	"fmt"

	"github.com/contractrefine/autonomy/wal"
)

// Errors of a runtime's own report (Gate.Report); each is an answer of
// POST /v1/outcome.
var (
	// ErrNoCall: no gated call the gate let through has the report's audit
	// id and request id (or it is another tenant's).
	ErrNoCall = errors.New("binding: no allowed gated call has this audit id and request id")
	// ErrOutcomeReported: the call's outcome is already recorded, by the
	// proxy that saw the response or by an earlier report.
	ErrOutcomeReported = errors.New("binding: the call's outcome is already recorded")
	// ErrReportMismatch: the report names a preflight, a step, a tool kind
	// or args other than those the gate allowed the call with.
	ErrReportMismatch = errors.New("binding: the report does not match the allowed call")
	// ErrReportRequest: the report's request cannot be read as the gate
	// reads a gated body.
	ErrReportRequest = errors.New("binding: the report's request cannot be read")
	// ErrReportUnrecorded: the outcome could not be judged and recorded.
	ErrReportUnrecorded = errors.New("binding: the outcome was not recorded")
)

// Report is a tool runtime's own account of a call's response (POST
// /v1/outcome): weaker evidence than a proxy's, since the runtime judges
// itself, and recorded as such (reported_by runtime, reporter the token).
type Report struct {
	AuditID, RequestID string
	// PreflightID and StepID, when set, must be the allowed call's.
	PreflightID, StepID string
	// Request is the gated request body as the runtime received it; its
	// kind and args must be the ones the gate allowed.
	Request []byte
	Status  int
	// Result is the response body the runtime returns.
	Result []byte
	// Reporter names the token the report came with.
	Reporter string
	// Tenant is the reporter's tenant; AllTenants lets it report on every
	// tenant's calls. A call bound to no preflight belongs to no tenant.
	Tenant     string
	AllTenants bool
}

// MismatchError is an ErrReportMismatch naming the report's field.
type MismatchError struct {
	// Field is the report member that differs: preflight_id, step_id or
	// request.
	Field  string
	Detail string
}

func (e *MismatchError) Error() string { return ErrReportMismatch.Error() + ": " + e.Detail }

// Unwrap makes errors.Is(err, ErrReportMismatch) hold.
func (e *MismatchError) Unwrap() error { return ErrReportMismatch }

// Report judges a runtime's report on the same path as a proxy's response
// (Gate.Outcome), once per allowed gated call: the call is found from its
// decision frame, the report must match it, and a call whose outcome is
// already recorded is ErrOutcomeReported. The verdict's frame is durable
// when it returns with a nil error.
func (g *Gate) Report(ctx context.Context, rep *Report) (Verdict, error) {
	if g.o.Mode == ModeDisabled || g.outcomes.store == nil {
		return Verdict{}, ErrNoCall // no ladder ran: no call was recorded as allowed
	}
	key := rep.AuditID + "\x00" + rep.RequestID
	o := &g.outcomes
	o.reportsMu.Lock()
	busy := o.reports[key]
	o.reports[key] = true
	o.reportsMu.Unlock()
	if busy {
		return Verdict{}, ErrOutcomeReported
	}
	defer func() {
		o.reportsMu.Lock()
		delete(o.reports, key)
		o.reportsMu.Unlock()
	}()

	r := &Request{Method: "POST", Path: g.o.Path, Body: rep.Request,
		Headers: map[string]string{HeaderAuditID: rep.AuditID, HeaderRequestID: rep.RequestID}}
	c := &call{req: r, requestID: rep.RequestID}
	d, err := g.decisionFor(ctx, &Exchange{Request: r}, c)
	switch {
	case errors.Is(err, errNoDecision):
		return Verdict{}, ErrNoCall
	case err != nil:
		return Verdict{}, fmt.Errorf("%w: find the call: %v", ErrReportUnrecorded, err)
	}
	if ok, err := g.inTenant(ctx, rep, d.PreflightID); err != nil {
		return Verdict{}, fmt.Errorf("%w: read the preflight: %v", ErrReportUnrecorded, err)
	} else if !ok {
		return Verdict{}, ErrNoCall // another tenant's call: not even its existence is told
	}
	if err := g.matchReport(rep, d, c); err != nil {
		return Verdict{}, err
	}
	has, err := o.store.HasOutcome(ctx, d.AuditID, rep.RequestID)
	if err != nil {
		return Verdict{}, fmt.Errorf("%w: read the outcomes: %v", ErrReportUnrecorded, err)
	}
	if has {
		return Verdict{}, ErrOutcomeReported
	}
	v := g.Outcome(ctx, &Exchange{Request: r, Decision: d, ReportedBy: wal.ReporterRuntime, Reporter: rep.Reporter,
		Response: Response{Status: rep.Status, Body: rep.Result}})
	if v.Unrecorded || !v.Judged {
		return v, ErrReportUnrecorded
	}
	return v, nil
}

// inTenant reports whether the reporter may report on the call bound to
// preflightID.
func (g *Gate) inTenant(ctx context.Context, rep *Report, preflightID string) (bool, error) {
	if rep.AllTenants {
		return true, nil
	}
	if preflightID == "" {
		return false, nil
	}
	b, err := g.o.Store.Binding(ctx, preflightID)
	if errors.Is(err, wal.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return b.Tenant == rep.Tenant, nil
}

// matchReport checks the report against the allowed call d: the ids it
// names, and the request's kind and args (by the digest the decision
// frame recorded).
func (g *Gate) matchReport(rep *Report, d *Decision, c *call) error {
	switch {
	case rep.PreflightID != "" && rep.PreflightID != d.PreflightID:
		return &MismatchError{Field: "preflight_id", Detail: fmt.Sprintf("the call was allowed under preflight %q", d.PreflightID)}
	case rep.StepID != "" && rep.StepID != d.StepID:
		return &MismatchError{Field: "step_id", Detail: fmt.Sprintf("the call consumed step %q", d.StepID)}
	}
	if err := g.readCall(c); err != nil {
		return fmt.Errorf("%w: %v", ErrReportRequest, err)
	}
	if d.ToolKind != "" && c.kind != d.ToolKind {
		return &MismatchError{Field: "request", Detail: fmt.Sprintf("the request names tool kind %q, the allowed call %q", c.kind, d.ToolKind)}
	}
	if !c.argsAllowed(d) {
		return &MismatchError{Field: "request", Detail: "the request's args are not the args the gate allowed"}
	}
	return nil
}
