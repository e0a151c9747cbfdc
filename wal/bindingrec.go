package wal

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/contractrefine/autonomy/preflight"
)

// bindingRecordV1 is the version byte of the compact binding record that
// follows the frame's seq in a preflights value (format in doc.go).
const bindingRecordV1 = 1

// Tags of a step's args digest in the compact record. The digest is almost
// always "sha256:" and 64 lowercase hex digits, stored as its 32 raw bytes;
// anything else is kept as its text, so every value reads back unchanged.
const (
	digestText   = 0
	digestSHA256 = 1
)

const sha256Prefix = "sha256:"

var errBindingRecord = errors.New("malformed binding record")

// encodeBindingRecord is the preflights value of a binding whose
// autonomy.preflight frame has seq: everything the gate reads, so a cache
// miss neither reads nor inflates the frame.
func encodeBindingRecord(seq uint64, b *preflight.Binding) []byte {
	n := 8 + 1 + 4*binary.MaxVarintLen64 + len(b.AuditID) + len(b.Outcome) + len(b.ActorID) + len(b.Tenant) +
		3*binary.MaxVarintLen64
	for _, s := range b.Steps {
		n += 3*binary.MaxVarintLen64 + 1 + len(s.ID) + len(s.Kind) + len(s.ArgsDigest)
	}
	v := make([]byte, 8, n)
	binary.BigEndian.PutUint64(v, seq)
	v = append(v, bindingRecordV1)
	v = appendString(v, b.AuditID)
	v = appendString(v, string(b.Outcome))
	v = appendString(v, b.ActorID)
	v = appendString(v, b.Tenant)
	// The frame holds expires_at as RFC 3339 text in UTC: seconds and
	// nanoseconds give the same instant without the year limits of
	// UnixNano.
	t := b.ExpiresAt.UTC()
	v = binary.AppendVarint(v, t.Unix())
	v = binary.AppendUvarint(v, uint64(t.Nanosecond()))
	v = binary.AppendUvarint(v, uint64(len(b.Steps)))
	for _, s := range b.Steps {
		v = appendString(v, s.ID)
		v = appendString(v, s.Kind)
		v = appendDigest(v, s.ArgsDigest)
	}
	if b.NeedsApproval() {
		v = appendApprovals(v, b.Steps)
	}
	return v
}

// approvalsSection tags the optional part of a binding record that follows
// the steps when any step waits for an approval (doc.go). A record without
// it is the same bytes it always was.
const approvalsSection = 1

// appendApprovals writes the approvals section: per step, 0x00 for none,
// or 0x01, the authorities and the approval's expiry.
func appendApprovals(v []byte, steps []preflight.BoundStep) []byte {
	v = append(v, approvalsSection)
	for _, s := range steps {
		if s.Approval == nil {
			v = append(v, 0)
			continue
		}
		v = append(v, 1)
		v = binary.AppendUvarint(v, uint64(len(s.Approval.Authorities)))
		for _, a := range s.Approval.Authorities {
			v = appendString(v, a)
		}
		t := s.Approval.ExpiresAt.UTC()
		v = binary.AppendVarint(v, t.Unix())
		v = binary.AppendUvarint(v, uint64(t.Nanosecond()))
	}
	return v
}

// readApprovals reads the approvals section into steps.
func readApprovals(r *recReader, steps []preflight.BoundStep) {
	if r.byte() != approvalsSection {
		r.bad = true
		return
	}
	for i := range steps {
		switch r.byte() {
		case 0:
			continue
		case 1:
		default:
			r.bad = true
			return
		}
		n := r.uvarint()
		if n > uint64(len(r.b)) {
			r.bad = true
			return
		}
		a := &preflight.StepApproval{Authorities: make([]string, 0, n)}
		for j := uint64(0); j < n && !r.bad; j++ {
			a.Authorities = append(a.Authorities, string(r.bytes(r.uvarint())))
		}
		sec := r.varint()
		nsec := r.uvarint()
		if nsec >= uint64(time.Second) {
			r.bad = true
		}
		if r.bad {
			return
		}
		a.ExpiresAt = time.Unix(sec, int64(nsec)).UTC()
		steps[i].Approval = a
	}
}

func appendString(v []byte, s string) []byte {
	v = binary.AppendUvarint(v, uint64(len(s)))
	return append(v, s...)
}

func appendDigest(v []byte, d string) []byte {
	if hx, ok := strings.CutPrefix(d, sha256Prefix); ok && len(hx) == 64 && isLowerHex(hx) {
		if raw, err := hex.AppendDecode(append(v, digestSHA256), []byte(hx)); err == nil {
			return raw
		}
	}
	v = append(v, digestText)
	return appendString(v, d)
}

// isLowerHex reports whether s is lowercase hex digits only, the form
// hex.EncodeToString writes back, so the raw bytes restore the same text.
func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// indexSeq is the seq a preflights value names.
func indexSeq(v []byte) (uint64, bool) {
	if len(v) < 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(v), true
}

// CompactBinding returns b as a read of its compact record returns it: the
// same values, its strings sharing one allocation. The gate caches a
// binding it is handed at record time in this form, so a cache hit sees
// what a miss would read and the entry holds no part of the request it
// was derived from.
func CompactBinding(b *preflight.Binding) (preflight.Binding, error) {
	return decodeBindingRecord(b.PreflightID, encodeBindingRecord(0, b)[8:])
}

// decodeBindingRecord reads a compact record (v without its 8-byte seq).
// The binding's strings are substrings of one string: a cached binding is
// then one allocation for its text instead of one per field, and a cache
// miss allocates less.
func decodeBindingRecord(id string, v []byte) (preflight.Binding, error) {
	// The strings are gathered in text (on the stack while they fit) and
	// copied out of bbolt's bytes, valid only inside the transaction, at
	// once; ends has where each one ends.
	var textBuf [256]byte
	var endsBuf [16]int
	text, ends := textBuf[:0], endsBuf[:0]
	r := recReader{b: v}
	str := func() {
		text = append(text, r.bytes(r.uvarint())...)
		ends = append(ends, len(text))
	}
	if r.byte() != bindingRecordV1 {
		return preflight.Binding{}, errBindingRecord
	}
	str() // audit id
	str() // outcome
	str() // actor id
	str() // tenant
	sec := r.varint()
	nsec := r.uvarint()
	if nsec >= uint64(time.Second) {
		r.bad = true
	}
	n := r.uvarint()
	if n > uint64(len(r.b)) { // every step takes at least one byte
		r.bad = true
	}
	for i := uint64(0); i < n && !r.bad; i++ {
		str() // step id
		str() // kind
		switch r.byte() {
		case digestSHA256:
			text = hex.AppendEncode(append(text, sha256Prefix...), r.bytes(32))
			ends = append(ends, len(text))
		case digestText:
			str()
		default:
			r.bad = true
		}
	}
	if r.bad {
		return preflight.Binding{}, errBindingRecord
	}
	// The approvals section, when there is one, is read once the steps are.
	rest := r
	r.b = nil
	all, at := string(text), 0
	next := func() string {
		start := at
		at, ends = ends[0], ends[1:]
		return all[start:at]
	}
	b := preflight.Binding{PreflightID: id, AuditID: next(), Outcome: preflight.Outcome(next()),
		ActorID: next(), Tenant: next(), ExpiresAt: time.Unix(sec, int64(nsec)).UTC(),
		Steps: make([]preflight.BoundStep, n)}
	for i := range b.Steps {
		b.Steps[i] = preflight.BoundStep{ID: next(), Kind: next(), ArgsDigest: next()}
	}
	if len(rest.b) > 0 {
		readApprovals(&rest, b.Steps)
		if rest.bad || len(rest.b) != 0 {
			return preflight.Binding{}, errBindingRecord
		}
	}
	return b, nil
}

// recReader reads a compact record; the first short or malformed field
// sets bad, after which every read returns zero values.
type recReader struct {
	b   []byte
	bad bool
}

func (r *recReader) byte() byte {
	if r.bad || len(r.b) < 1 {
		r.bad = true
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *recReader) uvarint() uint64 {
	if r.bad {
		return 0
	}
	x, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return x
}

func (r *recReader) varint() int64 {
	if r.bad {
		return 0
	}
	x, n := binary.Varint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return x
}

func (r *recReader) bytes(n uint64) []byte {
	if r.bad || uint64(len(r.b)) < n {
		r.bad = true
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}
