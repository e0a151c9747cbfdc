package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"

	"github.com/contractrefine/autonomy/internal/canon"
	"github.com/contractrefine/autonomy/internal/jsonptr"
	"github.com/contractrefine/autonomy/internal/strictjson"
)

const (
	// maxDepth matches encoding/json's nesting limit, so an envelope the
	// PreflightRequest decoder accepted is never refused here for depth, and
	// the recursive reader below cannot be driven into a huge stack.
	maxDepth = 10000

	// maxSpanDepth bounds the values whose positions are kept for ordering
	// errors. Schema and code errors never point deeper than
	// /section/field/index, so deeper values (task input) are not worth a
	// map entry each.
	maxSpanDepth = 4

	// maxNumberLen and maxExponent keep every number literal inside what
	// math/big.Rat parses: jsonschema/v6 turns each number it checks into a
	// big.Rat and uses the result unchecked, so a literal Rat refuses (such
	// as 0e-9999999) would panic the validator. Both bounds are far beyond
	// any float64 (RFC 7493 §2.2), so no interoperable number is refused.
	maxNumberLen = 256
	maxExponent  = 400
)

var (
	// errTooDeep reports a document nested deeper than maxDepth.
	errTooDeep = errors.New("envelope: document nested too deeply")
	// errTrailingData reports bytes after the top-level value.
	errTrailingData = errors.New("envelope: data after the top-level value")
	// errMalformed reports a token where the grammar allows none.
	errMalformed = errors.New("envelope: malformed JSON")
)

// span is where a value lies in the raw document: start is the decoder
// offset before the value (it may include the separator before it), end the
// offset just after it. Only their order matters, except for the top-level
// input, whose bytes are cut out with it.
type span struct {
	start, end int64
}

// located is a FieldError with what ordering needs: where it sits in the
// document and how deep, filled in only once the whole list is known.
type located struct {
	FieldError
	rank    int   // lower wins when two errors share a path
	offset  int64 // -1 until placed
	depth   int   // number of reference tokens in Path
	missing bool  // Path names a member that is absent
	seq     int   // tie-breaker: table index or generation order
}

// reader builds the value tree the schema validates (objects as
// map[string]any, numbers as json.Number) and records what no schema can
// see: repeated member names and number literals outside the safe range.
type reader struct {
	dec   *json.Decoder
	path  []string // escaped reference tokens of the value being read
	errs  []located
	spans map[string]span // nil unless positions are wanted
	input span            // the last top-level "input" value
}

// decode reads raw as one JSON value. When spans is not nil it also records
// the position of every value up to maxSpanDepth, keyed by JSON Pointer.
// An error means raw is not a single well-formed JSON value.
func decode(raw []byte, spans map[string]span) (any, *reader, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	r := &reader{dec: dec, spans: spans, input: span{start: -1}}
	v, err := r.value()
	if err != nil {
		return nil, nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, errTrailingData
	}
	return v, r, nil
}

func (r *reader) value() (any, error) {
	if len(r.path) > maxDepth {
		return nil, errTooDeep
	}
	start := r.dec.InputOffset()
	tok, err := r.dec.Token()
	if err != nil {
		return nil, err
	}
	var v any
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			v, err = r.object()
		case '[':
			v, err = r.array()
		default:
			err = errMalformed // a closing delimiter where a value belongs
		}
		if err != nil {
			return nil, err
		}
	case json.Number:
		v = t
		switch {
		case !numberInRange(string(t)):
			r.fail(start, msgNumberRange)
			// A stand-in keeps the tree safe for the schema library; the
			// error above already rejects the envelope.
			v = json.Number("0")
		case errors.Is(canon.CheckNumber(t), canon.ErrInexact):
			// The request's canonical digest reads numbers as doubles: one
			// whose text names another value (9007199254740993) would
			// count as the same request as its neighbour, for the
			// idempotency key too, while a reader keeping the text sees
			// another value. As in args, it is refused.
			r.fail(start, msgNumberInexact)
		}
	default: // string, bool, nil
		v = t
	}
	end := r.dec.InputOffset()
	if r.spans != nil && len(r.path) <= maxSpanDepth {
		r.spans[jsonptr.Join(r.path)] = span{start, end}
	}
	if len(r.path) == 1 && r.path[0] == "input" {
		r.input = span{start, end}
	}
	return v, nil
}

func (r *reader) object() (map[string]any, error) {
	obj := make(map[string]any)
	var names strictjson.Names
	for r.dec.More() {
		tok, err := r.dec.Token()
		if err != nil {
			return nil, err
		}
		key, ok := tok.(string)
		if !ok {
			return nil, errMalformed
		}
		_, dup := obj[key]
		_, repeated := names.Add(key)
		r.path = append(r.path, jsonptr.Escape(key))
		switch {
		case dup:
			// Parsers disagree on which of two equal names wins, so an
			// envelope that repeats one means different things to
			// different readers; refuse it rather than pick.
			r.fail(r.dec.InputOffset(), msgDuplicateMember)
		case repeated:
			// strictjson's rule, the PreflightRequest's too: a Go runtime
			// matches names to fields without regard to case, so
			// IdempotencyKey beside idempotencyKey is one field read twice.
			r.fail(r.dec.InputOffset(), msgCaseOnlyMember)
		}
		v, err := r.value()
		if err != nil {
			return nil, err
		}
		r.path = r.path[:len(r.path)-1]
		obj[key] = v
	}
	if _, err := r.dec.Token(); err != nil { // the closing '}'
		return nil, err
	}
	return obj, nil
}

func (r *reader) array() ([]any, error) {
	arr := make([]any, 0, 4)
	for r.dec.More() {
		r.path = append(r.path, strconv.Itoa(len(arr)))
		v, err := r.value()
		if err != nil {
			return nil, err
		}
		r.path = r.path[:len(r.path)-1]
		arr = append(arr, v)
	}
	if _, err := r.dec.Token(); err != nil { // the closing ']'
		return nil, err
	}
	return arr, nil
}

// fail records an error at the value being read.
func (r *reader) fail(offset int64, msg string) {
	r.errs = append(r.errs, located{
		FieldError: FieldError{Code: CodeValidationFailed, Path: jsonptr.Join(r.path), Message: msg},
		offset:     offset,
		depth:      len(r.path),
		seq:        len(r.errs),
	})
}

// inputBytes returns a copy of the top-level input value exactly as sent,
// or nil when there is none. The span starts after the member name, so the
// colon and blanks before the value are cut off.
func (r *reader) inputBytes(raw []byte) json.RawMessage {
	if r.input.start < 0 || r.input.end > int64(len(raw)) {
		return nil
	}
	seg := bytes.TrimLeft(raw[r.input.start:r.input.end], " \t\r\n:")
	return bytes.Clone(seg)
}

// numberInRange reports whether a number literal is within maxNumberLen and
// maxExponent and does not overflow float64.
func numberInRange(lit string) bool {
	if len(lit) > maxNumberLen {
		return false
	}
	if _, err := strconv.ParseFloat(lit, 64); err != nil {
		return false
	}
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		exp, err := strconv.Atoi(lit[i+1:])
		if err != nil || exp > maxExponent || exp < -maxExponent {
			return false
		}
	}
	return true
}
