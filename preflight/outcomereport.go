package preflight

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/contractrefine/autonomy/internal/canon"
)

// OutcomeReport is the body of POST /v1/outcome: a tool runtime's own
// account of one gated call's response.
type OutcomeReport struct {
	// AuditID and RequestID name the call: the x-autonomy-audit-id and
	// x-request-id headers the runtime received with it.
	AuditID   string `json:"audit_id"`
	RequestID string `json:"request_id"`
	// PreflightID and StepID, optional, must be the call's when given.
	PreflightID string `json:"preflight_id,omitempty"`
	StepID      string `json:"step_id,omitempty"`
	// Request is the gated request body as the runtime received it, in
	// canonical JSON.
	Request json.RawMessage `json:"request"`
	// Status is the HTTP status the runtime answers with.
	Status int `json:"status"`
	// Result is the response body the runtime answers with, in canonical
	// JSON.
	Result json.RawMessage `json:"result"`
}

// MaxReportID bounds the ids of an outcome report, which the WAL keeps.
const MaxReportID = 4096

// DecodeOutcomeReport decodes an outcome report with the rules of
// DecodeRequest: exact names and types, no unknown or duplicate members
// (inside request and result too), numbers that round-trip through a
// double, nothing after the document; the first problem comes with its
// JSON Pointer. request and result are returned in canonical JSON.
func DecodeOutcomeReport(body []byte) (OutcomeReport, *RequestError) {
	var out OutcomeReport
	d, rerr := openObject(body, true)
	if rerr != nil {
		return out, rerr
	}
	var sawRequest, sawResult, sawStatus bool
	rerr = d.members("", func(name, path string) *RequestError {
		var err *RequestError
		switch name {
		case "audit_id":
			out.AuditID, err = d.strictStr(path)
		case "request_id":
			out.RequestID, err = d.strictStr(path)
		case "preflight_id":
			out.PreflightID, err = d.str(path)
		case "step_id":
			out.StepID, err = d.str(path)
		case "status":
			sawStatus = true
			out.Status, err = d.status(path)
		case "request":
			sawRequest = true
			out.Request, err = d.canonicalValue(path)
		case "result":
			sawResult = true
			out.Result, err = d.canonicalValue(path)
		default:
			return unknownField(path, name)
		}
		return err
	})
	if rerr != nil {
		return OutcomeReport{}, rerr
	}
	if _, err := d.dec.Token(); !errors.Is(err, io.EOF) {
		return OutcomeReport{}, malformed("", "unexpected data after the JSON document")
	}
	for _, f := range []struct {
		name, value string
		required    bool
	}{{"audit_id", out.AuditID, true}, {"request_id", out.RequestID, true}, {"preflight_id", out.PreflightID, false},
		{"step_id", out.StepID, false}} {
		switch {
		case f.required && strings.TrimSpace(f.value) == "":
			return OutcomeReport{}, malformed("/"+f.name, f.name+" is required and must not be empty")
		case len(f.value) > MaxReportID:
			return OutcomeReport{}, malformed("/"+f.name, fmt.Sprintf("%s is longer than %d bytes", f.name, MaxReportID))
		}
	}
	switch {
	case !sawRequest:
		return OutcomeReport{}, malformed("/request", "request is required: the gated request body as the runtime received it")
	case !sawStatus:
		return OutcomeReport{}, malformed("/status", "status is required: the HTTP status of the response")
	case !sawResult:
		return OutcomeReport{}, malformed("/result", "result is required: the response body as JSON (null for none)")
	}
	return out, nil
}

// status reads an HTTP status: an integer from 100 to 599.
func (d *requestDecoder) status(path string) (int, *RequestError) {
	tok, err := d.token(path)
	if err != nil {
		return 0, err
	}
	n, ok := tok.(json.Number)
	if !ok {
		return 0, typeError(path, "an integer", tok)
	}
	v, perr := n.Int64()
	if perr != nil || v < 100 || v > 599 {
		return 0, malformed(path, "must be an HTTP status, an integer from 100 to 599")
	}
	return int(v), nil
}

// canonicalValue reads any JSON value, with the checks args get, and
// returns it in canonical JSON. Each value has its own count of values.
func (d *requestDecoder) canonicalValue(path string) (json.RawMessage, *RequestError) {
	tok, err := d.token(path)
	if err != nil {
		return nil, err
	}
	d.values = 0
	v, err := d.value(tok, path)
	if err != nil {
		return nil, err
	}
	b, cerr := canon.Marshal(v)
	if cerr != nil {
		return nil, malformed(path, "cannot be put in canonical JSON: "+cerr.Error())
	}
	return b, nil
}
