// Package jsonptr resolves and builds RFC 6901 JSON Pointers over the
// generic values encoding/json produces (map[string]any, []any, …): the
// verifier's repair-hint fields and input: provenance, and the gate's
// gate.kind_pointer and gate.args_pointer, read pointers the same way.
package jsonptr

import "strings"

// Escape escapes one reference token of a JSON Pointer (RFC 6901):
// "~" becomes "~0" and "/" becomes "~1".
func Escape(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// Join makes a JSON Pointer of reference tokens already escaped: "" for
// none (the whole document), else "/" before each.
func Join(tokens []string) string {
	if len(tokens) == 0 {
		return ""
	}
	return "/" + strings.Join(tokens, "/")
}

// Resolve returns the value ptr names inside doc, a tree of the
// generic values encoding/json produces, and whether it exists.
func Resolve(doc any, ptr string) (any, bool) {
	v, ok, _ := ResolveNear(doc, ptr, nil)
	return v, ok
}

// ResolveNear is Resolve for callers whose readers match member names
// loosely: where an object lacks the member ptr names, near is a member it
// does have whose name fold maps to the same string (none when fold is nil
// or no member does).
func ResolveNear(doc any, ptr string, fold func(string) string) (v any, ok bool, near string) {
	if ptr == "" {
		return doc, true, ""
	}
	if ptr[0] != '/' {
		return nil, false, ""
	}
	cur := doc
	for _, raw := range strings.Split(ptr[1:], "/") {
		tok, ok := unEscape(raw)
		if !ok {
			return nil, false, ""
		}
		switch node := cur.(type) {
		case map[string]any:
			v, found := node[tok]
			if !found {
				return nil, false, nearName(node, tok, fold)
			}
			cur = v
		case []any:
			i, ok := arrayIndex(tok)
			if !ok || i >= len(node) {
				return nil, false, ""
			}
			cur = node[i]
		default:
			return nil, false, ""
		}
	}
	return cur, true, ""
}

// nearName is a member of node whose name fold maps as it maps tok.
func nearName(node map[string]any, tok string, fold func(string) string) string {
	if fold == nil {
		return ""
	}
	want := fold(tok)
	for name := range node {
		if fold(name) == want {
			return name
		}
	}
	return ""
}

// unEscape reverses Escape; a "~" not followed by 0 or 1 makes
// the pointer invalid.
func unEscape(s string) (string, bool) {
	if !strings.Contains(s, "~") {
		return s, true
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '~' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 >= len(s) {
			return "", false
		}
		switch s[i+1] {
		case '0':
			b.WriteByte('~')
		case '1':
			b.WriteByte('/')
		default:
			return "", false
		}
		i++
	}
	return b.String(), true
}

// arrayIndex parses an RFC 6901 array index: decimal digits, no leading
// zero. "-" (past the end) never names an existing element.
func arrayIndex(tok string) (int, bool) {
	if tok == "" || len(tok) > 9 || (len(tok) > 1 && tok[0] == '0') {
		return 0, false
	}
	n := 0
	for i := 0; i < len(tok); i++ {
		if tok[i] < '0' || tok[i] > '9' {
			return 0, false
		}
		n = n*10 + int(tok[i]-'0')
	}
	return n, true
}
