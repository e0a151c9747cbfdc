package jsonptr

import (
	"reflect"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	doc := map[string]any{
		"kind": "tool.echo",
		"args": map[string]any{"a/b": 1.0, "m~n": "x", "list": []any{"zero", "one"}},
		"":     "empty key",
	}
	tests := map[string]struct {
		ptr   string
		want  any
		found bool
	}{
		"whole document":      {"", doc, true},
		"member":              {"/kind", "tool.echo", true},
		"escaped slash":       {"/args/a~1b", 1.0, true},
		"escaped tilde":       {"/args/m~0n", "x", true},
		"array index":         {"/args/list/1", "one", true},
		"empty key":           {"/", "empty key", true},
		"missing member":      {"/nope", nil, false},
		"index out of range":  {"/args/list/2", nil, false},
		"leading zero index":  {"/args/list/01", nil, false},
		"dash index":          {"/args/list/-", nil, false},
		"bad escape":          {"/args/m~2n", nil, false},
		"no leading slash":    {"kind", nil, false},
		"through a scalar":    {"/kind/x", nil, false},
		"negative index text": {"/args/list/-1", nil, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, found := Resolve(doc, tc.ptr)
			if found != tc.found || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Resolve(%q) = %v, %v; want %v, %v", tc.ptr, got, found, tc.want, tc.found)
			}
		})
	}
}

func TestEscapeRoundTrip(t *testing.T) {
	for _, name := range []string{"plain", "a/b", "m~n", "~/~1", ""} {
		doc := map[string]any{name: true}
		if v, ok := Resolve(doc, "/"+Escape(name)); !ok || v != true {
			t.Fatalf("name %q: Escape gives %q, which does not resolve", name, Escape(name))
		}
	}
}

// TestResolveNear: where an object lacks the member a pointer names, near
// is a member whose name folds the same; found members and other misses
// name none.
func TestResolveNear(t *testing.T) {
	doc := map[string]any{"Args": map[string]any{"a": 1.0}, "list": []any{map[string]any{"KIND": "x"}}}
	for _, tc := range []struct {
		ptr, near string
		ok        bool
	}{
		{"/args", "Args", false},
		{"/Args/a", "", true},
		{"/list/0/kind", "KIND", false},
		{"/list/1/kind", "", false},
		{"/other", "", false},
	} {
		_, ok, near := ResolveNear(doc, tc.ptr, strings.ToLower)
		if ok != tc.ok || near != tc.near {
			t.Errorf("ResolveNear(%s) = %v, %q; want %v, %q", tc.ptr, ok, near, tc.ok, tc.near)
		}
	}
	if _, _, near := ResolveNear(doc, "/args", nil); near != "" {
		t.Errorf("without fold: near %q", near)
	}
}
