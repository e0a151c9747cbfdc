package preflight

import "github.com/contractrefine/autonomy/internal/canon"

// CanonicalJSON returns the decision in canonical JSON (RFC 8785), the bytes
// canon.Marshal(d) returns, written in one pass from the decision's fixed
// shape: members in sorted order, nil slices and maps as null as
// encoding/json writes them. canon.Marshal encodes with encoding/json,
// parses the result and writes it again, a quarter of a preflight's CPU.
// A value it cannot write directly (an evidence value of another Go type)
// is put through canon.Marshal on its own; a string that is not UTF-8
// sends the whole decision through canon.Marshal, so the bytes are the
// same either way (TestCanonicalJSONAsMarshal, FuzzCanonicalJSON).
func (d *Decision) CanonicalJSON() ([]byte, error) {
	var w canon.Writer
	w.Grow(2048)
	writeDecision(&w, d)
	if b, err := w.Bytes(); err == nil {
		return b, nil
	}
	return canon.Marshal(d)
}

func writeDecision(w *canon.Writer, d *Decision) {
	w.Open()
	w.Name("attempt")
	w.Value(d.Attempt)
	w.Name("audit_id")
	w.String(d.AuditID)
	w.Name("clause_results")
	canon.Array(w, d.ClauseResults, func(r *Result) { writeResult(w, r) })
	w.Name("contract_results")
	canon.Array(w, d.ContractResults, func(r *Result) { writeResult(w, r) })
	w.Name("decided_at")
	w.String(d.DecidedAt)
	w.Name("eligibility")
	writeEligibility(w, &d.Eligibility)
	w.Name("outcome")
	w.String(string(d.Outcome))
	w.Name("preflight_id")
	w.String(d.PreflightID)
	w.Name("reason")
	w.String(d.Reason)
	w.Close()
}

func writeResult(w *canon.Writer, r *Result) {
	w.Open()
	w.Name("contract")
	w.String(r.Contract)
	w.Name("evidence")
	if r.Evidence == nil {
		w.Null()
	} else {
		w.Any(r.Evidence)
	}
	w.Name("outcome")
	w.String(string(r.Outcome))
	w.Name("reason")
	w.String(r.Reason)
	w.Name("repair_hints")
	canon.Array(w, r.RepairHints, func(h *Hint) {
		w.Open()
		w.Name("bounded")
		w.Bool(h.Bounded)
		w.Name("field")
		w.String(h.Field)
		w.Name("suggestion")
		w.Any(h.Suggestion)
		w.Close()
	})
	w.Name("severity")
	w.String(string(r.Severity))
	w.Close()
}

func writeEligibility(w *canon.Writer, e *Eligibility) {
	w.Open()
	w.Name("allowed")
	w.Bool(e.Allowed)
	if len(e.ApprovalsRequired) > 0 {
		w.Name("approvals_required")
		canon.Array(w, e.ApprovalsRequired, func(a *ApprovalRequired) {
			w.Open()
			w.Name("args_digest")
			w.String(a.ArgsDigest)
			w.Name("authorities")
			w.Strings(a.Authorities)
			w.Name("expires_at")
			w.String(a.ExpiresAt)
			w.Name("step_id")
			w.String(a.StepID)
			w.Name("tool_kind")
			w.String(a.ToolKind)
			w.Close()
		})
	}
	w.Name("bound_tool_kinds")
	w.Strings(e.BoundToolKinds)
	w.Name("expires_at")
	w.String(e.ExpiresAt)
	if e.RequiredRollback != "" {
		w.Name("required_rollback")
		w.String(e.RequiredRollback)
	}
	w.Close()
}
