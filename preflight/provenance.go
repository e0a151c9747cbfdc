package preflight

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/contractrefine/autonomy/internal/canon"
	"github.com/contractrefine/autonomy/internal/jsonptr"
)

// Provenance forms a step argument may declare (docs/API.md#preflightrequest).
const (
	provenanceInput   = "input:"
	provenanceStep    = "step:"
	provenanceLiteral = "literal"
	provenanceModel   = "model"
)

// noSideEffects is the evidence of the row when no step's capability has
// side effects.
var noSideEffects = detailEvidence("no step's capability has side effects")

// checkArgumentProvenance is contract 2: every argument of a side-effecting
// step says where its value came from, and a value claimed to come from the
// envelope input really is that value.
func checkArgumentProvenance(e *evaluation) (Result, error) {
	r := newRow(ContractArgumentProvenance)
	applies := false
	for i, s := range e.req.Plan.Steps {
		c, ok := e.gov.Capability(s.Kind)
		if !ok || !c.SideEffects {
			continue
		}
		applies = true
		names := make([]string, 0, len(s.Args))
		for name := range s.Args {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			e.checkProvenance(r, i, s, name)
		}
	}
	if !applies {
		return notApplicableWith(ContractArgumentProvenance, noSideEffects), nil
	}
	return r.result(ReasonArgumentProvenanceInvalid), nil
}

func (e *evaluation) checkProvenance(r *row, i int, s Step, name string) {
	field := stepField(i, "provenance/"+jsonptr.Escape(name))
	source, ok := s.Provenance[name]
	switch {
	case !ok:
		r.fail(s.ID, field, fmt.Sprintf("argument %q has no provenance", name))
	case strings.HasPrefix(source, provenanceInput):
		e.checkInputProvenance(r, i, s, name, strings.TrimPrefix(source, provenanceInput))
	case strings.HasPrefix(source, provenanceStep):
		dep := strings.TrimPrefix(source, provenanceStep)
		if !slices.Contains(s.DependsOn, dep) {
			r.fail(s.ID, field, fmt.Sprintf("argument %q comes from step %q, which is not in depends_on", name, dep))
		}
	case source == provenanceLiteral:
	case source == provenanceModel:
		if e.env != nil && (e.env.RiskLevel == "high" || e.env.RiskLevel == "critical") {
			r.fail(s.ID, field, fmt.Sprintf("argument %q is model-generated, which a %s-risk request does not allow for a side effect", name, e.env.RiskLevel))
		}
	default:
		r.fail(s.ID, field, fmt.Sprintf("argument %q has provenance %q; want input:<pointer>, step:<id>, literal or model", name, source))
	}
}

// maxInputHintBytes bounds the input values one decision offers as hints.
// Each argument that differs from the input it names gets that input's
// value as its hint, and many arguments may name one large value: without a
// bound a request of tens of kilobytes would be answered, and stored, in
// tens of megabytes.
const maxInputHintBytes = 64 << 10

// checkInputProvenance compares the argument with the envelope input it
// claims to copy. The comparison is canonical, so 125 and 125.0 are equal
// and key order does not matter. A mismatch is repairable with the input's
// value while the decision's input hints stay under maxInputHintBytes;
// past that it has no hint.
func (e *evaluation) checkInputProvenance(r *row, i int, s Step, name, pointer string) {
	field := stepField(i, "provenance/"+jsonptr.Escape(name))
	input, ok := e.envelopeInput()
	if !ok {
		r.fail(s.ID, field, fmt.Sprintf("argument %q comes from the envelope input, but the request has no envelope", name))
		return
	}
	want, ok := jsonptr.Resolve(input, pointer)
	if !ok {
		r.fail(s.ID, field, fmt.Sprintf("argument %q comes from input %q, which does not exist", name, pointer))
		return
	}
	got, errGot := canon.Marshal(s.Args[name])
	exp, errExp := e.canonicalInput(pointer, want)
	if errGot != nil || errExp != nil {
		r.fail(s.ID, field, fmt.Sprintf("argument %q cannot be compared with input %q canonically", name, pointer))
		return
	}
	if bytes.Equal(got, exp) {
		return
	}
	argField := stepField(i, "args/"+jsonptr.Escape(name))
	msg := fmt.Sprintf("argument %q differs from input %q it claims to copy", name, pointer)
	if e.hintBytes+len(exp) > maxInputHintBytes {
		r.fail(s.ID, argField, msg+"; the decision's hints already hold all the input it offers")
		return
	}
	e.hintBytes += len(exp)
	r.repairable(s.ID, argField, msg, want)
}

// canonicalInput is the canonical form of want, the input value at pointer.
func (e *evaluation) canonicalInput(pointer string, want any) ([]byte, error) {
	if b, ok := e.inputCanon[pointer]; ok {
		return b, nil
	}
	b, err := canon.Marshal(want)
	if err != nil {
		return nil, err
	}
	if e.inputCanon == nil {
		e.inputCanon = map[string][]byte{}
	}
	e.inputCanon[pointer] = b
	return b, nil
}
