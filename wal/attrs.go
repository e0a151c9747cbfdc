package wal

import (
	"github.com/contractrefine/autonomy/internal/canon"
)

func encodeAttrs(v any) ([]byte, error) {
	if v == nil {
		return []byte("{}"), nil
	}
	return canon.Marshal(v)
}
