package canon

import (
	"bytes"
	"strconv"
)

// Writer writes canonical JSON of a shape known in advance, member by
// member, for hot paths where building a map for Marshal costs more than
// the answer: the caller opens objects, names their members in sorted order
// (plain ASCII names, for which byte order is RFC 8785's order) and writes
// the values. The first error is kept and ends the writing of strings and
// values; Bytes reports it.
type Writer struct {
	buf   bytes.Buffer
	err   error
	first bool // the next member is the first of its object
	depth int  // objects open
	// extraName and extraValue are the member Insert gave the outermost
	// object, until it is written; extraValue nil: none.
	extraName  string
	extraValue []byte
}

// Insert has the object the caller writes, which must be the whole of what
// it writes, gain the member name: value (canonical JSON) in its sorted
// place among the members the caller names; a member the caller names name
// itself stands instead. name is a plain ASCII name, as Name takes.
func (w *Writer) Insert(name string, value []byte) { w.extraName, w.extraValue = name, value }

// inserted writes the Insert member when the outermost object is open and
// the member named next sorts past it, or the object ends (end).
func (w *Writer) inserted(next string, end bool) {
	if w.depth != 1 || w.extraValue == nil {
		return
	}
	switch {
	case !end && next == w.extraName:
		w.extraValue = nil
	case end || next > w.extraName:
		v := w.extraValue
		w.extraValue = nil
		w.Name(w.extraName)
		w.buf.Write(v)
	}
}

// Grow makes room for n more bytes.
func (w *Writer) Grow(n int) { w.buf.Grow(n) }

// Open starts an object.
func (w *Writer) Open() { w.buf.WriteByte('{'); w.first = true; w.depth++ }

// Close ends an object.
func (w *Writer) Close() {
	w.inserted("", true)
	w.buf.WriteByte('}')
	w.first = false
	w.depth--
}

// Name writes the separator and the name of the next member.
func (w *Writer) Name(n string) {
	w.inserted(n, false)
	if !w.first {
		w.buf.WriteByte(',')
	}
	w.first = false
	w.buf.WriteByte('"')
	w.buf.WriteString(n)
	w.buf.WriteString(`":`)
}

// String writes s as WriteString does.
func (w *Writer) String(s string) {
	if w.err == nil {
		w.err = writeString(&w.buf, s)
	}
}

// Bool writes true or false.
func (w *Writer) Bool(b bool) { w.buf.WriteString(strconv.FormatBool(b)) }

// Null writes null.
func (w *Writer) Null() { w.buf.WriteString("null") }

// Value writes v as WriteValue does: v must be made of the generic JSON
// values.
func (w *Writer) Value(v any) {
	if w.err == nil {
		w.err = WriteValue(&w.buf, v)
	}
}

// Any writes v as Marshal would: directly when it is made of the generic
// JSON values, through Marshal otherwise.
func (w *Writer) Any(v any) {
	if w.err != nil {
		return
	}
	mark := w.buf.Len()
	if err := WriteValue(&w.buf, v); err == nil {
		return
	}
	w.buf.Truncate(mark) // a string deep inside may have failed half-way
	b, err := Marshal(v)
	if err != nil {
		w.err = err
		return
	}
	w.buf.Write(b)
}

// Bytes returns what was written, or the first error.
func (w *Writer) Bytes() ([]byte, error) {
	if w.err != nil {
		return nil, w.err
	}
	return w.buf.Bytes(), nil
}

// Strings writes xs as a JSON array of strings, and a nil slice as null,
// as encoding/json does.
func (w *Writer) Strings(xs []string) { Array(w, xs, func(s *string) { w.String(*s) }) }

// Array writes xs as a JSON array, each element by elem, and a nil slice as
// null, as encoding/json does.
func Array[T any](w *Writer, xs []T, elem func(*T)) {
	if xs == nil {
		w.Null()
		return
	}
	w.buf.WriteByte('[')
	for i := range xs {
		if i > 0 {
			w.buf.WriteByte(',')
		}
		elem(&xs[i])
	}
	w.buf.WriteByte(']')
}
