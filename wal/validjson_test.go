package wal

import (
	"encoding/json"
	"testing"
)

// FuzzValidJSON holds validJSON to encoding/json's Valid, which it
// replaced: the same answer for every input, duplicate names, strings that
// are not UTF-8 and lone surrogate escapes included.
func FuzzValidJSON(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":1,"a":2}`, "\"\xff\"", `"\ud800"`, ` [1, 2] `, `{} {}`, ``, ` `, `[1,]`,
		`1e400`, `"\u0000"`, "\"\x01\"", `{"a":"\udc00\ud800"}`, `nul`, `{"a" 1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("%q: validJSON %v, json.Valid %v", b, got, want)
		}
	})
}
