package wal

import (
	"bytes"
	"compress/flate"
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"sync"

	kflate "github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/s2"
)

// Packed frames. A frame whose canonical attrs are at least packMin bytes
// (in practice the autonomy.preflight frames, which carry the decision) is
// stored as
//
//	marker  uvarint(n)  n bytes: the packed attrs  head
//
// where head is the frame's JSON without its attrs member, and marker says
// how the attrs were packed:
//
//	0x02  an S2 block (github.com/klauspost/compress/s2) against dictionary
//	      1: the bytes of packdict1.txt, with the repeat offset at 0. The log
//	      writes this since format version 2.
//	0x01  DEFLATE (RFC 1951). Logs of format version 1 hold it, and frame
//	      copies shared with other replicas carry it (EncodeFrame), so a
//	      replica of either version reads them.
//
// Everything else is stored as its JSON, which always starts with '{'.
// Marker 0x03 is taken too: it opens a list of shared frames in one value
// (EncodeFrameList), never a stored frame. The
// hash covers the canonical attrs, as for every frame, so packing changes
// nothing that Verify checks or that readers see: DecodeFrame gives back the
// same Frame.
const (
	packDeflate = 0x01
	packS2Dict1 = 0x02
	packMin     = 1024
	// maxUnpacked bounds what one stored frame may inflate to, so a damaged
	// or hostile file cannot make a reader allocate without limit.
	maxUnpacked = 64 << 20
)

var (
	// packDict1 is dictionary 1 of the 0x02 frames. Its bytes are part of
	// the format: a frame packed against them reads back only with them,
	// so packdict1.txt never changes (TestPackDictionaryIsFrozen); another
	// dictionary would take another marker. It is four autonomy.preflight
	// frames' attrs, the keys and fixed texts every decision repeats, which
	// is what lets S2 pack a one-step preflight smaller than DEFLATE does
	// without one, at a fifth of its CPU (docs/PERFORMANCE.md).
	//go:embed packdict1.txt
	packDict1Text []byte
	packDict1     = s2.MakeDictManual(packDict1Text, 0)

	// Shared copies use klauspost/compress's DEFLATE writer: the same
	// format, which the standard library's reader below inflates.
	flateWriters = sync.Pool{New: func() any {
		w, _ := kflate.NewWriter(nil, kflate.BestSpeed) // the level is valid
		return w
	}}
	flateReaders = sync.Pool{New: func() any { return flate.NewReader(bytes.NewReader(nil)) }}
)

// packAttrs packs large canonical attrs as the log stores them (0x02). It
// returns nil when attrs are small or do not shrink by a quarter, and the
// frame is stored as JSON.
func packAttrs(attrs []byte) []byte {
	if len(attrs) < packMin {
		return nil
	}
	job := packJobs.Get().(*packJob)
	job.attrs = attrs
	startPackers.Do(func() {
		for range runtime.GOMAXPROCS(0) {
			go packer()
		}
	})
	packQueue <- job
	<-job.done
	packed := job.packed
	*job = packJob{done: job.done}
	packJobs.Put(job)
	return packed
}

// S2's dictionary encoder zeroes a 64 KB hash table on its caller's stack
// at every call. On a request's goroutine that stack is grown to hold it,
// shrunk again by the next GC, and cold in the cache each time: in the real
// process that was three quarters of what packing a preflight cost
// (docs/PERFORMANCE.md). So packing runs on a few long-lived packer
// goroutines: each serves every call with one stack, grown again at most
// once a collection and warm in the cache; the hand-off to one and back
// costs two goroutine switches.
var (
	packQueue    = make(chan *packJob)
	startPackers sync.Once
	packJobs     = sync.Pool{New: func() any { return &packJob{done: make(chan struct{})} }}
)

type packJob struct {
	attrs  []byte
	packed []byte
	done   chan struct{}
}

func packer() {
	for job := range packQueue {
		job.packed = packOne(job.attrs)
		job.done <- struct{}{}
	}
}

// packOne packs attrs against dictionary 1. Packing is optional: should the
// encoder panic, the frame is stored as its JSON and the packer lives on.
func packOne(attrs []byte) (packed []byte) {
	defer func() {
		if recover() != nil {
			packed = nil
		}
	}()
	return shrunk(attrs, packDict1.Encode(make([]byte, 0, s2.MaxEncodedLen(len(attrs))), attrs))
}

// deflateAttrs packs large canonical attrs as shared copies carry them
// (0x01), nil as packAttrs.
func deflateAttrs(attrs []byte) []byte {
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
	return shrunk(attrs, buf.Bytes())
}

// shrunk returns packed when it takes at least a quarter off attrs.
func shrunk(attrs, packed []byte) []byte {
	if len(packed) > len(attrs)*3/4 {
		return nil
	}
	return packed
}

// encodePacked returns the stored form of f whose attrs marker packed to
// packed.
func (f *Frame) encodePacked(marker byte, packed []byte) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(packed)+len(f.AuditID)+len(f.Kind)+len(f.Timestamp)+len(f.PrevHash)+len(f.Hash)+96)
	b = append(b, marker)
	b = binary.AppendUvarint(b, uint64(len(packed)))
	b = append(b, packed...)
	return f.appendJSON(b, nil)
}

// isPacked reports whether a stored frame starting with b0 is packed.
func isPacked(b0 byte) bool { return b0 == packS2Dict1 || b0 == packDeflate }

// unpack splits a packed stored frame into its head JSON and its inflated
// attrs.
func unpack(b []byte) (head, attrs []byte, err error) {
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || n > uint64(len(b)-1-k) {
		return nil, nil, fmt.Errorf("%w: packed frame with a bad length", ErrCorrupt)
	}
	packed := b[1+k : 1+k+int(n)]
	head = b[1+k+int(n):]
	if b[0] == packS2Dict1 {
		attrs, err = unpackS2(packed)
	} else {
		attrs, err = inflate(packed)
	}
	if err != nil {
		return nil, nil, err
	}
	return head, attrs, nil
}

// unpackS2 reads the attrs of a 0x02 frame.
func unpackS2(packed []byte) ([]byte, error) {
	n, err := s2.DecodedLen(packed)
	if err != nil {
		return nil, fmt.Errorf("%w: packed attrs: %v", ErrCorrupt, err)
	}
	if n > maxUnpacked {
		return nil, fmt.Errorf("%w: packed attrs inflate past %d bytes", ErrCorrupt, maxUnpacked)
	}
	attrs, err := packDict1.Decode(nil, packed)
	if err != nil {
		return nil, fmt.Errorf("%w: packed attrs: %v", ErrCorrupt, err)
	}
	return attrs, nil
}

// inflate reads the attrs of a 0x01 frame.
func inflate(packed []byte) ([]byte, error) {
	r := flateReaders.Get().(io.ReadCloser)
	defer flateReaders.Put(r)
	if err := r.(flate.Resetter).Reset(bytes.NewReader(packed), nil); err != nil {
		return nil, fmt.Errorf("%w: packed attrs: %v", ErrCorrupt, err)
	}
	var out bytes.Buffer
	out.Grow(len(packed) * 3)
	if _, err := out.ReadFrom(io.LimitReader(r, maxUnpacked+1)); err != nil {
		return nil, fmt.Errorf("%w: packed attrs: %v", ErrCorrupt, err)
	}
	if out.Len() > maxUnpacked {
		return nil, fmt.Errorf("%w: packed attrs inflate past %d bytes", ErrCorrupt, maxUnpacked)
	}
	return out.Bytes(), nil
}

// frameHead returns JSON holding the stored frame's members other than
// attrs, without inflating anything: the frame itself when it is stored as
// JSON, its head when packed. Readers that need only seq, kind or
// timestamp decode this.
func frameHead(b []byte) []byte {
	if len(b) == 0 || !isPacked(b[0]) {
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
