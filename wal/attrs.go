package wal

import (
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
	e, err := encodeAttrs(in.Attrs)
	if err != nil {
		return in, err
	}
	if db.opts.Replica != "" {
		if e, err = e.withReplica(db.opts.Replica); err != nil {
			return in, err
		}
	}
	in.Attrs = e
	return in, nil
}

// AttrReplica is the attr naming the replica that wrote a frame.
const AttrReplica = "replica"

// withReplica returns e with "replica" set to name, unless the attrs name a
// replica already.
func (e *encodedAttrs) withReplica(name string) (*encodedAttrs, error) {
	if e.replicaSet {
		return e, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(e.canonical, &m); err != nil {
		return nil, fmt.Errorf("wal: frame attrs: %w", err)
	}
	if _, ok := m[AttrReplica]; ok {
		return &encodedAttrs{canonical: e.canonical, packed: e.packed, replicaSet: true}, nil
	}
	v, _ := json.Marshal(name)
	m[AttrReplica] = v
	b, err := canon.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("wal: frame attrs: %w", err)
	}
	return &encodedAttrs{canonical: b, packed: packAttrs(b), replicaSet: true}, nil
}
