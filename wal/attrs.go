package wal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/contractrefine/autonomy/internal/canon"
	"github.com/go-json-experiment/json/jsontext"
)

// validJSON reports whether b is one JSON value, as encoding/json's Valid
// does (duplicate names and strings that are not UTF-8 are syntax too),
// through jsontext's decoder: a quarter of the time on a preflight's
// decision, which every recorded preflight checks (docs/PERFORMANCE.md).
func validJSON(b []byte) bool {
	return jsontext.Value(b).IsValid(jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
}

// encodedAttrs is attrs already in canonical JSON, and packed (compressed)
// when they are large enough to be stored that way. The write helpers
// encode attrs in the caller's goroutine before queueing, so the commit
// (which every writer waits on) spends no time on either.
type encodedAttrs struct {
	canonical []byte
	packed    []byte // nil: stored as they are
	// replicaSet: withReplica has run, so canonical names a replica.
	replicaSet bool
}

// CanonicalAttrs is frame attrs already in canonical JSON, written by
// their typed encoder before the log's transaction (DecisionAttrs.Canonical):
// they are stored as they are.
type CanonicalAttrs []byte

// encodeAttrs returns v's canonical JSON and, for large attrs, their packed
// form.
func encodeAttrs(v any) (*encodedAttrs, error) {
	if e, ok := v.(*encodedAttrs); ok {
		return e, nil
	}
	b, err := EncodeAttrs(v)
	if err != nil {
		return nil, err
	}
	return &encodedAttrs{canonical: b, packed: packAttrs(b)}, nil
}

// EncodeAttrs returns the attrs bytes a frame with Attrs v carries (the
// hash covers them): nil is {}, CanonicalAttrs are taken as they are, the
// typed attrs of frameattrs.go write their own canonical JSON, an error
// (attrs the writer could not encode) is returned, and anything else goes
// through canon.Marshal.
func EncodeAttrs(v any) ([]byte, error) {
	var b []byte
	var err error
	switch t := v.(type) {
	case nil:
		return []byte("{}"), nil
	case CanonicalAttrs:
		return t, nil
	case error:
		err = t
	case typedAttrs:
		b, err = canonicalOf(t)
	default:
		b, err = canon.Marshal(v)
	}
	if err != nil {
		return nil, fmt.Errorf("wal: frame attrs: %w", err)
	}
	return b, nil
}

// preEncode returns in with its attrs encoded and, when the log names its
// replica, naming it: the commit loop then only appends them.
func (db *DB) preEncode(in FrameInput) (FrameInput, error) {
	e, err := encodeNamed(in.Attrs, db.replica)
	if err != nil {
		return in, err
	}
	in.Attrs = e
	return in, nil
}

// replicaName is the replica a log names in its frames' attrs (Options.Replica),
// with the name's canonical JSON, made once when the log opens.
type replicaName struct {
	name string // "": the log names no replica
	json []byte
}

// newReplicaName is name as namingReplica writes it, canonical: bytes that
// are not UTF-8 become U+FFFD, as encoding/json writes them.
func newReplicaName(name string) (replicaName, error) {
	jv, _ := json.Marshal(name)
	b, err := canon.Marshal(json.RawMessage(jv))
	if err != nil {
		return replicaName{}, fmt.Errorf("wal: replica name: %w", err)
	}
	return replicaName{name: name, json: b}, nil
}

// encodeNamed is encodeAttrs(v), naming replica when it is set
// (withReplica), with the attrs packed once, as they are stored.
func encodeNamed(v any, replica replicaName) (*encodedAttrs, error) {
	if e, ok := v.(*encodedAttrs); ok {
		if replica.name == "" {
			return e, nil
		}
		return e.withReplica(replica)
	}
	if replica.name == "" {
		return encodeAttrs(v)
	}
	var b []byte
	var err error
	if t, ok := v.(typedAttrs); ok {
		// The typed writer puts the member in its place as it writes.
		if b, err = canonicalNaming(t, replica.json); err != nil {
			return nil, fmt.Errorf("wal: frame attrs: %w", err)
		}
	} else if b, err = EncodeAttrs(v); err != nil {
		return nil, err
	} else if b, err = namingInCanonical(b, replica); err != nil {
		return nil, err
	}
	return &encodedAttrs{canonical: b, packed: packAttrs(b), replicaSet: true}, nil
}

// AttrReplica is the attr naming the replica that wrote a frame.
const AttrReplica = "replica"

// withReplica returns e with "replica" set to name, unless the attrs name a
// replica already.
func (e *encodedAttrs) withReplica(name replicaName) (*encodedAttrs, error) {
	if e.replicaSet {
		return e, nil
	}
	b, err := namingInCanonical(e.canonical, name)
	if err != nil {
		return nil, err
	}
	if bytes.Equal(b, e.canonical) {
		return &encodedAttrs{canonical: e.canonical, packed: e.packed, replicaSet: true}, nil
	}
	return &encodedAttrs{canonical: b, packed: packAttrs(b), replicaSet: true}, nil
}

// namingInCanonical is namingReplica for attrs in canonical form, which
// every encoded attrs are: it finds the place of "replica" among the
// object's members without writing the rest again. The text is walked with
// jsontext, values skipped, and the member is spliced in; anything it does
// not expect of canonical attrs (not one object, a name that is not ASCII
// or is out of order) goes to namingReplica. Naming every frame this
// way took a twelfth of a consume's CPU on etcd through canon.Marshal
// (docs/PERFORMANCE.md).
func namingInCanonical(canonical []byte, name replicaName) ([]byte, error) {
	dec := jsontext.NewDecoder(bytes.NewReader(canonical))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return namingReplica(canonical, name.name)
	}
	// at is where the member goes: after the '{', or after the last member
	// that sorts before it (before).
	at, before := dec.InputOffset(), false
	prev, members, named := "", 0, false
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil {
			return namingReplica(canonical, name.name)
		}
		k := tok.String()
		if !asciiName(k) || (members > 0 && k <= prev) {
			return namingReplica(canonical, name.name)
		}
		if err := dec.SkipValue(); err != nil {
			return namingReplica(canonical, name.name)
		}
		switch {
		case k == AttrReplica:
			named = true
		case k < AttrReplica:
			at, before = dec.InputOffset(), true
		}
		prev, members = k, members+1
	}
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '}' {
		return namingReplica(canonical, name.name)
	}
	if _, err := dec.ReadToken(); err != io.EOF {
		return namingReplica(canonical, name.name)
	}
	if named {
		return canonical, nil
	}
	v := name.json
	out := make([]byte, 0, len(canonical)+len(AttrReplica)+len(v)+4)
	out = append(out, canonical[:at]...)
	if before {
		out = append(out, ',')
	}
	out = append(out, `"`+AttrReplica+`":`...)
	out = append(out, v...)
	if !before && members > 0 {
		out = append(out, ',')
	}
	return append(out, canonical[at:]...), nil
}

// asciiName reports whether k is printable ASCII with nothing canonical JSON
// escapes, so that its byte order is the order canon sorts members in.
func asciiName(k string) bool {
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// namingReplica returns the canonical attrs object canonical with the
// member "replica": name added, or as it is when it names a replica
// already. The member goes first and canon.Marshal puts it in its place
// (its decoder takes the text without building values); an object that
// names a replica already has the name twice, which canon.Marshal leaves
// to encoding/json, whose last member wins: the attrs' own. Text that is
// not an object is decoded as a map, as it always was, for its error.
func namingReplica(canonical []byte, name string) ([]byte, error) {
	v, _ := json.Marshal(name)
	if n := len(canonical); n >= 2 && canonical[0] == '{' && canonical[n-1] == '}' {
		raw := make([]byte, 0, n+len(AttrReplica)+len(v)+4)
		raw = append(raw, `{"`+AttrReplica+`":`...)
		raw = append(raw, v...)
		if n > 2 {
			raw = append(raw, ',')
		}
		raw = append(raw, canonical[1:]...)
		if b, err := canon.Marshal(raw); err == nil {
			return b, nil
		}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(canonical, &m); err != nil {
		return nil, fmt.Errorf("wal: frame attrs: %w", err)
	}
	if _, ok := m[AttrReplica]; ok {
		return canonical, nil
	}
	m[AttrReplica] = v
	b, err := canon.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("wal: frame attrs: %w", err)
	}
	return b, nil
}
