package canon

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

func TestMarshal(t *testing.T) {
	tests := map[string]struct {
		in   string
		want string
	}{
		"sorted keys, no space":    {`{ "b": 1, "a": [true, null, "x"] }`, `{"a":[true,null,"x"],"b":1}`},
		"integral double":          {`125.0`, `125`},
		"fraction":                 {`125.50`, `125.5`},
		"large exponent":           {`1e21`, `1e+21`},
		"just below exponent form": {`123456789012345678901`, `123456789012345680000`},
		"small":                    {`0.000001`, `0.000001`},
		"smaller uses exponent":    {`0.0000001`, `1e-7`},
		"negative zero":            {`-0`, `0`},
		"negative":                 {`-12.5e1`, `-125`},
		"escapes":                  {`"a\"b\\c\n\u0001\u00e9<>&"`, `"a\"b\\c\n\u0001é<>&"`},
		"nested":                   {`{"z":{"y":2,"x":1},"a":{}}`, `{"a":{},"z":{"x":1,"y":2}}`},
		"escapes at both ends":     {`"\t\"mid\u0000dle\\\u001f"`, `"\t\"mid\u0000dle\\\u001f"`},
		"only escapes":             {`"\b\f\r\n"`, `"\b\f\r\n"`},
		"no escapes":               {`"plain text é"`, `"plain text é"`},
		"utf16 order":              {`{"\ud83d\ude00":1,"\ue000":2}`, "{\"\U0001F600\":1,\"\ue000\":2}"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Marshal(json.RawMessage(tc.in))
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			if string(got) != tc.want {
				t.Fatalf("Marshal(%s) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

func TestMarshalErrors(t *testing.T) {
	tests := map[string]struct {
		in   any
		want error
	}{
		"invalid utf8": {map[string]any{"a": "\xff"}, ErrInvalidUTF8},
		"trailing":     {json.RawMessage(`{} {}`), nil},
		"not json":     {json.RawMessage(`{`), nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Marshal(tc.in)
			if err == nil {
				t.Fatal("Marshal succeeded, want error")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
		})
	}
}

func TestDigestEqualValues(t *testing.T) {
	a, err := Digest(json.RawMessage(`{"caseRef":"case:882","amountUsd":125}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Digest(map[string]any{"amountUsd": 125.0, "caseRef": "case:882"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Digest(map[string]any{"amountUsd": json.Number("9999"), "caseRef": "case:882"})
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatalf("equal values, different digests: %s %s", a, b)
	}
	if a == c {
		t.Fatal("different values, same digest")
	}
	if len(a) != len("sha256:")+64 {
		t.Fatalf("digest %q has the wrong length", a)
	}
}

func FuzzMarshal(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[1.5e300,"x",null]`, `"\u00e9"`, `{"b":{"c":[true,false]}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Marshal(json.RawMessage(in))
		if err != nil {
			return
		}
		// The canonical form is a fixed point.
		again, err := Marshal(json.RawMessage(out))
		if err != nil {
			t.Fatalf("canonical output does not parse: %s: %v", out, err)
		}
		if string(again) != string(out) {
			t.Fatalf("not a fixed point: %s -> %s", out, again)
		}
	})
}

// TestWriteString: what it writes, and that it writes nothing for a string
// that is not UTF-8.
func TestWriteString(t *testing.T) {
	var buf bytes.Buffer
	buf.WriteString("x")
	if err := WriteString(&buf, "a\x01\"b"); err != nil || buf.String() != `x"a\u0001\"b"` {
		t.Fatalf("WriteString: %q, %v", buf.String(), err)
	}
	if err := WriteString(&buf, "\xff"); !errors.Is(err, ErrInvalidUTF8) || buf.String() != `x"a\u0001\"b"` {
		t.Fatalf("WriteString(invalid UTF-8): %q, %v", buf.String(), err)
	}
	if err := WriteValue(&buf, struct{}{}); err == nil {
		t.Fatal("WriteValue took a struct")
	}
}

// TestCanonicalWrittenAsIs: text marked Canonical is written byte for byte,
// inside maps and arrays, without being parsed.
func TestCanonicalWrittenAsIs(t *testing.T) {
	inner := Canonical(`{"a":[1,"é"],"b":null}`)
	got, err := Marshal(map[string]any{"z": 1, "d": inner, "l": []any{inner}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"d":{"a":[1,"é"],"b":null},"l":[{"a":[1,"é"],"b":null}],"z":1}`
	if string(got) != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
}

// TestCheckNumber: a number passes only when the double canonical JSON
// writes for it names the same value as its text.
func TestCheckNumber(t *testing.T) {
	for n, want := range map[string]error{
		"0": nil, "-0": nil, "0.0": nil, "1": nil, "-1": nil, "0.1": nil, "1.50": nil, "1e2": nil, "1E+2": nil,
		"100e-2": nil, "125": nil, "9007199254740992": nil, "-9007199254740992": nil, "1e21": nil, "1.7976931348623157e308": nil,
		"5e-324": nil, "0e99999999999999999999": nil, "123456789012345678e-2": ErrInexact,
		"9007199254740993":       ErrInexact,
		"-9007199254740993":      ErrInexact,
		"1.0000000000000001":     ErrInexact,
		"1152921504606846976":    ErrInexact, // 2^60 is a double, but is written back as 1152921504606847000
		"1e-400":                 ErrInexact, // reads as 0
		"1e400":                  ErrNumber,
		"-1e400":                 ErrNumber,
		"1e-9223372036854775808": ErrInexact,
	} {
		err := CheckNumber(json.Number(n))
		if want == nil && err != nil || want != nil && !errors.Is(err, want) {
			t.Errorf("CheckNumber(%s) = %v, want %v", n, err, want)
		}
	}
}
