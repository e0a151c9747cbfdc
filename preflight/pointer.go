package preflight

import (
	"strconv"
	"strings"
)

// escapeToken escapes one reference token of a JSON Pointer (RFC 6901):
// "~" becomes "~0" and "/" becomes "~1".
func escapeToken(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// stepField is the pointer to a field of plan step i, such as
// "/plan/steps/1/zone".
func stepField(i int, field string) string {
	return "/plan/steps/" + strconv.Itoa(i) + "/" + field
}

// resolvePointer returns the value ptr names inside doc, a tree of the
// generic values encoding/json produces, and whether it exists.
func resolvePointer(doc any, ptr string) (any, bool) {
	if ptr == "" {
		return doc, true
	}
	if ptr[0] != '/' {
		return nil, false
	}
	cur := doc
	for _, raw := range strings.Split(ptr[1:], "/") {
		tok, ok := unescapeToken(raw)
		if !ok {
			return nil, false
		}
		switch node := cur.(type) {
		case map[string]any:
			v, found := node[tok]
			if !found {
				return nil, false
			}
			cur = v
		case []any:
			i, ok := arrayIndex(tok)
			if !ok || i >= len(node) {
				return nil, false
			}
			cur = node[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// unescapeToken reverses escapeToken; a "~" not followed by 0 or 1 makes
// the pointer invalid.
func unescapeToken(s string) (string, bool) {
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
