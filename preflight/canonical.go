package preflight

import (
	"bytes"
	"strconv"

	"github.com/contractrefine/autonomy/internal/canon"
)

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
	w := canonWriter{}
	w.buf.Grow(2048)
	w.decision(d)
	if w.err != nil {
		return canon.Marshal(d)
	}
	return w.buf.Bytes(), nil
}

// canonWriter writes canonical JSON by hand; the first error stops it.
type canonWriter struct {
	buf   bytes.Buffer
	err   error
	first bool
}

func (w *canonWriter) open() { w.buf.WriteByte('{'); w.first = true }

func (w *canonWriter) close() { w.buf.WriteByte('}'); w.first = false }

// name writes a member name; every name here is plain ASCII.
func (w *canonWriter) name(n string) {
	if !w.first {
		w.buf.WriteByte(',')
	}
	w.first = false
	w.buf.WriteByte('"')
	w.buf.WriteString(n)
	w.buf.WriteString(`":`)
}

func (w *canonWriter) str(s string) {
	if w.err == nil {
		w.err = canon.WriteString(&w.buf, s)
	}
}

func (w *canonWriter) boolean(b bool) { w.buf.WriteString(strconv.FormatBool(b)) }

// value writes an arbitrary JSON value: directly when it is made of the
// generic JSON values, through canon.Marshal otherwise.
func (w *canonWriter) value(v any) {
	if w.err != nil {
		return
	}
	mark := w.buf.Len()
	if err := canon.WriteValue(&w.buf, v); err == nil {
		return
	}
	w.buf.Truncate(mark) // a string deep inside may have failed half-way
	b, err := canon.Marshal(v)
	if err != nil {
		w.err = err
		return
	}
	w.buf.Write(b)
}

func (w *canonWriter) decision(d *Decision) {
	w.open()
	w.name("attempt")
	w.value(d.Attempt)
	w.name("audit_id")
	w.str(d.AuditID)
	w.name("clause_results")
	w.results(d.ClauseResults)
	w.name("contract_results")
	w.results(d.ContractResults)
	w.name("decided_at")
	w.str(d.DecidedAt)
	w.name("eligibility")
	w.eligibility(&d.Eligibility)
	w.name("outcome")
	w.str(string(d.Outcome))
	w.name("preflight_id")
	w.str(d.PreflightID)
	w.name("reason")
	w.str(d.Reason)
	w.close()
}

func (w *canonWriter) results(rs []Result) {
	if rs == nil {
		w.buf.WriteString("null")
		return
	}
	w.buf.WriteByte('[')
	for i := range rs {
		if i > 0 {
			w.buf.WriteByte(',')
		}
		r := &rs[i]
		w.open()
		w.name("contract")
		w.str(r.Contract)
		w.name("evidence")
		if r.Evidence == nil {
			w.buf.WriteString("null")
		} else {
			w.value(r.Evidence)
		}
		w.name("outcome")
		w.str(string(r.Outcome))
		w.name("reason")
		w.str(r.Reason)
		w.name("repair_hints")
		w.hints(r.RepairHints)
		w.name("severity")
		w.str(string(r.Severity))
		w.close()
	}
	w.buf.WriteByte(']')
}

func (w *canonWriter) hints(hs []Hint) {
	if hs == nil {
		w.buf.WriteString("null")
		return
	}
	w.buf.WriteByte('[')
	for i := range hs {
		if i > 0 {
			w.buf.WriteByte(',')
		}
		h := &hs[i]
		w.open()
		w.name("bounded")
		w.boolean(h.Bounded)
		w.name("field")
		w.str(h.Field)
		w.name("suggestion")
		w.value(h.Suggestion)
		w.close()
	}
	w.buf.WriteByte(']')
}

func (w *canonWriter) eligibility(e *Eligibility) {
	w.open()
	w.name("allowed")
	w.boolean(e.Allowed)
	w.name("bound_tool_kinds")
	if e.BoundToolKinds == nil {
		w.buf.WriteString("null")
	} else {
		w.buf.WriteByte('[')
		for i, k := range e.BoundToolKinds {
			if i > 0 {
				w.buf.WriteByte(',')
			}
			w.str(k)
		}
		w.buf.WriteByte(']')
	}
	w.name("expires_at")
	w.str(e.ExpiresAt)
	if e.RequiredRollback != "" {
		w.name("required_rollback")
		w.str(e.RequiredRollback)
	}
	w.close()
}
