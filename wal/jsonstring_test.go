package wal

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/contractrefine/autonomy/internal/canon"
)

// TestWriteJSONString pins the bytes the chain hash covers for a string:
// its canonical form, or what encoding/json writes when it is not UTF-8.
func TestWriteJSONString(t *testing.T) {
	tests := map[string]string{
		"plain":        "autonomy.decision",
		"escapes":      "a\"b\\c\n\t\u0001",
		"html":         "<a>&",
		"non-ASCII":    "é \u2028",
		"empty":        "",
		"invalid UTF8": "x\xffy",
	}
	for name, s := range tests {
		t.Run(name, func(t *testing.T) {
			want, err := canon.Marshal(s)
			if err != nil {
				want, _ = json.Marshal(s)
			}
			var b bytes.Buffer
			b.WriteString("prefix")
			writeJSONString(&b, s)
			if got := b.String(); got != "prefix"+string(want) {
				t.Fatalf("writeJSONString(%q) wrote %q, want %q", s, got, "prefix"+string(want))
			}
		})
	}
}
