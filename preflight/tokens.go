package preflight

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/go-json-experiment/json/jsontext"
)

// tokens reads the JSON tokens of a body held in memory for requestDecoder,
// in the form encoding/json's Decoder.Token gives them with UseNumber
// (json.Delim, string, json.Number, bool, nil), through jsontext's
// decoder: encoding/json's Token allocated a syntax error for every string
// it read and was most of a preflight's decode (docs/PERFORMANCE.md, "CPU
// per call, preflight"). Duplicate names are left to requestDecoder, which
// refuses them with strictjson's rule and their pointer.
type tokens struct {
	dec *jsontext.Decoder
}

func newTokens(body []byte) *tokens {
	return &tokens{dec: jsontext.NewDecoder(bytes.NewBuffer(body), jsontext.AllowDuplicateNames(true))}
}

// memberNames are the member names of the bodies read here, keyed by their
// JSON text, each boxed as a json.Token once: a string token costs its
// string and the boxing, two of a preflight's allocations per name.
var memberNames = func() map[string]json.Token {
	m := make(map[string]json.Token)
	for _, n := range []string{
		"actor", "args", "attestation", "audit_id", "context", "decision_chain", "depends_on",
		"expected_evidence", "id", "intent", "issued_at", "kind", "node_id", "plan", "plan_hash",
		"preflight_id", "provenance", "request", "request_id", "required_rollback", "result",
		"rollback", "session_id", "status", "step_id", "steps", "summary", "zone",
	} {
		m[`"`+n+`"`] = n
	}
	return m
}()

// Token returns the next token.
func (t *tokens) Token() (json.Token, error) {
	if t.dec.PeekKind() == '"' {
		return t.str()
	}
	tok, err := t.dec.ReadToken()
	if err != nil {
		return nil, err
	}
	// Strings, the next token's kind '"', are str's.
	switch k := tok.Kind(); k {
	case '{', '}', '[', ']':
		return json.Delim(k), nil
	case '0':
		return json.Number(tok.String()), nil
	case 't':
		return true, nil
	case 'f':
		return false, nil
	}
	return nil, nil
}

// str reads a string token: a member name of memberNames without
// allocating, any other string written without escapes in one allocation,
// the rest unquoted by jsontext.
func (t *tokens) str() (json.Token, error) {
	v, err := t.dec.ReadValue()
	if err != nil {
		return nil, err
	}
	if tok, ok := memberNames[string(v)]; ok {
		return tok, nil
	}
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1]), nil
	}
	b, err := jsontext.AppendUnquote(nil, v)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// More reports whether the array or object being read has another element,
// as encoding/json's Decoder.More does: the next byte that is not white
// space is neither ']' nor '}'. The decoder holds the whole body, so its
// unread buffer is the rest of it.
func (t *tokens) More() bool {
	b := bytes.TrimLeft(t.dec.UnreadBuffer(), " \t\r\n")
	return len(b) > 0 && b[0] != ']' && b[0] != '}'
}

// InputOffset is the offset just past the last token read.
func (t *tokens) InputOffset() int64 { return t.dec.InputOffset() }

// Raw reads the next value as it is written.
func (t *tokens) Raw() (json.RawMessage, error) {
	v, err := t.dec.ReadValue()
	if err != nil {
		return nil, err
	}
	return json.RawMessage(bytes.Clone(v)), nil
}

// syntaxError is the message for a read that failed at path.
func syntaxError(path string, err error) *RequestError {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return malformed(path, "unexpected end of JSON input")
	}
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		return malformed(path, fmt.Sprintf("invalid JSON at byte %d: %s", syn.ByteOffset, syn.Err))
	}
	return malformed(path, "invalid JSON: "+err.Error())
}
