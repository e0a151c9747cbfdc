package canon

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
)

// writeText writes the canonical form of the JSON text raw into buf, as
// write(Parse(raw)) does, without building the generic values: it reads the
// text with jsontext's decoder (no allocation per token) and writes each
// string and number with the same functions write uses, so the bytes are
// the same. A preflight body's digest went through Parse, an
// encoding/json decode into maps, and that was a tenth of a preflight's
// CPU (docs/PERFORMANCE.md, "CPU per call, preflight").
//
// It returns false, having written an unknown part of buf, for any text
// it does not take: not JSON, trailing data, a duplicate member name
// (encoding/json keeps the last one), text that is not UTF-8, or a number
// write refuses. The caller then takes the Parse path, which decides, so
// that every answer, an error included, is the one Parse and write give.
func writeText(buf *bytes.Buffer, raw []byte) bool {
	s := scanners.Get().(*scanner)
	defer s.release()
	s.raw = raw
	s.src.Reset()
	s.src.Write(raw) // the decoder reads a bytes.Buffer in place
	s.dec.Reset(&s.src)
	if !s.value(buf) {
		return false
	}
	_, err := s.dec.ReadToken()
	return errors.Is(err, io.EOF)
}

// parseText decodes the JSON text raw into the generic values Parse
// returns, through jsontext's decoder: a fraction of the allocations of
// encoding/json's decode into interface values, which was most of what a
// gated Check allocated for its body. It takes only text that is one JSON
// value with white space around it at most, in UTF-8, no \u escape of a
// lone surrogate and no object naming a member twice; for such text
// encoding/json gives the same values (FuzzParseText). It returns false for
// any other, and the caller then asks encoding/json, which decides.
func parseText(raw []byte) (any, bool) {
	s := scanners.Get().(*scanner)
	defer s.release()
	s.raw = raw
	s.src.Reset()
	s.src.Write(raw)
	s.dec.Reset(&s.src)
	v, ok := s.generic()
	if !ok {
		return nil, false
	}
	if _, err := s.dec.ReadToken(); !errors.Is(err, io.EOF) {
		return nil, false
	}
	return v, true
}

// ParseStrict is Parse for text that is one JSON value, in UTF-8, with no
// object naming a member twice (the text parseText takes), and false for
// any other text, which the caller reads its own way to find its error.
func ParseStrict(raw []byte) (any, bool) { return parseText(raw) }

// generic reads one value into generic values.
func (s *scanner) generic() (any, bool) {
	tok, err := s.dec.ReadToken()
	if err != nil {
		return nil, false
	}
	switch tok.Kind() {
	case '{':
		obj := map[string]any{}
		for s.dec.PeekKind() != '}' {
			tok, err := s.dec.ReadToken()
			if err != nil || tok.Kind() != '"' {
				return nil, false
			}
			name := tok.String() // before the next read voids tok
			v, ok := s.generic()
			if !ok {
				return nil, false
			}
			obj[name] = v
		}
		_, err := s.dec.ReadToken()
		return obj, err == nil
	case '[':
		arr := []any{}
		for s.dec.PeekKind() != ']' {
			v, ok := s.generic()
			if !ok {
				return nil, false
			}
			arr = append(arr, v)
		}
		_, err := s.dec.ReadToken()
		return arr, err == nil
	case '"':
		return tok.String(), true
	case '0':
		return json.Number(tok.String()), true
	case 't':
		return true, true
	case 'f':
		return false, true
	case 'n':
		return nil, true
	}
	return nil, false
}

// scanner is the reusable state of writeText and parseText.
type scanner struct {
	raw     []byte
	src     bytes.Buffer
	dec     *jsontext.Decoder
	members []member // a stack: each open object uses the tail it appended
	tmp     []byte
}

// member is one object member written into the output: its name as
// decoded, and where its "name":value sits in the output.
type member struct {
	name       []byte
	start, end int
}

var scanners = sync.Pool{New: func() any {
	s := new(scanner)
	s.dec = jsontext.NewDecoder(&s.src)
	return s
}}

// maxScannerBytes is the most a pooled scanner keeps of what it grew to.
const maxScannerBytes = 64 << 10

func (s *scanner) release() {
	s.raw = nil
	s.members = s.members[:0]
	if s.src.Cap() > maxScannerBytes || cap(s.tmp) > maxScannerBytes {
		return
	}
	s.src.Reset()
	scanners.Put(s)
}

// last is the text of the value or name the decoder just read.
func (s *scanner) last(n int) []byte {
	end := int(s.dec.InputOffset())
	return s.raw[end-n : end]
}

func (s *scanner) value(buf *bytes.Buffer) bool {
	switch s.dec.PeekKind() {
	case '{':
		return s.object(buf)
	case '[':
		if _, err := s.dec.ReadToken(); err != nil {
			return false
		}
		buf.WriteByte('[')
		for i := 0; s.dec.PeekKind() != ']'; i++ {
			if i > 0 {
				buf.WriteByte(',')
			}
			if !s.value(buf) {
				return false
			}
		}
		_, err := s.dec.ReadToken()
		buf.WriteByte(']')
		return err == nil
	case '"':
		v, err := s.dec.ReadValue()
		return err == nil && s.str(buf, s.last(len(v)))
	case '0':
		v, err := s.dec.ReadValue()
		return err == nil && s.number(buf, s.last(len(v)))
	case 'n', 't', 'f':
		v, err := s.dec.ReadValue()
		if err != nil {
			return false
		}
		buf.Write(v)
		return true
	}
	return false
}

// str writes the JSON string q (quotes included) in canonical form. One
// without a backslash is already in it: JSON text has no raw control
// characters or quotes inside a string, and the decoder has checked the
// UTF-8.
func (s *scanner) str(buf *bytes.Buffer, q []byte) bool {
	if bytes.IndexByte(q, '\\') < 0 {
		buf.Write(q)
		return true
	}
	u, err := jsontext.AppendUnquote(s.tmp[:0], q)
	s.tmp = u[:0]
	return err == nil && writeString(buf, string(u)) == nil
}

// number writes the JSON number n in canonical form. An integer of at most
// 15 digits is its own canonical form (a double holds it exactly, and
// JSON has no leading zeros), except -0.
func (s *scanner) number(buf *bytes.Buffer, n []byte) bool {
	digits := n
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	plain := len(digits) > 0 && len(digits) <= 15 && !(len(n) == 2 && n[1] == '0')
	for _, c := range digits {
		if c < '0' || c > '9' {
			plain = false
			break
		}
	}
	if plain {
		buf.Write(n)
		return true
	}
	f, err := Number(json.Number(n))
	return err == nil && writeNumber(buf, f) == nil
}

// object writes an object with its members sorted as write sorts them: each
// "name":value is written as it comes, then the members are put in order.
func (s *scanner) object(buf *bytes.Buffer) bool {
	if _, err := s.dec.ReadToken(); err != nil {
		return false
	}
	base := len(s.members)
	defer func() { s.members = s.members[:base] }()
	open := buf.Len()
	buf.WriteByte('{')
	for s.dec.PeekKind() != '}' {
		if len(s.members) > base {
			buf.WriteByte(',')
		}
		start := buf.Len()
		q, err := s.dec.ReadValue() // the name: the decoder refuses duplicates
		if err != nil {
			return false
		}
		q = s.last(len(q))
		name := q[1 : len(q)-1]
		if bytes.IndexByte(q, '\\') >= 0 {
			if name, err = jsontext.AppendUnquote(nil, q); err != nil {
				return false
			}
		}
		if !s.str(buf, q) {
			return false
		}
		buf.WriteByte(':')
		if !s.value(buf) {
			return false
		}
		s.members = append(s.members, member{name: name, start: start, end: buf.Len()})
	}
	if _, err := s.dec.ReadToken(); err != nil {
		return false
	}
	buf.WriteByte('}')
	ms := s.members[base:]
	byName := func(a, b member) int { return compareUTF16(a.name, b.name) }
	if slices.IsSortedFunc(ms, byName) {
		return true
	}
	// Put the members in order: copy them out, sort, write them back.
	s.tmp = append(s.tmp[:0], buf.Bytes()[open:]...)
	for i := range ms {
		ms[i].start -= open
		ms[i].end -= open
	}
	slices.SortFunc(ms, byName)
	buf.Truncate(open)
	buf.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(s.tmp[m.start:m.end])
	}
	buf.WriteByte('}')
	return true
}
