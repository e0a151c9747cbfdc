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
	v := make([]byte, 8, 8+recordSize(b))
	binary.BigEndian.PutUint64(v, seq)
	return appendBindingRecord(v, b)
}

// recordSize is at least the size of b's compact record.
func recordSize(b *preflight.Binding) int {
	n := 1 + 4*binary.MaxVarintLen64 + len(b.AuditID) + len(b.Outcome) + len(b.ActorID) + len(b.Tenant) +
		3*binary.MaxVarintLen64
	for _, s := range b.Steps {
		n += 3*binary.MaxVarintLen64 + 1 + len(s.ID) + len(s.Kind) + len(s.ArgsDigest)
	}
	return n
}

// appendBindingRecord appends b's compact record (format in doc.go).
func appendBindingRecord(v []byte, b *preflight.Binding) []byte {
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
		if n > uint64(len(r.s)) {
			r.bad = true
			return
		}
		a := &preflight.StepApproval{Authorities: make([]string, 0, n)}
		for j := uint64(0); j < n && !r.bad; j++ {
			a.Authorities = append(a.Authorities, r.str())
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
// same values, its strings copied out of b.
func CompactBinding(b *preflight.Binding) (preflight.Binding, error) {
	return decodeBindingRecord(b.PreflightID, encodeBindingRecord(0, b)[8:])
}

// PackBinding returns b's preflight id and compact record in one string:
// the form the gate's binding cache keeps a binding in, one allocation
// instead of a preflight.Binding, its steps and its text. UnpackBinding
// reads it.
func PackBinding(b *preflight.Binding) string {
	v := appendString(make([]byte, 0, binary.MaxVarintLen64+len(b.PreflightID)+recordSize(b)), b.PreflightID)
	return string(appendBindingRecord(v, b))
}

// PackedID is the preflight id of p (PackBinding), a substring of it.
func PackedID(p string) string {
	r := recReader{s: p}
	return r.str()
}

// UnpackBinding fills b with the binding packed in p (PackBinding): the
// values a read of its record returns, the strings substrings of p but for
// the sha256 args digests (one new string each). The steps go in steps'
// memory when they fit, else in a new slice.
func UnpackBinding(p string, b *preflight.Binding, steps []preflight.BoundStep) error {
	r := recReader{s: p}
	id := r.str()
	return r.binding(id, b, steps)
}

// decodeBindingRecord reads a compact record (v without its 8-byte seq).
// The binding's strings are substrings of one copy of v, but for the sha256
// args digests.
func decodeBindingRecord(id string, v []byte) (preflight.Binding, error) {
	var b preflight.Binding
	r := recReader{s: string(v)} // bbolt's bytes are valid only inside the transaction
	err := r.binding(id, &b, nil)
	return b, err
}

// binding reads the record of the binding with id into b; its steps go in
// steps' memory when they fit, else in a new slice.
func (r *recReader) binding(id string, b *preflight.Binding, steps []preflight.BoundStep) error {
	if r.byte() != bindingRecordV1 {
		return errBindingRecord
	}
	*b = preflight.Binding{PreflightID: id, AuditID: r.str(), Outcome: preflight.Outcome(r.str()),
		ActorID: r.str(), Tenant: r.str()}
	sec := r.varint()
	nsec := r.uvarint()
	n := r.uvarint()
	if nsec >= uint64(time.Second) || n > uint64(len(r.s)) { // every step takes at least one byte
		r.bad = true
	}
	if r.bad {
		*b = preflight.Binding{}
		return errBindingRecord
	}
	if n > uint64(cap(steps)) || steps == nil {
		steps = make([]preflight.BoundStep, n)
	}
	steps = steps[:n]
	for i := range steps {
		steps[i] = preflight.BoundStep{ID: r.str(), Kind: r.str(), ArgsDigest: r.digest()}
	}
	// The approvals section, when there is one, follows the steps.
	if !r.bad && r.s != "" {
		readApprovals(r, steps)
	}
	if r.bad || r.s != "" {
		*b = preflight.Binding{}
		return errBindingRecord
	}
	b.ExpiresAt, b.Steps = time.Unix(sec, int64(nsec)).UTC(), steps
	return nil
}

// recReader reads a compact record; the first short or malformed field
// sets bad, after which every read returns zero values.
type recReader struct {
	s   string
	bad bool
}

func (r *recReader) byte() byte {
	if r.bad || len(r.s) < 1 {
		r.bad = true
		return 0
	}
	c := r.s[0]
	r.s = r.s[1:]
	return c
}

// uvarint reads what binary.AppendUvarint wrote, as binary.Uvarint does.
func (r *recReader) uvarint() uint64 {
	var x uint64
	for i := 0; !r.bad; i++ {
		if i == binary.MaxVarintLen64 || i >= len(r.s) {
			break
		}
		c := r.s[i]
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				break // overflow
			}
			r.s = r.s[i+1:]
			return x | uint64(c)<<(7*i)
		}
		x |= uint64(c&0x7f) << (7 * i)
	}
	r.bad = true
	return 0
}

// varint reads what binary.AppendVarint wrote.
func (r *recReader) varint() int64 {
	ux := r.uvarint()
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x
}

// str reads a string: its length and bytes.
func (r *recReader) str() string {
	return r.bytes(r.uvarint())
}

func (r *recReader) bytes(n uint64) string {
	if r.bad || uint64(len(r.s)) < n {
		r.bad = true
		return ""
	}
	p := r.s[:n]
	r.s = r.s[n:]
	return p
}

// digest reads a step's args digest (appendDigest).
func (r *recReader) digest() string {
	switch r.byte() {
	case digestSHA256:
		raw := r.bytes(32)
		if r.bad {
			return ""
		}
		const hexDigits = "0123456789abcdef"
		var t [len(sha256Prefix) + 64]byte
		n := copy(t[:], sha256Prefix)
		for i := 0; i < len(raw); i++ {
			t[n+2*i], t[n+2*i+1] = hexDigits[raw[i]>>4], hexDigits[raw[i]&15]
		}
		return string(t[:])
	case digestText:
		return r.str()
	}
	r.bad = true
	return ""
}
