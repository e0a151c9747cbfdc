package wal

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/contractrefine/autonomy/internal/canon"
)

// Frame kinds.
const (
	KindPreflight = "autonomy.preflight"
	KindDecision  = "autonomy.decision"
	KindConsumed  = "autonomy.preflight_consumed"
)

// Frame is one entry of the log.
type Frame struct {
	Seq       uint64          `json:"seq"`
	Kind      string          `json:"kind"`
	Timestamp string          `json:"timestamp"`
	AuditID   string          `json:"audit_id"`
	Attrs     json.RawMessage `json:"attrs"`
	PrevHash  string          `json:"prev_hash"`
	Hash      string          `json:"hash"`
}

// FrameInput is what a writer gives Tx.Append; the log assigns seq and hashes.
type FrameInput struct {
	Kind    string
	AuditID string
	Time    time.Time
	// Attrs is encoded to canonical JSON: the typed attrs of a frame kind
	// (PreflightAttrs, DecisionAttrs, …) write their own, CanonicalAttrs
	// are taken as they are, an error (attrs the writer could not encode)
	// fails the append, and any other value goes through canon.Marshal, a
	// json.RawMessage as JSON text.
	Attrs any
}

// TimestampFormat is how frame timestamps are written.
const TimestampFormat = time.RFC3339Nano

// hashBuffers hold the canonical bytes of a frame while it is hashed, so
// that hashing, which every append and every verified read does, allocates
// no buffer of a frame's size.
var hashBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// writeCanonical writes the bytes the hash covers to b: the canonical JSON
// of the frame without its hash. attrs must already be canonical.
func (f *Frame) writeCanonical(b *bytes.Buffer) {
	// The member names, quotes and seq take under 128 bytes.
	b.Grow(len(f.Attrs) + len(f.AuditID) + len(f.Kind) + len(f.PrevHash) + len(f.Timestamp) + 128)
	b.WriteString(`{"attrs":`)
	b.Write(f.Attrs)
	b.WriteString(`,"audit_id":`)
	writeJSONString(b, f.AuditID)
	b.WriteString(`,"kind":`)
	writeJSONString(b, f.Kind)
	b.WriteString(`,"prev_hash":`)
	writeJSONString(b, f.PrevHash)
	b.WriteString(`,"seq":`)
	b.Write(strconv.AppendUint(b.AvailableBuffer(), f.Seq, 10))
	b.WriteString(`,"timestamp":`)
	writeJSONString(b, f.Timestamp)
	b.WriteByte('}')
}

// encode returns the frame as stored: what encoding/json writes with HTML
// escaping off (its members in Frame's field order, attrs byte for byte),
// built by hand because this runs for every frame inside a commit.
func (f *Frame) encode() []byte {
	b := make([]byte, 0, len(f.Attrs)+len(f.AuditID)+len(f.Kind)+len(f.Timestamp)+len(f.PrevHash)+len(f.Hash)+128)
	return f.appendJSON(b, f.Attrs)
}

// appendJSON appends the frame's JSON, members in Frame's order, as
// encoding/json writes them with HTML escaping off. A nil attrs leaves the
// member out: that is the head of a packed frame.
func (f *Frame) appendJSON(b, attrs []byte) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, f.Seq, 10)
	b = append(b, `,"kind":`...)
	b = appendJSONString(b, f.Kind)
	b = append(b, `,"timestamp":`...)
	b = appendJSONString(b, f.Timestamp)
	b = append(b, `,"audit_id":`...)
	b = appendJSONString(b, f.AuditID)
	if attrs != nil {
		b = append(b, `,"attrs":`...)
		b = append(b, attrs...)
	}
	b = append(b, `,"prev_hash":`...)
	b = appendJSONString(b, f.PrevHash)
	b = append(b, `,"hash":`...)
	b = appendJSONString(b, f.Hash)
	return append(b, '}')
}

// appendJSONString appends s as encoding/json writes it with HTML escaping
// off. Printable ASCII other than '"' and '\\' is written as is; anything
// else goes through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(s) // a string always encodes
			return append(b, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func writeJSONString(b *bytes.Buffer, s string) {
	// canon.WriteString writes nothing when it fails, and only invalid
	// UTF-8 fails; keep the hash well defined by writing the bytes Go's
	// encoder would, which Verify reproduces the same way.
	if err := canon.WriteString(b, s); err != nil {
		enc, _ := json.Marshal(s)
		b.Write(enc)
	}
}

// computeHash returns the chain hash of f given its PrevHash.
func (f *Frame) computeHash() string {
	b := hashBuffers.Get().(*bytes.Buffer)
	b.Reset()
	b.WriteString(f.PrevHash)
	f.writeCanonical(b)
	sum := sha256.Sum256(b.Bytes())
	if b.Cap() <= 64<<10 { // a huge frame's buffer is not kept
		hashBuffers.Put(b)
	}
	return hex.EncodeToString(sum[:])
}

// hashMatches reports whether f.Hash is right.
func (f *Frame) hashMatches() bool { return f.computeHash() == f.Hash }

// encodeFrame is the stored (and exported) form of f. HTML escaping is off:
// encoding/json would otherwise rewrite <, > and & inside the canonical
// attrs, and the stored bytes would no longer hash to f.Hash.
func encodeFrame(f *Frame) ([]byte, error) {
	if err := f.checkAttrs(); err != nil {
		return nil, err
	}
	return f.encode(), nil
}

// checkAttrs reports ErrCorrupt unless f's attrs are JSON.
func (f *Frame) checkAttrs() error {
	if len(f.Attrs) == 0 || !validJSON(f.Attrs) {
		return fmt.Errorf("%w: frame %d attrs are not JSON", ErrCorrupt, f.Seq)
	}
	return nil
}

// DecodeFrame parses a stored frame, as JSON or packed (see pack.go). It
// rejects frames whose attrs are not a JSON object or whose required members
// are missing.
func DecodeFrame(b []byte) (Frame, error) {
	var f Frame
	if len(b) > 0 && isPacked(b[0]) {
		var err error
		if f, err = decodePacked(b); err != nil {
			return Frame{}, err
		}
	} else {
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			return Frame{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		if dec.More() {
			return Frame{}, fmt.Errorf("%w: trailing data after frame", ErrCorrupt)
		}
	}
	if f.Seq == 0 || f.Kind == "" || len(f.Attrs) == 0 || f.Attrs[0] != '{' || len(f.Hash) != 64 {
		return Frame{}, fmt.Errorf("%w: frame is missing seq, kind, attrs or hash", ErrCorrupt)
	}
	if _, err := time.Parse(TimestampFormat, f.Timestamp); err != nil {
		return Frame{}, fmt.Errorf("%w: bad timestamp %q", ErrCorrupt, f.Timestamp)
	}
	return f, nil
}

// Attr decodes one member of the frame's attrs into v. It reports false when
// the member is absent.
func (f *Frame) Attr(name string, v any) (bool, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(f.Attrs, &m); err != nil {
		return false, fmt.Errorf("%w: attrs: %v", ErrCorrupt, err)
	}
	raw, ok := m[name]
	if !ok {
		return false, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, fmt.Errorf("%w: attrs.%s: %v", ErrCorrupt, name, err)
	}
	return true, nil
}

// RawAttr returns the raw JSON of one member of attrs, or nil when absent.
func (f *Frame) RawAttr(name string) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(f.Attrs, &m); err != nil {
		return nil, fmt.Errorf("%w: attrs: %v", ErrCorrupt, err)
	}
	return m[name], nil
}
