package binding

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/contractrefine/autonomy/internal/canon"
	"github.com/contractrefine/autonomy/internal/jsonptr"
	"github.com/contractrefine/autonomy/internal/strictjson"
)

// parseBody decodes a gated body into the generic values canon.Parse
// returns (numbers keep their text as json.Number) and refuses a body that
// names a member twice, as strictjson.Decode does, with the same errors,
// but without its token-by-token pass on the common body. Decoding into maps merges repeated names, so a body
// whose text has as many members (name separators outside strings) as its
// decoded objects hold has none; a body of exactly one value followed by
// nothing but whitespace has nothing left for the two-pass reading to
// refuse. Anything else (a syntax error, trailing data, fewer members held
// than written) is read again the two-pass way for its error. Before all
// that, canon.ParseStrict takes a body that is one value naming no member
// twice, with a fraction of the allocations.
func parseBody(b []byte) (any, error) {
	if doc, ok := canon.ParseStrict(b); ok {
		return doc, nil // one value, no name twice
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err == nil && onlySpace(b[dec.InputOffset():]) && membersWritten(b) == membersHeld(doc) {
		return doc, nil
	}
	doc, err := strictjson.Decode(b)
	if errors.Is(err, strictjson.ErrDuplicateName) {
		return nil, fmt.Errorf("body is ambiguous: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("body is not JSON: %w", err)
	}
	return doc, nil
}

// onlySpace reports whether b is JSON whitespace only.
func onlySpace(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return false
		}
	}
	return true
}

// membersWritten counts the name separators outside strings in b, which
// the caller has decoded as one JSON value: in JSON text each is exactly
// one object member.
func membersWritten(b []byte) int {
	n := 0
	inString := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case inString && c == '\\':
			i++ // the escaped character, which may be a quote
		case c == '"':
			inString = !inString
		case c == ':' && !inString:
			n++
		}
	}
	return n
}

// membersHeld counts the members of every object in a decoded value.
func membersHeld(v any) int {
	switch t := v.(type) {
	case map[string]any:
		n := len(t)
		for _, e := range t {
			n += membersHeld(e)
		}
		return n
	case []any:
		n := 0
		for _, e := range t {
			n += membersHeld(e)
		}
		return n
	}
	return 0
}

// checkValues returns an error when the parsed body holds what readers
// read apart. An object that names two members that differ only in case
// (canon.FoldKey) wraps errDuplicateKey: encoding/json matches member names
// to struct fields without regard to case and keeps the last match, so a
// Go tool runtime reads {"kind":"tool.echo","KIND":"tool.shell"} as a call
// of tool.shell while the gate, reading names exactly, would judge
// tool.echo. A number beyond the double's range (1e400) wraps
// canon.ErrNumber: it has no canonical form to digest or record, and
// runtimes read it as infinity, as an error or exactly. A member name
// holding a NUL wraps errNULName.
func checkValues(v any) error {
	return walkValues(v, func(n json.Number) error {
		_, err := canon.Number(n)
		return err
	})
}

// checkExactValues is checkValues refusing also a number whose text names
// another value than its double (canon.ErrInexact): 75.000000000000001
// judged as 75, or -1e-400 as 0, while a reader keeping the text sees
// another value.
func checkExactValues(v any) error { return walkValues(v, canon.CheckNumber) }

// walkValues checks v's member names as checkValues describes, and each
// number with number.
func walkValues(v any, number func(json.Number) error) error {
	switch t := v.(type) {
	case map[string]any:
		if len(t) > 1 {
			if err := uniqueFolded(t); err != nil {
				return err
			}
		}
		for k, e := range t {
			if strings.IndexByte(k, 0) >= 0 {
				return fmt.Errorf("%w: %q", errNULName, k)
			}
			if err := walkValues(e, number); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range t {
			if err := walkValues(e, number); err != nil {
				return err
			}
		}
	case json.Number:
		return number(t)
	}
	return nil
}

// resolveExact resolves ptr in doc, refusing a member that stands where
// ptr names another spelling of it ("ARGS", "Args" or "arg\u017f" for /args,
// with no "args" beside it): resolving ptr exactly would read nothing
// there, while a runtime that matches names without regard to case (Go's
// encoding/json) reads that member.
func resolveExact(doc any, ptr string) (any, bool, error) {
	v, ok, near := jsonptr.ResolveNear(doc, ptr, canon.FoldKey)
	if near != "" {
		return nil, false, fmt.Errorf("%w: %q stands where %s names another spelling of it", errMisspelt, near, ptr)
	}
	return v, ok, nil
}

// uniqueFolded applies strictjson's name rule to one decoded object, whose
// exact repeats the decoding already merged.
func uniqueFolded(m map[string]any) error {
	var names strictjson.Names
	for name := range m {
		if prev, dup := names.Add(name); dup {
			a, b := min(prev, name), max(prev, name) // the same error whatever the map's order
			return fmt.Errorf("%w: %q and %q differ only in case", errDuplicateKey, a, b)
		}
	}
	return nil
}

// numberError is a number in args that does not round-trip through a
// double, at pointer.
type numberError struct {
	pointer string
	err     error
}

func (e *numberError) Error() string { return e.pointer + ": " + e.err.Error() }
func (e *numberError) Unwrap() error { return e.err }

// exactNumbers returns a *numberError for the first number under v (the
// args, at ptr) whose text names another value than the double its
// canonical digest holds (canon.CheckNumber): the digest would match a
// preflight bound to 9007199254740992 for a call of 9007199254740993,
// which a runtime keeping the number's text (Go's json.Number) acts on.
// The pointer is the first in sorted member order, so the same body always
// names the same one; members are sorted only once one is found.
func exactNumbers(v any, ptr string) error {
	if err := numbersIn(v, "", false); err == nil {
		return nil
	}
	return numbersIn(v, ptr, true)
}

// numbersIn is exactNumbers' walk; named builds the pointer and visits
// members in sorted order.
func numbersIn(v any, ptr string, named bool) error {
	switch t := v.(type) {
	case map[string]any:
		if !named {
			for _, e := range t {
				if err := numbersIn(e, "", false); err != nil {
					return err
				}
			}
			return nil
		}
		for _, k := range slices.Sorted(maps.Keys(t)) {
			if err := numbersIn(t[k], ptr+"/"+jsonptr.Escape(k), true); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range t {
			p := ""
			if named {
				p = ptr + "/" + strconv.Itoa(i)
			}
			if err := numbersIn(e, p, named); err != nil {
				return err
			}
		}
	case json.Number:
		if err := canon.CheckNumber(t); err != nil {
			return &numberError{pointer: ptr, err: err}
		}
	}
	return nil
}
