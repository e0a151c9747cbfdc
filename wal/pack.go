package wal

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	kflate "github.com/klauspost/compress/flate"
)

// Packed frames. A frame whose canonical attrs are at least packMin bytes
// (in practice the autonomy.preflight frames, which carry the decision) is
// stored as
//
//	0x01  uvarint(n)  n bytes: the attrs, DEFLATE-compressed (RFC 1951)  head
//
// where head is the frame's JSON without its attrs member. Everything else
// is stored as its JSON, which always starts with '{'. The hash covers the
// canonical attrs, as for every frame, so packing changes nothing that
// Verify checks or that readers see: DecodeFrame gives back the same Frame.
const (
	packMarker = 0x01
	packMin    = 1024
	// maxUnpacked bounds what one stored frame may inflate to, so a damaged
	// or hostile file cannot make a reader allocate without limit.
	maxUnpacked = 64 << 20
)

var (
	// Packing uses klauspost/compress's DEFLATE writer: the same format,
	// which the standard library's reader below inflates, written in 8 µs
	// instead of 12 to 15 for a one-step preflight's attrs, where packing
	// was a fifth of a preflight's CPU (BenchmarkPackAttrs,
	// docs/PERFORMANCE.md).
	flateWriters = sync.Pool{New: func() any {
		w, _ := kflate.NewWriter(nil, kflate.BestSpeed) // the level is valid
		return w
	}}
	flateReaders = sync.Pool{New: func() any { return flate.NewReader(bytes.NewReader(nil)) }}
)

// packAttrs compresses large canonical attrs. It returns nil when attrs are
// small or do not shrink by a quarter, and the frame is stored as JSON.
func packAttrs(attrs []byte) []byte {
	if len(attrs) < packMin {
		return nil
	}
	var buf bytes.Buffer
	buf.Grow(len(attrs) / 2)
	w := flateWriters.Get().(*kflate.Writer)
	w.Reset(&buf)
	_, _ = w.Write(attrs) // writes to a bytes.Buffer do not fail
	_ = w.Close()
	flateWriters.Put(w)
	if buf.Len() > len(attrs)*3/4 {
		return nil
	}
	return buf.Bytes()
}

// encodePacked returns the packed stored form of f, whose attrs compress to
// packed.
func (f *Frame) encodePacked(packed []byte) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(packed)+len(f.AuditID)+len(f.Kind)+len(f.Timestamp)+len(f.PrevHash)+len(f.Hash)+96)
	b = append(b, packMarker)
	b = binary.AppendUvarint(b, uint64(len(packed)))
	b = append(b, packed...)
	return f.appendJSON(b, nil)
}

// unpack splits a packed stored frame into its head JSON and its inflated
// attrs.
func unpack(b []byte) (head, attrs []byte, err error) {
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || n > uint64(len(b)-1-k) {
		return nil, nil, fmt.Errorf("%w: packed frame with a bad length", ErrCorrupt)
	}
	packed := b[1+k : 1+k+int(n)]
	head = b[1+k+int(n):]
	r := flateReaders.Get().(io.ReadCloser)
	defer flateReaders.Put(r)
	if err := r.(flate.Resetter).Reset(bytes.NewReader(packed), nil); err != nil {
		return nil, nil, fmt.Errorf("%w: packed attrs: %v", ErrCorrupt, err)
	}
	var out bytes.Buffer
	out.Grow(len(packed) * 3)
	if _, err := out.ReadFrom(io.LimitReader(r, maxUnpacked+1)); err != nil {
		return nil, nil, fmt.Errorf("%w: packed attrs: %v", ErrCorrupt, err)
	}
	if out.Len() > maxUnpacked {
		return nil, nil, fmt.Errorf("%w: packed attrs inflate past %d bytes", ErrCorrupt, maxUnpacked)
	}
	return head, out.Bytes(), nil
}

// frameHead returns JSON holding the stored frame's members other than
// attrs, without inflating anything: the frame itself when it is stored as
// JSON, its head when packed. Readers that need only seq, kind or
// timestamp decode this.
func frameHead(b []byte) []byte {
	if len(b) == 0 || b[0] != packMarker {
		return b
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || n > uint64(len(b)-1-k) {
		return nil
	}
	return b[1+k+int(n):]
}

// decodePacked is DecodeFrame for a packed stored frame.
func decodePacked(b []byte) (Frame, error) {
	head, attrs, err := unpack(b)
	if err != nil {
		return Frame{}, err
	}
	var h struct {
		Seq       uint64 `json:"seq"`
		Kind      string `json:"kind"`
		Timestamp string `json:"timestamp"`
		AuditID   string `json:"audit_id"`
		PrevHash  string `json:"prev_hash"`
		Hash      string `json:"hash"`
	}
	dec := json.NewDecoder(bytes.NewReader(head))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return Frame{}, fmt.Errorf("%w: packed frame head: %v", ErrCorrupt, err)
	}
	if dec.More() {
		return Frame{}, fmt.Errorf("%w: trailing data after frame", ErrCorrupt)
	}
	if !validJSON(attrs) {
		return Frame{}, fmt.Errorf("%w: packed attrs are not JSON", ErrCorrupt)
	}
	return Frame{Seq: h.Seq, Kind: h.Kind, Timestamp: h.Timestamp, AuditID: h.AuditID,
		Attrs: attrs, PrevHash: h.PrevHash, Hash: h.Hash}, nil
}
