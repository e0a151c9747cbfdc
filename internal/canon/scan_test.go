package canon

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// viaParse is what canonical wrote for JSON text before writeText: the text
// parsed into generic values, then written.
func viaParse(raw []byte) ([]byte, error) {
	v, err := parseJSON(raw)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := write(&buf, v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// sameAsParse fails t when writeText takes raw and writes other bytes than
// viaParse, or takes text viaParse refuses.
func sameAsParse(t *testing.T, raw []byte) (taken bool) {
	t.Helper()
	var buf bytes.Buffer
	taken = writeText(&buf, raw)
	want, err := viaParse(raw)
	switch {
	case taken && err != nil:
		t.Fatalf("writeText took %q, which Parse refuses: %v", raw, err)
	case taken && !bytes.Equal(buf.Bytes(), want):
		t.Fatalf("writeText(%q) = %s, Parse and write give %s", raw, buf.Bytes(), want)
	}
	return taken
}

func TestWriteTextAsParse(t *testing.T) {
	taken := []string{
		`{ "b": 1, "a": [true, null, "x"] }`, `125.0`, `-0`, `0`, `-12`, `123456789012345`, `1234567890123456`,
		`9007199254740993`, `1e21`, `0.0000001`, `-12.5e1`, `"a\"b\\c\n\u0001\u00e9<>&"`, `"\u003cscript\u003e"`,
		`{"z":{"y":2,"x":1},"a":{}}`, `{"\ud83d\ude00":1,"\ue000":2}`, `{"b\u0061":1,"a":2}`, `[]`, `{}`,
		`[{"b":[{"d":1,"c":2}],"a":0}]`, "\t{\"k\" : \"v\" }\n", `"plain text é"`, `"\u2028"`,
	}
	for _, s := range taken {
		if !sameAsParse(t, []byte(s)) {
			t.Errorf("writeText refused %s", s)
		}
	}
	// Text Parse decides, writeText leaving it: duplicate names (Parse keeps
	// the last), bytes that are not UTF-8, numbers without a double, lone
	// surrogates, trailing data, not JSON.
	refused := []string{
		`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, "\"\xff\"", `1e400`, `"\ud800"`, `{} {}`, `{`, ``, `[1,]`, `nul`,
	}
	for _, s := range refused {
		if sameAsParse(t, []byte(s)) {
			t.Errorf("writeText took %q", s)
		}
	}
}

// TestWriteTextGolden: every JSON file under testdata in the repository
// (decisions, requests, frames) is written as Parse and write write it.
func TestWriteTextGolden(t *testing.T) {
	n := 0
	for _, dir := range []string{"../httpapi/testdata", "../../preflight/testdata"} {
		_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || filepath.Ext(path) != ".json" {
				return nil
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			sameAsParse(t, raw)
			n++
			return nil
		})
	}
	if n < 10 {
		t.Fatalf("only %d JSON files found", n)
	}
}

func FuzzWriteText(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[1.5e300,"x",null]`, `"\u00e9"`, `{"b":{"c":[true,false]}}`, `{"b":1,"a":{"d":"\n","c":-0}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) { sameAsParse(t, in) })
}

// BenchmarkDigestText is the digest of a preflight request body, the
// preflight API's request_digest: through writeText, and as before through
// Parse and write.
func BenchmarkDigestText(b *testing.B) {
	raw, err := os.ReadFile("../httpapi/testdata/requests/refund_pass.json")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("text", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Digest(json.RawMessage(raw)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parse", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			out, err := viaParse(raw)
			if err != nil {
				b.Fatal(err)
			}
			_ = DigestBytes(out)
		}
	})
}

// sameParse fails t when parseText takes raw and decodes other values than
// encoding/json does, or takes text encoding/json refuses.
func sameParse(t *testing.T, raw []byte) (taken bool) {
	t.Helper()
	got, taken := parseText(raw)
	want, err := parseJSON(raw)
	switch {
	case taken && err != nil:
		t.Fatalf("parseText took %q, which encoding/json refuses: %v", raw, err)
	case taken && !reflect.DeepEqual(got, want):
		t.Fatalf("parseText(%q) = %#v, encoding/json gives %#v", raw, got, want)
	}
	return taken
}

func TestParseTextAsEncodingJSON(t *testing.T) {
	for _, s := range []string{`{"b":1,"a":[true,null,"x",{}],"c":{"d":[]}}`, `-0.5e-3`, `"\u00e9\n"`, `[]`, ` {} `, `null`} {
		if !sameParse(t, []byte(s)) {
			t.Errorf("parseText refused %s", s)
		}
	}
	for _, s := range []string{`{"a":1,"a":2}`, "\"\xff\"", `"\ud800"`, `{} {}`, `{`, ``, `[1,]`} {
		if sameParse(t, []byte(s)) {
			t.Errorf("parseText took %q", s)
		}
	}
}

func FuzzParseText(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[1.5e300,"x",null]`, `"\u00e9"`, `{"b":{"c":[true,false]}}`, `{"a":1,"a":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) { sameParse(t, in) })
}
