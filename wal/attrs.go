package wal

import (
	"bytes"
	"encoding/json"
	"fmt"

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
	e, err := encodeNamed(in.Attrs, db.opts.Replica)
	if err != nil {
		return in, err
	}
	in.Attrs = e
	return in, nil
}

// encodeNamed is encodeAttrs(v), naming replica when it is set
// (withReplica), with the attrs packed once, as they are stored.
func encodeNamed(v any, replica string) (*encodedAttrs, error) {
	if e, ok := v.(*encodedAttrs); ok {
		if replica == "" {
			return e, nil
		}
		return e.withReplica(replica)
	}
	if replica == "" {
		return encodeAttrs(v)
	}
	b, err := EncodeAttrs(v)
	if err != nil {
		return nil, err
	}
	if b, err = namingReplica(b, replica); err != nil {
		return nil, err
	}
	return &encodedAttrs{canonical: b, packed: packAttrs(b), replicaSet: true}, nil
}

// AttrReplica is the attr naming the replica that wrote a frame.
const AttrReplica = "replica"

// withReplica returns e with "replica" set to name, unless the attrs name a
// replica already.
func (e *encodedAttrs) withReplica(name string) (*encodedAttrs, error) {
	if e.replicaSet {
		return e, nil
	}
	b, err := namingReplica(e.canonical, name)
	if err != nil {
		return nil, err
	}
	if bytes.Equal(b, e.canonical) {
		return &encodedAttrs{canonical: e.canonical, packed: e.packed, replicaSet: true}, nil
	}
	return &encodedAttrs{canonical: b, packed: packAttrs(b), replicaSet: true}, nil
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
