package strictjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

func TestCheckNames(t *testing.T) {
	tests := map[string]struct {
		body        string
		wantPointer string // of the repeated member; "" for none
		wantPrev    string
		wantErr     bool // not JSON at all
	}{
		"flat object":                      {body: `{"kind":"tool.echo","args":{"a":1}}`},
		"same key in sibling objects":      {body: `{"a":{"x":1},"b":{"x":2}}`},
		"same key in objects of an array":  {body: `{"args":{"items":[{"id":1},{"id":2}]}}`},
		"key equal to a value":             {body: `{"a":"b","b":"a"}`},
		"nested containers keep the count": {body: `{"a":[[],{}],"b":{"c":[1,{"d":2}]},"e":3}`},
		"empty object":                     {body: `{}`},
		"top-level scalar":                 {body: `"x"`},
		"top-level array":                  {body: `[{"a":1},{"a":1}]`},
		"repeated top-level key":           {body: `{"kind":"refund.create.v2","kind":"tool.echo"}`, wantPointer: "/kind", wantPrev: "kind"},
		"repeated key after a container":   {body: `{"args":{"a":1},"x":[1],"args":{}}`, wantPointer: "/args", wantPrev: "args"},
		"repeated nested key":              {body: `{"args":{"amountUsd":9999,"amountUsd":125}}`, wantPointer: "/args/amountUsd", wantPrev: "amountUsd"},
		"repeated key deep in an array":    {body: `{"a":[0,{"b":{"c":1,"c":1}}]}`, wantPointer: "/a/1/b/c", wantPrev: "c"},
		"repeated key spelt with escapes":  {body: `{"a":1,"\u0061":2}`, wantPointer: "/a", wantPrev: "a"},
		"names differing in case":          {body: `{"IdempotencyKey":"a","idempotencyKey":"b"}`, wantPointer: "/idempotencyKey", wantPrev: "IdempotencyKey"},
		"a name in another script's case":  {body: `{"summary":1,"\u017fummary":2}`, wantPointer: "/\u017fummary", wantPrev: "summary"},
		"escaped name in the pointer":      {body: `{"a/b":{"~x":1,"~X":2}}`, wantPointer: "/a~1b/~0X", wantPrev: "~x"},
		"not JSON":                         {body: `{"a":`, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := CheckNames([]byte(tc.body))
			var ne *NameError
			switch {
			case tc.wantPointer != "":
				if !errors.As(err, &ne) || !errors.Is(err, ErrDuplicateName) {
					t.Fatalf("CheckNames(%s) = %v, want a *NameError", tc.body, err)
				}
				if ne.Pointer != tc.wantPointer || ne.Prev != tc.wantPrev {
					t.Errorf("CheckNames(%s) = %+v, want pointer %s, prev %q", tc.body, ne, tc.wantPointer, tc.wantPrev)
				}
			case tc.wantErr:
				if err == nil || errors.Is(err, ErrDuplicateName) {
					t.Errorf("CheckNames(%s) = %v, want a syntax error", tc.body, err)
				}
			case err != nil:
				t.Errorf("CheckNames(%s) = %v, want nil", tc.body, err)
			}
		})
	}
}

func TestNamesPastTheSmallObject(t *testing.T) {
	var s Names
	for i := range 20 {
		if prev, dup := s.Add(fmt.Sprintf("name%d", i)); dup {
			t.Fatalf("name%d repeats %q", i, prev)
		}
	}
	for _, name := range []string{"NAME3", "Name15"} {
		if prev, dup := s.Add(name); !dup || prev != "name"+name[4:] {
			t.Errorf("Add(%s) = %q, %v; want a repeat of name%s", name, prev, dup, name[4:])
		}
	}
}

func TestDecode(t *testing.T) {
	doc, err := Decode([]byte(`{"a":[1.50,{"b":null}]}`))
	want := map[string]any{"a": []any{jsonNumber("1.50"), map[string]any{"b": nil}}}
	if err != nil || !reflect.DeepEqual(doc, want) {
		t.Fatalf("Decode = %#v, %v; want %#v", doc, err, want)
	}
	if _, err := Decode([]byte(`{"a":1,"A":2}`)); !errors.Is(err, ErrDuplicateName) {
		t.Errorf("Decode of names differing in case = %v, want ErrDuplicateName", err)
	}
	if _, err := Decode([]byte(`{"a":1} x`)); err == nil || errors.Is(err, ErrDuplicateName) {
		t.Errorf("Decode with trailing data = %v, want a syntax error", err)
	}
}

func jsonNumber(s string) any { return json.Number(s) }
