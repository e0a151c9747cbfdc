package preflight

// Violation is one problem a contract found, listed in its row's evidence
// under "violations". Field is a JSON Pointer into the PreflightRequest.
type Violation struct {
	Step    string `json:"step,omitempty"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

// A row lists at most maxRowViolations violations, and after its first
// none past maxRowViolationBytes of step ids, fields and messages; the
// evidence counts the rest under "violations_omitted". A violation repeats
// its step's id and often a value of the request, so without the bound a
// request of tens of kilobytes (a long step id, thousands of depends_on
// entries naming nothing) was answered, and stored, in tens of megabytes.
const (
	maxRowViolations     = 100
	maxRowViolationBytes = 64 << 10
)

// row collects the violations of one contract and turns them into its
// Result.
type row struct {
	contract   string
	violations []Violation
	// listed is the bytes of the violations listed; omitted counts those
	// past the bounds.
	listed, omitted int
	hints           []Hint
	// unhinted is set when some violation has no bounded hint.
	unhinted bool
	// extra evidence beside the violations.
	evidence map[string]any
}

func newRow(contract string) *row {
	return &row{contract: contract, evidence: map[string]any{}}
}

// fail records a violation with no mechanical repair.
func (r *row) fail(step, field, message string) {
	r.add(step, field, message)
	r.unhinted = true
}

// repairable records a violation that setting field to suggestion repairs.
func (r *row) repairable(step, field, message string, suggestion any) {
	r.add(step, field, message)
	r.hints = append(r.hints, Hint{Field: field, Suggestion: suggestion, Bounded: true})
}

// covered records a violation that another violation's hint in the same
// row also repairs.
func (r *row) covered(step, field, message string) {
	r.add(step, field, message)
}

// add lists a violation, or counts it omitted past the row's bounds.
func (r *row) add(step, field, message string) {
	n := len(step) + len(field) + len(message)
	if len(r.violations) > 0 && (len(r.violations) == maxRowViolations || r.listed+n > maxRowViolationBytes) {
		r.omitted++
		return
	}
	r.violations = append(r.violations, Violation{Step: step, Field: field, Message: message})
	r.listed += n
}

// result is the pass or blocking-fail row. A row offers its hints only when
// every violation it found has one: a row mixing repairable and
// unrepairable problems carries none, so the composition denies rather
// than spend the caller's repair budget on a retry that cannot pass.
func (r *row) result(reason string) Result {
	if len(r.violations) == 0 {
		return Result{
			Contract:    r.contract,
			Outcome:     RowPass,
			Severity:    SeverityBlocking,
			RepairHints: []Hint{},
			Evidence:    r.evidence,
		}
	}
	hints := r.hints
	if r.unhinted || hints == nil {
		hints = []Hint{}
	}
	r.evidence["violations"] = r.violations
	if r.omitted > 0 {
		r.evidence["violations_omitted"] = r.omitted
	}
	return Result{
		Contract:    r.contract,
		Outcome:     RowFail,
		Severity:    SeverityBlocking,
		Reason:      reason,
		RepairHints: hints,
		Evidence:    r.evidence,
	}
}

// notApplicable is the row of a contract with nothing to check; detail says
// why, for the operator reading the decision.
func notApplicable(contract, detail string) Result {
	return notApplicableWith(contract, detailEvidence(detail))
}

// notApplicableWith is notApplicable with evidence made by detailEvidence
// once, for a detail that does not change: every decision's row shares it
// (a row's evidence is only read once the row is made), where a map made
// per row was a tenth of a preflight's allocations.
func notApplicableWith(contract string, evidence map[string]any) Result {
	return Result{
		Contract:    contract,
		Outcome:     RowNotApplicable,
		Severity:    SeverityInfo,
		RepairHints: []Hint{},
		Evidence:    evidence,
	}
}

// detailEvidence is the evidence of a row with nothing to check.
func detailEvidence(detail string) map[string]any {
	return map[string]any{"detail": detail}
}

// failClosed is the row of a contract that could not be evaluated.
func failClosed(contract, reason, detail string) Result {
	return Result{
		Contract:    contract,
		Outcome:     RowFail,
		Severity:    SeverityBlocking,
		Reason:      reason,
		RepairHints: []Hint{},
		Evidence:    map[string]any{"detail": detail},
	}
}

// hasBoundedHint reports whether r offers at least one bounded hint.
func hasBoundedHint(r Result) bool {
	for _, h := range r.RepairHints {
		if h.Bounded {
			return true
		}
	}
	return false
}
