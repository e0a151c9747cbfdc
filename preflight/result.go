package preflight

// Violation is one problem a contract found, listed in its row's evidence
// under "violations". Field is a JSON Pointer into the PreflightRequest.
type Violation struct {
	Step    string `json:"step,omitempty"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

// row collects the violations of one contract and turns them into its
// Result.
type row struct {
	contract   string
	violations []Violation
	hints      []Hint
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
	r.violations = append(r.violations, Violation{Step: step, Field: field, Message: message})
	r.unhinted = true
}

// repairable records a violation that setting field to suggestion repairs.
func (r *row) repairable(step, field, message string, suggestion any) {
	r.violations = append(r.violations, Violation{Step: step, Field: field, Message: message})
	r.hints = append(r.hints, Hint{Field: field, Suggestion: suggestion, Bounded: true})
}

// covered records a violation that another violation's hint in the same
// row also repairs.
func (r *row) covered(step, field, message string) {
	r.violations = append(r.violations, Violation{Step: step, Field: field, Message: message})
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
