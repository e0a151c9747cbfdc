package wal

import (
	"fmt"

	"github.com/contractrefine/autonomy/internal/canon"
)

// encodedAttrs is attrs already in canonical JSON. The write helpers encode
// attrs in the caller's goroutine before queueing, so the commit loop, which
// every writer waits on, spends no time on it.
type encodedAttrs []byte

func encodeAttrs(v any) ([]byte, error) {
	switch t := v.(type) {
	case nil:
		return []byte("{}"), nil
	case encodedAttrs:
		return t, nil
	}
	b, err := canon.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("wal: frame attrs: %w", err)
	}
	return b, nil
}

// preEncode returns in with its attrs in canonical JSON.
func preEncode(in FrameInput) (FrameInput, error) {
	b, err := encodeAttrs(in.Attrs)
	if err != nil {
		return in, err
	}
	in.Attrs = encodedAttrs(b)
	return in, nil
}
