package preflight

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/contractrefine/autonomy/internal/canon"
	"github.com/contractrefine/autonomy/internal/jsonptr"
	"github.com/contractrefine/autonomy/internal/strictjson"
)

// MaxNesting is the deepest nesting of objects and arrays a PreflightRequest
// body may have, counted over the whole document (args and the envelope
// included).
const MaxNesting = 64

// DecodeRequest decodes a PreflightRequest body strictly: every field is
// checked against the schema with its exact name and JSON type, unknown and
// duplicate names are rejected (except that args and context.request are
// data), numbers in args stay json.Number so they keep their exact text,
// and nothing may follow the document. The first problem in document order
// is returned with the JSON Pointer of the field it concerns, except that
// a step's args past MaxArgsValues are refused for it ahead of any other
// problem in them.
//
// context.request is kept raw for the envelope validator, which owns its
// rules; DecodeRequest only checks that it is a JSON object.
func DecodeRequest(body []byte) (*Request, *RequestError) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, malformed("", "request body is empty")
	}
	// Bytes that are not UTF-8 and \u escapes of lone surrogates all read
	// as U+FFFD: two different plans would digest and bind as the same one.
	if err := canon.CheckText(body); err != nil {
		msg := "request body is not valid UTF-8"
		if errors.Is(err, canon.ErrLoneSurrogate) {
			msg = "request body has a \\u escape of a lone UTF-16 surrogate, which names no character"
		}
		return nil, malformed("", msg)
	}
	// The walk below recurses once per nesting level of args, so the depth
	// is bounded first, by a flat scan that cannot exhaust the stack.
	if nestingExceeds(body, MaxNesting) {
		return nil, malformed("", fmt.Sprintf("JSON nesting is deeper than %d levels", MaxNesting))
	}
	d := &requestDecoder{dec: newTokens(body), body: body}
	req := &Request{}
	if err := d.request(req); err != nil {
		return nil, err
	}
	if _, err := d.dec.Token(); !errors.Is(err, io.EOF) {
		return nil, malformed("", "unexpected data after the JSON document")
	}
	if strings.TrimSpace(req.Intent.Summary) == "" {
		return nil, malformed("/intent/summary", "intent.summary is required and must not be empty")
	}
	if !d.sawSteps {
		return nil, malformed("/plan/steps", "plan.steps is required and must be an array")
	}
	if strings.TrimSpace(req.Context.Actor.ID) == "" {
		return nil, malformed("/context/actor/id", "context.actor.id is required and must not be empty")
	}
	return req, nil
}

// nestingExceeds reports whether objects and arrays in b nest deeper than
// limit. It skips string contents and never recurses. Closing brackets with
// nothing open are left for the decoder to reject.
func nestingExceeds(b []byte, limit int) bool {
	depth := 0
	inString, escaped := false, false
	for _, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > limit {
				return true
			}
		case '}', ']':
			if depth > 0 {
				depth--
			}
		}
	}
	return false
}

// requestDecoder walks the token stream of one request body, keeping the
// pointer of the value it reads so every error names its field.
type requestDecoder struct {
	dec      *tokens
	body     []byte // what dec reads
	sawSteps bool
	// values counts the values read into args, across every step.
	values int
}

// MaxArgsValues bounds the values (members, elements and scalars) the
// args of one request hold, across its steps. Each is a map entry or an
// interface value once decoded, about 340 bytes and 5 allocations for a
// 14-byte member (540 and 15 through encoding/json's tokens): a 1 MB body
// of 70,000 keys took 34 MB to decode, 20 at once 717 MB. The values of each step's args are counted by a flat scan
// of its text before any of them is decoded (pastBound), so args past the
// bound are refused without building a map.
const MaxArgsValues = 10000

// token reads the next token; a syntax error or a premature end is
// reported at path, the value being read.
func (d *requestDecoder) token(path string) (json.Token, *RequestError) {
	tok, err := d.dec.Token()
	if err != nil {
		return nil, syntaxError(path, err)
	}
	return tok, nil
}

// object reads an object at path and calls field for each member, with the
// member's pointer. A null is accepted as an absent object. Names repeated
// under strictjson's rule (exactly, or differing only in case: a Go
// runtime reads them as one field) are rejected: a body that means two
// things to two parsers is refused.
func (d *requestDecoder) object(path string, field func(name, path string) *RequestError) *RequestError {
	tok, err := d.token(path)
	if err != nil {
		return err
	}
	if tok == nil {
		return nil
	}
	if tok != json.Delim('{') {
		return typeError(path, "an object", tok)
	}
	return d.members(path, field)
}

// members reads the members of an object whose '{' was consumed, and its '}'.
func (d *requestDecoder) members(path string, field func(name, path string) *RequestError) *RequestError {
	var seen strictjson.Names
	for d.dec.More() {
		tok, err := d.token(path)
		if err != nil {
			return err
		}
		name, ok := tok.(string)
		if !ok {
			return malformed(path, "invalid object member name")
		}
		member := memberPath(path, name)
		switch prev, dup := seen.Add(name); {
		case dup && prev == name:
			return malformed(member, fmt.Sprintf("duplicate field %q", name))
		case dup:
			return malformed(member, fmt.Sprintf("field %q differs from field %q only in case", name, prev))
		}
		if err := field(name, member); err != nil {
			return err
		}
	}
	_, err := d.token(path)
	return err
}

// array reads an array at path and calls elem for each element. A null is
// accepted as an absent array and reported by present == false.
func (d *requestDecoder) array(path string, elem func(i int, path string) *RequestError) (present bool, rerr *RequestError) {
	tok, err := d.token(path)
	if err != nil {
		return false, err
	}
	if tok == nil {
		return false, nil
	}
	if tok != json.Delim('[') {
		return false, typeError(path, "an array", tok)
	}
	for i := 0; d.dec.More(); i++ {
		if err := elem(i, elementPath(path, i)); err != nil {
			return true, err
		}
	}
	_, err = d.token(path)
	return true, err
}

// str reads a string; null reads as "" (an absent optional field).
func (d *requestDecoder) str(path string) (string, *RequestError) {
	tok, err := d.token(path)
	if err != nil {
		return "", err
	}
	switch v := tok.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	}
	return "", typeError(path, "a string", tok)
}

// strictStr reads a string where null is not an absent field but a wrong
// value: array elements and map values.
func (d *requestDecoder) strictStr(path string) (string, *RequestError) {
	tok, err := d.token(path)
	if err != nil {
		return "", err
	}
	if v, ok := tok.(string); ok {
		return v, nil
	}
	return "", typeError(path, "a string", tok)
}

func (d *requestDecoder) strings(path string) ([]string, *RequestError) {
	var out []string
	present, err := d.array(path, func(_ int, p string) *RequestError {
		s, err := d.strictStr(p)
		out = append(out, s)
		return err
	})
	if present && out == nil {
		out = []string{}
	}
	return out, err
}

func (d *requestDecoder) request(req *Request) *RequestError {
	tok, err := d.token("")
	if err != nil {
		return err
	}
	if tok != json.Delim('{') {
		return typeError("", "an object", tok)
	}
	return d.members("", func(name, path string) *RequestError {
		switch name {
		case "intent":
			return d.intent(&req.Intent, path)
		case "plan":
			return d.plan(&req.Plan, path)
		case "context":
			return d.context(&req.Context, path)
		}
		return unknownField(path, name)
	})
}

func (d *requestDecoder) intent(in *Intent, path string) *RequestError {
	return d.object(path, func(name, p string) (err *RequestError) {
		switch name {
		case "summary":
			in.Summary, err = d.str(p)
		case "plan_hash":
			in.PlanHash, err = d.str(p)
		default:
			err = unknownField(p, name)
		}
		return err
	})
}

func (d *requestDecoder) plan(plan *Plan, path string) *RequestError {
	return d.object(path, func(name, p string) *RequestError {
		if name != "steps" {
			return unknownField(p, name)
		}
		present, err := d.array(p, func(_ int, sp string) *RequestError {
			var s Step
			err := d.step(&s, sp)
			plan.Steps = append(plan.Steps, s)
			return err
		})
		if present {
			d.sawSteps = true
			if plan.Steps == nil {
				plan.Steps = []Step{}
			}
		}
		return err
	})
}

func (d *requestDecoder) step(s *Step, path string) *RequestError {
	tok, err := d.token(path)
	if err != nil {
		return err
	}
	if tok != json.Delim('{') {
		return typeError(path, "an object", tok)
	}
	return d.members(path, func(name, p string) (err *RequestError) {
		switch name {
		case "id":
			s.ID, err = d.str(p)
		case "kind":
			s.Kind, err = d.str(p)
		case "zone":
			s.Zone, err = d.str(p)
		case "args":
			s.Args, err = d.args(p)
		case "provenance":
			s.Provenance, err = d.provenance(p)
		case "depends_on":
			s.DependsOn, err = d.strings(p)
		case "rollback":
			s.Rollback, err = d.str(p)
		case "expected_evidence":
			s.ExpectedEvidence, err = d.strings(p)
		default:
			err = unknownField(p, name)
		}
		return err
	})
}

func (d *requestDecoder) provenance(path string) (map[string]string, *RequestError) {
	var out map[string]string
	tok, err := d.token(path)
	if err != nil || tok == nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, typeError(path, "an object", tok)
	}
	out = map[string]string{}
	err = d.members(path, func(name, p string) *RequestError {
		v, err := d.strictStr(p)
		out[name] = v
		return err
	})
	return out, err
}

// args reads a step's arguments: any JSON object, kept as data.
func (d *requestDecoder) args(path string) (map[string]any, *RequestError) {
	tok, err := d.token(path)
	if err != nil || tok == nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, typeError(path, "an object", tok)
	}
	// The decoder stands just past the args' '{'.
	if rel, over := pastBound(d.body[d.dec.InputOffset()-1:], MaxArgsValues-d.values); over {
		return nil, tooManyValues(path + rel)
	}
	v, err := d.value(tok, path)
	if err != nil {
		return nil, err
	}
	return v.(map[string]any), nil
}

// value builds the generic value that starts with tok. It recurses once per
// nesting level, which nestingExceeds has bounded.
func (d *requestDecoder) value(tok json.Token, path string) (any, *RequestError) {
	if d.values++; d.values > MaxArgsValues {
		return nil, tooManyValues(path)
	}
	switch tok {
	case json.Delim('{'):
		obj := map[string]any{}
		err := d.members(path, func(name, p string) *RequestError {
			t, err := d.token(p)
			if err != nil {
				return err
			}
			obj[name], err = d.value(t, p)
			return err
		})
		return obj, err
	case json.Delim('['):
		arr := []any{}
		for i := 0; d.dec.More(); i++ {
			p := path + "/" + strconv.Itoa(i)
			t, err := d.token(p)
			if err != nil {
				return nil, err
			}
			v, err := d.value(t, p)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err := d.token(path)
		return arr, err
	}
	// Args are bound by their canonical digest, whose numbers are IEEE
	// doubles: a number beyond that range could never be bound, and one
	// whose text names another value than its double (9007199254740993,
	// 1.0000000000000001) would bind every number sharing that double,
	// while a runtime keeping the text acts on the one it was sent. Both
	// are refused here, where the caller can see which one it was.
	if n, ok := tok.(json.Number); ok {
		switch err := canon.CheckNumber(n); {
		case errors.Is(err, canon.ErrInexact):
			return nil, malformed(path, "number "+string(n)+" does not round-trip through a double (an integer beyond 2^53 or more digits than a double holds): send it as a string")
		case err != nil:
			return nil, malformed(path, "number "+string(n)+" is out of range")
		}
	}
	return tok, nil
}

func tooManyValues(path string) *RequestError {
	return malformed(path, fmt.Sprintf("the args hold more than %d values in all; send large data by reference", MaxArgsValues))
}

// pastBound scans the JSON value at the start of b (an object or array)
// without decoding it, counting its values as requestDecoder.value does:
// the value itself, and every member value, element and scalar within.
// When there are more than room, it returns the JSON Pointer, relative to
// the value, of the first one past room. It does not validate: text that
// is not JSON is counted as far as it goes, and the decoder that reads it
// next reports it.
func pastBound(b []byte, room int) (rel string, over bool) {
	type frame struct {
		array bool
		index int
		key   []byte // the member name's text, quotes and escapes included
	}
	var stack []frame
	count := 0
	// at is the pointer of the value starting at the current position.
	at := func() string {
		var p strings.Builder
		for _, f := range stack {
			p.WriteByte('/')
			if f.array {
				p.WriteString(strconv.Itoa(f.index))
				continue
			}
			var name string
			if json.Unmarshal(f.key, &name) != nil {
				name = string(f.key)
			}
			p.WriteString(jsonptr.Escape(name))
		}
		return p.String()
	}
	expectKey := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch c {
		case ' ', '\t', '\n', '\r', ':':
			continue
		case ',':
			if n := len(stack); n > 0 && stack[n-1].array {
				stack[n-1].index++
			} else {
				expectKey = true
			}
			continue
		case '}', ']':
			if len(stack) <= 1 {
				return "", false
			}
			stack = stack[:len(stack)-1]
			expectKey = false
			continue
		}
		if c == '"' {
			j := i + 1
			for ; j < len(b) && b[j] != '"'; j++ {
				if b[j] == '\\' {
					j++
				}
			}
			if expectKey {
				stack[len(stack)-1].key = b[i:min(j+1, len(b))]
				expectKey = false
				i = j
				continue
			}
			if count++; count > room {
				return at(), true
			}
			i = j
			continue
		}
		if count++; count > room {
			return at(), true
		}
		switch c {
		case '{':
			stack = append(stack, frame{})
			expectKey = true
		case '[':
			stack = append(stack, frame{array: true})
		default: // a number or a literal: skip to its end
			for i+1 < len(b) && !strings.ContainsRune(" \t\n\r,:]}", rune(b[i+1])) {
				i++
			}
		}
	}
	return "", false
}

func (d *requestDecoder) context(c *Context, path string) *RequestError {
	return d.object(path, func(name, p string) (err *RequestError) {
		switch name {
		case "actor":
			err = d.object(p, func(name, ap string) (err *RequestError) {
				switch name {
				case "id":
					c.Actor.ID, err = d.str(ap)
				case "session_id":
					c.Actor.SessionID, err = d.str(ap)
				default:
					err = unknownField(ap, name)
				}
				return err
			})
		case "attestation":
			err = d.attestation(c, p)
		case "decision_chain":
			c.DecisionChain, err = d.strings(p)
		case "required_rollback":
			c.RequiredRollback, err = d.str(p)
		case "request":
			c.Request, err = d.envelope(p)
		default:
			err = unknownField(p, name)
		}
		return err
	})
}

func (d *requestDecoder) attestation(c *Context, path string) *RequestError {
	tok, err := d.token(path)
	if err != nil || tok == nil {
		return err
	}
	if tok != json.Delim('{') {
		return typeError(path, "an object", tok)
	}
	a := &Attestation{}
	c.Attestation = a
	return d.members(path, func(name, p string) (err *RequestError) {
		switch name {
		case "node_id":
			a.NodeID, err = d.str(p)
		case "issued_at":
			a.IssuedAt, err = d.str(p)
		default:
			err = unknownField(p, name)
		}
		return err
	})
}

// envelope reads context.request raw: the envelope validator checks it.
// null is an absent envelope.
func (d *requestDecoder) envelope(path string) (json.RawMessage, *RequestError) {
	raw, err := d.dec.Raw()
	if err != nil {
		return nil, syntaxError(path, err)
	}
	switch bytes.TrimSpace(raw)[0] {
	case 'n':
		return nil, nil
	case '{':
		return raw, nil
	}
	return nil, malformed(path, "must be an object (an aruntime.runtime-request.v1 envelope)")
}

func unknownField(path, name string) *RequestError {
	return malformed(path, fmt.Sprintf("unknown field %q", name))
}

func typeError(path, want string, got json.Token) *RequestError {
	return malformed(path, "must be "+want+", got "+tokenKind(got))
}

func tokenKind(tok json.Token) string {
	switch v := tok.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case json.Delim:
		if v == '{' {
			return "an object"
		}
		if v == '[' {
			return "an array"
		}
	}
	return "an unexpected token"
}

// openObject starts decoding body, one JSON object of UTF-8 text, for the
// small bodies of the API (an approval, an outcome report): the decoder
// stands after the object's opening brace. values says the object holds
// arbitrary values: the nesting is bounded first by MaxNesting. Numbers
// are kept as their text.
func openObject(body []byte, values bool) (*requestDecoder, *RequestError) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, malformed("", "request body is empty")
	}
	if err := canon.CheckText(body); err != nil {
		return nil, malformed("", "request body is not valid UTF-8 text")
	}
	if values && nestingExceeds(body, MaxNesting) {
		return nil, malformed("", fmt.Sprintf("JSON nesting is deeper than %d levels", MaxNesting))
	}
	d := &requestDecoder{dec: newTokens(body), body: body}
	tok, rerr := d.token("")
	if rerr != nil {
		return nil, rerr
	}
	if tok != json.Delim('{') {
		return nil, typeError("", "an object", tok)
	}
	return d, nil
}
