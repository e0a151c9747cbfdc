package binding

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/contractrefine/autonomy/internal/canon"
	"github.com/contractrefine/autonomy/internal/strictjson"
)

// twoPass is the reading parseBody's fast path stands for: canon.Parse,
// then strictjson's duplicate-name scan.
func twoPass(b []byte) (any, error) {
	doc, err := canon.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("body is not JSON: %w", err)
	}
	switch err := strictjson.CheckNames(b); {
	case errors.Is(err, strictjson.ErrDuplicateName):
		return nil, fmt.Errorf("body is ambiguous: %w", err)
	case err != nil: // canon.Parse lets a stray closing delimiter after the value pass
		return nil, fmt.Errorf("body is not JSON: %w", err)
	}
	return doc, nil
}

// TestParseBodyAsTwoPass proves parseBody returns what the two-pass reading
// returns, value and error, including where its member count is tricked.
func TestParseBodyAsTwoPass(t *testing.T) {
	tests := map[string]struct {
		body    string
		wantDup bool
		wantErr bool
	}{
		"gated call":                         {body: `{"kind":"refund.create.v2","args":{"caseRef":"case:882","amountUsd":125.50}}`},
		"colons and quotes inside strings":   {body: `{"a\":":"x:\"y:","b":["::",{"c\\":":"}]}`},
		"escaped backslash before a quote":   {body: `{"a\\":1,"b":"\\"}`},
		"trailing whitespace":                {body: "{\"a\":1} \t\r\n"},
		"top-level scalar":                   {body: `12.50`},
		"empty object":                       {body: `{}`},
		"repeated top-level key":             {body: `{"kind":"refund.create.v2","kind":"tool.echo"}`, wantDup: true},
		"repeated nested key":                {body: `{"args":{"amountUsd":9999,"amountUsd":125}}`, wantDup: true},
		"repeated key spelt with escapes":    {body: `{"a":1,"\u0061":2}`, wantDup: true},
		"keys made equal by invalid UTF-8":   {body: "{\"\xff\":1,\"\xfe\":2}", wantDup: true},
		"repeated key and a colon in a name": {body: `{"a:":1,"b":{"c":1,"c":2}}`, wantDup: true},
		"trailing word":                      {body: `{"a":1} x`, wantErr: true},
		"trailing value":                     {body: `{"a":1} {}`, wantErr: true},
		"trailing close":                     {body: `{"a":1}]`, wantErr: true},
		"cut off":                            {body: `{"a":`, wantErr: true},
		"invalid escape":                     {body: `{"a":"\x"}`, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseBody([]byte(tc.body))
			want, wantErr := twoPass([]byte(tc.body))
			if fmt.Sprint(err) != fmt.Sprint(wantErr) || !reflect.DeepEqual(got, want) {
				t.Fatalf("parseBody(%s) = %#v, %v; two passes give %#v, %v", tc.body, got, err, want, wantErr)
			}
			switch {
			case tc.wantDup && !errors.Is(err, errDuplicateKey):
				t.Fatalf("parseBody(%s) error %v, want a duplicate-key error", tc.body, err)
			case tc.wantErr && (err == nil || errors.Is(err, errDuplicateKey)):
				t.Fatalf("parseBody(%s) error %v, want a syntax error", tc.body, err)
			case !tc.wantDup && !tc.wantErr && err != nil:
				t.Fatalf("parseBody(%s) error %v", tc.body, err)
			}
		})
	}
}

// BenchmarkParseBody compares parseBody with the two passes it replaces on
// a typical gated body.
func BenchmarkParseBody(b *testing.B) {
	body := []byte(`{"kind":"refund.create.v2","args":{"caseRef":"case:882","amountUsd":125,"meta":{"channel":"web","tags":["a","b"]}}}`)
	for name, parse := range map[string]func([]byte) (any, error){"parseBody": parseBody, "twoPass": twoPass} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := parse(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCheckValues: names equal under case folding are found in small and
// large objects, inside arrays and nested objects; distinct names pass; a
// number beyond the double's range is refused wherever it is.
func TestCheckValues(t *testing.T) {
	big := map[string]any{}
	for i := range 12 {
		big[fmt.Sprintf("k%d", i)] = i
	}
	bigDup := map[string]any{"K11": true}
	for k, v := range big {
		bigDup[k] = v
	}
	tests := map[string]struct {
		doc     any
		wantDup bool
	}{
		"distinct names":                    {doc: map[string]any{"kind": "x", "args": map[string]any{"a": 1, "b": 2}}},
		"one member":                        {doc: map[string]any{"KIND": "x"}},
		"twelve distinct names":             {doc: big},
		"kind and KIND":                     {doc: map[string]any{"kind": "x", "KIND": "y"}, wantDup: true},
		"args and a long s":                 {doc: map[string]any{"args": map[string]any{}, "arg\u017f": map[string]any{}}, wantDup: true},
		"in a nested object":                {doc: map[string]any{"args": map[string]any{"amountUsd": 1, "AMOUNTUSD": 2}}, wantDup: true},
		"in an object in an array":          {doc: map[string]any{"args": map[string]any{"x": []any{1, map[string]any{"\u212a": 1, "k": 2}}}}, wantDup: true},
		"among twelve names":                {doc: bigDup, wantDup: true},
		"the same letters in other scripts": {doc: map[string]any{"a": 1, "а": 2}}, // Latin a, Cyrillic а
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := checkValues(tc.doc)
			if got := errors.Is(err, errDuplicateKey); got != tc.wantDup || (!tc.wantDup && err != nil) {
				t.Fatalf("checkValues = %v, want a duplicate-key error: %v", err, tc.wantDup)
			}
		})
	}
	for _, doc := range []any{
		map[string]any{"kind\x00x": "tool.shell", "kind": "tool.echo"},
		map[string]any{"args": []any{map[string]any{"\x00": 1}}},
	} {
		if err := checkValues(doc); !errors.Is(err, errNULName) {
			t.Errorf("checkValues(%q) = %v, want errNULName", doc, err)
		}
	}
	for _, n := range []string{"1e400", "-1E309", "123e999999"} {
		doc := map[string]any{"args": map[string]any{"a": []any{1, json.Number(n)}}}
		if err := checkValues(doc); !errors.Is(err, canon.ErrNumber) {
			t.Errorf("checkValues with %s = %v, want canon.ErrNumber", n, err)
		}
	}
	if err := checkValues(map[string]any{"n": json.Number("1e308"), "m": json.Number("-0.0"), "s": json.Number("1e-400")}); err != nil {
		t.Errorf("numbers inside the range: %v", err)
	}
}

// TestResolveExact: a member standing where a pointer names another
// spelling of it is refused, wherever on the pointer's path it stands.
func TestResolveExact(t *testing.T) {
	doc := func(s string) any {
		v, err := parseBody([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		body, ptr string
		refused   bool
	}{
		{`{"kind":"k","args":{}}`, "/args", false},
		{`{"kind":"k"}`, "/args", false},
		{`{"kind":"k","ARGS":{}}`, "/args", true},
		{`{"kind":"k","Args":{"a":1}}`, "/args", true},
		{"{\"kind\":\"k\",\"arg\u017f\":{}}", "/args", true},
		{`{"call":{"Args":{}}}`, "/call/args", true},
		{`{"Call":{"args":{}}}`, "/call/args", true},
		{`{"calls":[{"ARGS":{}}]}`, "/calls/0/args", true},
		{`{"a/b":{"X":1}}`, "/a~1b/x", true},
		{`{"call":"text"}`, "/call/args", false},
		{`{"kind":"k","args":{"ARGS":1}}`, "/args", false},
	} {
		_, _, err := resolveExact(doc(tc.body), tc.ptr)
		if got := errors.Is(err, errMisspelt); got != tc.refused || (!tc.refused && err != nil) {
			t.Errorf("resolveExact(%s, %s) = %v, want refused %v", tc.body, tc.ptr, err, tc.refused)
		}
	}
}
