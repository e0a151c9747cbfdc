package explain

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/contractrefine/autonomy/internal/canon"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// Page is what the explain template renders.
type Page struct {
	AuditID string
	// Preflight is nil when the audit id has tool decisions but no preflight
	// (calls made without a preflight id get an audit id of their own).
	Preflight *PreflightView
	Timeline  []Event
	// Pending are the steps that wait for a person's decision, each with
	// the form an approver decides it with; the handler fills it in.
	Pending []PendingApproval
	// Advisories counts the advisory failures, for the summary line.
	Advisories int
	// Outcomes counts the autonomy.outcome frames, for the summary line.
	Outcomes int
}

// Decisions counts the timeline's events that are not an outcome row of
// their own, for the summary line.
func (p *Page) Decisions() int {
	n := 0
	for i := range p.Timeline {
		if !p.Timeline[i].OutcomeOnly {
			n++
		}
	}
	return n
}

// PreflightView is the autonomy.preflight frame, decoded for reading.
type PreflightView struct {
	Seq            uint64
	Time           string
	PreflightID    string
	Intent         string
	PlanHash       string
	SessionID      string
	ActorID        string
	Tenant         string
	Outcome        string
	Reason         string
	Attempt        int
	ExpiresAt      string
	Allowed        bool
	BoundToolKinds []string
	BundleRevision string
	Contracts      []Row
	Clauses        []Row
	// Hints lists every row's repair hints, in row order.
	Hints []HintView
}

// Row is one contract or clause row.
type Row struct {
	Contract string
	Outcome  string
	Severity string
	Reason   string
	// State is "pass", "not_applicable", "blocking" or "advisory" (a failed
	// row, by severity); the template uses it as the row's class.
	State      string
	Violations []preflight.Violation
	// Evidence is the row's other evidence as compact JSON, "" when none.
	Evidence string
	Hints    []HintView
}

// Advisory reports whether the row is an advisory failure.
func (r Row) Advisory() bool { return r.State == "advisory" }

// HintView is one repair hint.
type HintView struct {
	Contract   string
	Field      string
	Suggestion string
	Bounded    bool
}

// Event is one autonomy.decision frame on the timeline.
type Event struct {
	Seq  uint64
	Time string
	// Offset is the time since the preflight, "" without one.
	Offset    string
	ToolKind  string
	StepID    string
	RequestID string
	Outcome   string
	Reason    string
	Mode      string
	Status    int
	// Enforced is false for a failure recorded but let through (advisory
	// mode); Advisory is the recorded advisory reason of such a call.
	Enforced bool
	Advisory string
	Method   string
	Path     string
	// Approval is set for an autonomy.approval frame: a person's decision.
	Approval *ApprovalEvent
	// Outcomes are the autonomy.outcome frames of this call, joined by
	// request id: what the tool answered and how its after-call clauses
	// judged it (usually one; a runtime's own report and the proxy's make
	// two).
	Outcomes []OutcomeView
	// OutcomeOnly marks an outcome frame whose request id matches no
	// decision on the page: it is a row of its own (Outcomes holds it),
	// never dropped.
	OutcomeOnly bool
}

// OutcomeView is an autonomy.outcome frame, decoded for reading.
type OutcomeView struct {
	Seq  uint64
	Time string
	// Offset is the time since the preflight, "" without one.
	Offset string
	// Outcome is ok or violated; Reason says which ("outcome: ok",
	// "clause: postcondition_violated", "outcome: output_contract_violated",
	// "outcome: unverified", …).
	Outcome string
	Reason  string
	// Enforced: the caller got the 502 instead of the tool's response.
	// Warning: only strict: false postconditions failed, and the response
	// was released with the warning header.
	Enforced bool
	Warning  bool
	Mode     string
	// Status is the tool's HTTP status; 0 when no response was seen.
	Status         int
	ResponseDigest string
	ResponseBytes  int64
	StepID         string
	ToolKind       string
	RequestID      string
	// ReportedBy is envoy, gateway or runtime; Reporter names the token of
	// a runtime's own report.
	ReportedBy string
	Reporter   string
	// Detail says why a response could not be judged.
	Detail string
	// Failed are the after-call clauses that did not hold.
	Failed []FailedClause
	// Effect is what became of the response (wal.OutcomeAttrs.Effect):
	// warning, enforced, advisory, or "" (ok: nothing to enforce).
	Effect string
}

// Class is the outcome's CSS class: its outcome and its effect.
func (o OutcomeView) Class() string {
	if e := o.Effect; e != "" {
		return o.Outcome + " " + e
	}
	return o.Outcome
}

// FailedClause is one after-call clause that did not hold.
type FailedClause struct {
	Kind, Expression, Message string
	Strict                    bool
}

// ApprovalEvent is an autonomy.approval frame on the timeline.
type ApprovalEvent struct {
	Decision string
	Approver string
	Roles    []string
	Comment  string
}

// PendingApproval is one step waiting for a decision.
type PendingApproval struct {
	PreflightID string
	StepID      string
	ToolKind    string
	ArgsDigest  string
	Authorities []string
	ExpiresAt   string
	// Action is where the page's form posts the decision.
	Action string
}

// Class is the event's CSS class: its outcome and whether it was enforced.
func (e Event) Class() string {
	if e.Approval != nil {
		return "approval " + e.Approval.Decision
	}
	if e.OutcomeOnly && len(e.Outcomes) > 0 {
		return "outcome-only " + e.Outcomes[0].Class()
	}
	if e.Enforced {
		return e.Outcome + " enforced"
	}
	return e.Outcome + " not-enforced"
}

// BuildPage turns an audit join (wal.DB.AuditFrames) into the page model.
func BuildPage(auditID string, frames []wal.Frame) (*Page, error) {
	p := &Page{AuditID: auditID}
	var decidedAt time.Time
	var outcomes []OutcomeView
	for i := range frames {
		f := &frames[i]
		switch f.Kind {
		case wal.KindPreflight:
			if p.Preflight != nil {
				continue // one preflight per audit id; keep the first
			}
			pv, err := preflightView(f)
			if err != nil {
				return nil, err
			}
			p.Preflight = pv
			decidedAt, _ = time.Parse(wal.TimestampFormat, f.Timestamp)
		case wal.KindDecision:
			ev, err := event(f)
			if err != nil {
				return nil, err
			}
			p.Timeline = append(p.Timeline, ev)
		case wal.KindApproval:
			ev, err := approvalEvent(f)
			if err != nil {
				return nil, err
			}
			p.Timeline = append(p.Timeline, ev)
		case wal.KindOutcome:
			ov, err := outcomeView(f)
			if err != nil {
				return nil, err
			}
			outcomes = append(outcomes, ov)
		}
	}
	sort.SliceStable(p.Timeline, func(i, j int) bool { return p.Timeline[i].Seq < p.Timeline[j].Seq })
	sort.SliceStable(outcomes, func(i, j int) bool { return outcomes[i].Seq < outcomes[j].Seq })
	p.Outcomes = len(outcomes)
	p.joinOutcomes(outcomes)
	if !decidedAt.IsZero() {
		for i := range p.Timeline {
			e := &p.Timeline[i]
			e.Offset = offset(decidedAt, e.Time)
			for j := range e.Outcomes {
				e.Outcomes[j].Offset = offset(decidedAt, e.Outcomes[j].Time)
			}
		}
	}
	if p.Preflight != nil {
		for _, r := range append(append([]Row{}, p.Preflight.Contracts...), p.Preflight.Clauses...) {
			if r.Advisory() {
				p.Advisories++
			}
		}
	}
	return p, nil
}

// joinOutcomes puts each outcome (in seq order) on the decision row of its
// call: the latest decision with its request id that let the request
// through (the rule the gate itself joins by, wal.DB.CallDecision), else
// the latest with its request id. An outcome that matches no decision
// (none recorded, or an empty request id) becomes a row of its own, in seq
// order on the timeline.
func (p *Page) joinOutcomes(outcomes []OutcomeView) {
	var own []Event
	for _, o := range outcomes {
		at := -1
		if o.RequestID != "" {
			for i := range p.Timeline {
				e := &p.Timeline[i]
				if e.Approval != nil || e.OutcomeOnly || e.RequestID != o.RequestID {
					continue
				}
				if at < 0 || p.letThrough(i) || !p.letThrough(at) {
					at = i
				}
			}
		}
		if at >= 0 {
			p.Timeline[at].Outcomes = append(p.Timeline[at].Outcomes, o)
			continue
		}
		own = append(own, Event{Seq: o.Seq, Time: o.Time, ToolKind: o.ToolKind, StepID: o.StepID,
			RequestID: o.RequestID, Outcomes: []OutcomeView{o}, OutcomeOnly: true})
	}
	if len(own) > 0 {
		p.Timeline = append(p.Timeline, own...)
		sort.SliceStable(p.Timeline, func(i, j int) bool { return p.Timeline[i].Seq < p.Timeline[j].Seq })
	}
}

// letThrough reports whether the timeline's decision i let its request
// through.
func (p *Page) letThrough(i int) bool {
	e := &p.Timeline[i]
	d := wal.DecisionAttrs{RequestID: e.RequestID, Outcome: e.Outcome, Enforced: e.Enforced}
	return d.LetThrough(e.RequestID)
}

// offset is the time since the preflight of a frame's timestamp, "" when
// it does not parse.
func offset(decidedAt time.Time, ts string) string {
	at, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return ""
	}
	return "+" + at.Sub(decidedAt).Round(time.Millisecond).String()
}

func preflightView(f *wal.Frame) (*PreflightView, error) {
	a, err := f.Preflight()
	if err != nil {
		return nil, fmt.Errorf("explain: %w", err)
	}
	pv := &PreflightView{Seq: f.Seq, Time: f.Timestamp, PreflightID: a.PreflightID, ActorID: a.ActorID, Tenant: a.Tenant,
		Outcome: string(a.Outcome), ExpiresAt: a.ExpiresAt.UTC().Format(wal.TimestampFormat)}
	if s := a.SubmitAttrs; s != nil {
		pv.Intent, pv.PlanHash, pv.SessionID, pv.Reason, pv.Attempt, pv.BundleRevision =
			s.IntentSummary, s.PlanHash, s.SessionID, s.Reason, s.Attempt, s.BundleRevision
	}
	if len(a.Decision) == 0 {
		return pv, nil
	}
	var d preflight.Decision
	if err := json.Unmarshal(a.Decision, &d); err != nil {
		return nil, fmt.Errorf("explain: decision in preflight frame %d: %w", f.Seq, err)
	}
	// The recorded decision is what the caller was told; prefer it.
	pv.Outcome, pv.Reason, pv.Attempt = string(d.Outcome), d.Reason, d.Attempt
	pv.Allowed, pv.BoundToolKinds = d.Eligibility.Allowed, d.Eligibility.BoundToolKinds
	if d.Eligibility.ExpiresAt != "" {
		pv.ExpiresAt = d.Eligibility.ExpiresAt
	}
	for _, r := range d.ContractResults {
		pv.Contracts = append(pv.Contracts, row(r))
	}
	for _, r := range d.ClauseResults {
		pv.Clauses = append(pv.Clauses, row(r))
	}
	for _, r := range append(append([]Row{}, pv.Contracts...), pv.Clauses...) {
		pv.Hints = append(pv.Hints, r.Hints...)
	}
	return pv, nil
}

func row(r preflight.Result) Row {
	out := Row{Contract: r.Contract, Outcome: string(r.Outcome), Severity: string(r.Severity), Reason: r.Reason}
	switch {
	case r.Outcome == preflight.RowFail && r.Severity == preflight.SeverityAdvisory:
		out.State = "advisory"
	case r.Outcome == preflight.RowFail:
		out.State = "blocking"
	case r.Outcome == preflight.RowNotApplicable:
		out.State = "not_applicable"
	default:
		out.State = "pass"
	}
	rest := map[string]any{}
	for k, v := range r.Evidence {
		if k != "violations" {
			rest[k] = v
		}
	}
	if raw, ok := r.Evidence["violations"]; ok {
		// Evidence decodes as generic JSON; round-trip it into the type.
		if b, err := json.Marshal(raw); err == nil && json.Unmarshal(b, &out.Violations) != nil {
			rest["violations"] = raw
		}
	}
	// Evidence explains a failure, or why a contract did not apply; a row
	// that passed has nothing to explain, and its raw JSON is only noise.
	if len(rest) > 0 && r.Outcome != preflight.RowPass {
		if b, err := canon.Marshal(rest); err == nil {
			out.Evidence = string(b)
		}
	}
	for _, h := range r.RepairHints {
		s, err := canon.Marshal(h.Suggestion)
		if err != nil {
			s = []byte(fmt.Sprint(h.Suggestion))
		}
		out.Hints = append(out.Hints, HintView{Contract: r.Contract, Field: h.Field, Suggestion: string(s), Bounded: h.Bounded})
	}
	return out
}

func event(f *wal.Frame) (Event, error) {
	a, err := f.Decision()
	if err != nil {
		return Event{}, fmt.Errorf("explain: %w", err)
	}
	return Event{Seq: f.Seq, Time: f.Timestamp, ToolKind: a.ToolKind, StepID: a.StepID, RequestID: a.RequestID,
		Outcome: a.Outcome, Reason: a.Reason, Mode: a.Mode, Status: a.Status, Enforced: a.Enforced,
		Advisory: a.AdvisoryReason, Method: a.Method, Path: a.Path}, nil
}

func outcomeView(f *wal.Frame) (OutcomeView, error) {
	a, err := f.Outcome()
	if err != nil {
		return OutcomeView{}, fmt.Errorf("explain: %w", err)
	}
	ov := OutcomeView{Seq: f.Seq, Time: f.Timestamp, Outcome: a.Outcome, Reason: a.Reason, Enforced: a.Enforced,
		Warning: a.Warning, Mode: a.Mode, Status: a.Status, ResponseDigest: a.ResponseDigest, ResponseBytes: a.ResponseBytes,
		StepID: a.StepID, ToolKind: a.ToolKind, RequestID: a.RequestID, ReportedBy: a.ReportedBy, Reporter: a.Reporter,
		Detail: a.Detail, Effect: a.Effect()}
	for _, c := range a.Clauses {
		if !c.Held {
			ov.Failed = append(ov.Failed, FailedClause{Kind: c.Kind, Expression: c.Expression, Message: c.Message, Strict: c.Strict})
		}
	}
	return ov, nil
}

func approvalEvent(f *wal.Frame) (Event, error) {
	a, err := f.Approval()
	if err != nil {
		return Event{}, fmt.Errorf("explain: %w", err)
	}
	return Event{Seq: f.Seq, Time: f.Timestamp, ToolKind: a.ToolKind, StepID: a.StepID, Enforced: true,
		Approval: &ApprovalEvent{Decision: a.Decision, Approver: a.Approver, Roles: a.Roles, Comment: a.Comment}}, nil
}

// approvalSteps lists the step ids of a preflight frame that wait for an
// approval.
func approvalSteps(f *wal.Frame) []string {
	a, err := f.Preflight()
	if err != nil {
		return nil
	}
	var ids []string
	for _, s := range a.Steps {
		if s.Approval != nil {
			ids = append(ids, s.ID)
		}
	}
	return ids
}
