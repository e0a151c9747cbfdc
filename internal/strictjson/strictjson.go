// Package strictjson reads JSON that must mean one thing to every reader:
// one value and nothing after it, numbers kept as their text, and one rule
// for member names: in one object, no two names are equal after
// canon.FoldKey. Parsers disagree on which of two equal names wins, and a
// Go runtime matches names to struct fields without regard to case, so
// {"kind":"tool.echo","KIND":"tool.shell"} is one call to the gate and
// another to the runtime. Every reader of the service (the gated body, the
// PreflightRequest, the envelope) applies this rule through Names.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/contractrefine/autonomy/internal/canon"
	"github.com/contractrefine/autonomy/internal/jsonptr"
)

var (
	// ErrDuplicateName reports an object that names two members equal after
	// canon.FoldKey: the same name twice, or two spellings of it.
	ErrDuplicateName = errors.New("strictjson: duplicate member name")
)

// smallObject is how many names Names keeps without a map: most objects of
// a request have fewer members.
const smallObject = 8

// Names applies the name rule to the members of one object, in the order
// they are read. The zero value is an object with no member yet; objects
// of up to eight members are checked without allocating.
type Names struct {
	n      int
	names  [smallObject]string
	folded [smallObject]string
	more   map[string]string // FoldKey(name) → name, past smallObject
}

// Add records the next member name and reports whether it repeats an
// earlier one; prev is that earlier name (equal to name for an exact
// repeat, another spelling of it otherwise). A repeated name is not
// recorded again.
func (s *Names) Add(name string) (prev string, repeated bool) {
	f := canon.FoldKey(name)
	for i := range min(s.n, smallObject) {
		if s.folded[i] == f {
			return s.names[i], true
		}
	}
	if p, ok := s.more[f]; ok {
		return p, true
	}
	if s.n < smallObject {
		s.names[s.n], s.folded[s.n] = name, f
	} else {
		if s.more == nil {
			s.more = make(map[string]string)
		}
		s.more[f] = name
	}
	s.n++
	return "", false
}

// NameError is a member name that repeats an earlier one of its object.
type NameError struct {
	Pointer string // JSON Pointer of the repeating member
	Name    string
	Prev    string // the earlier member: Name itself, or another spelling
}

func (e *NameError) Error() string {
	if e.Name == e.Prev {
		return fmt.Sprintf("strictjson: %s: member %q named twice", e.Pointer, e.Name)
	}
	return fmt.Sprintf("strictjson: %s: member %q differs from %q only in case", e.Pointer, e.Name, e.Prev)
}

// Unwrap makes a NameError match ErrDuplicateName.
func (e *NameError) Unwrap() error { return ErrDuplicateName }

// Decode reads b as one JSON value into the generic values canon.Parse
// returns (map[string]any, []any, string, bool, nil, json.Number). A
// syntax error or trailing data is canon.Parse's error; a repeated member
// name is a *NameError, the first in document order.
func Decode(b []byte) (any, error) {
	doc, err := canon.Parse(b)
	if err != nil {
		return nil, err
	}
	if err := CheckNames(b); err != nil {
		return nil, err
	}
	return doc, nil
}

// CheckNames applies the name rule to every object in the JSON text b and
// returns a *NameError for the first repeated name in document order, or
// the decoder's error when b is not JSON.
func CheckNames(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	// One level per open object or array; an array's names is nil.
	type level struct {
		names     *Names
		expectKey bool
		token     string // the reference token of the value being read
		index     int    // an array's next element
	}
	var stack []*level
	pointer := func() string {
		toks := make([]string, 0, len(stack))
		for _, l := range stack {
			toks = append(toks, l.token)
		}
		return jsonptr.Join(toks)
	}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			if len(stack) > 0 {
				return io.ErrUnexpectedEOF
			}
			return nil
		}
		if err != nil {
			return err
		}
		var top *level
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			continue
		}
		if top != nil && top.names != nil && top.expectKey {
			key, _ := tok.(string) // the decoder only yields strings as keys
			top.token = jsonptr.Escape(key)
			if prev, dup := top.names.Add(key); dup {
				return &NameError{Pointer: pointer(), Name: key, Prev: prev}
			}
			top.expectKey = false
			continue
		}
		// A value: the next token of an object is a key again.
		if top != nil {
			if top.names != nil {
				top.expectKey = true
			} else {
				top.token = strconv.Itoa(top.index)
				top.index++
			}
		}
		if d, ok := tok.(json.Delim); ok {
			l := &level{}
			if d == '{' {
				l.names, l.expectKey = &Names{}, true
			}
			stack = append(stack, l)
		}
	}
}
