package config

import (
	"errors"
	"reflect"
	"regexp"
	"strings"
)

var unknownFieldTypeRE = regexp.MustCompile(`line (\d+): field (\S+) not found in type (\S+)`)

// DecodeError is the error of a strict YAML decode into root (a struct
// value, or a pointer to one) as an operator reads it: yaml's "field X not
// found in type T" becomes `unknown key "X"`, with the nearest key T has
// when one is close ("did you mean"), so a misspelt key names its fix and
// not a Go type.
func DecodeError(err error, root any) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n")
	return errors.New(strings.TrimSpace(withSuggestions(msg, reflect.TypeOf(root))))
}

func withSuggestions(msg string, root reflect.Type) string {
	return unknownFieldTypeRE.ReplaceAllStringFunc(msg, func(m string) string {
		p := unknownFieldTypeRE.FindStringSubmatch(m)
		out := `line ` + p[1] + `: unknown key "` + p[2] + `"`
		if near := nearestKey(p[2], keysOfType(root, p[3])); near != "" {
			out += ` (did you mean "` + near + `"?)`
		}
		return out
	})
}

// keysOfType returns the YAML keys of the struct, within root, that yaml
// names typeName (for example "config.HTTP").
func keysOfType(root reflect.Type, typeName string) []string {
	var keys []string
	var walk func(t reflect.Type)
	seen := map[reflect.Type]bool{}
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		match := t.String() == typeName
		for i := range t.NumField() {
			f := t.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if match && tag != "" && tag != "-" {
				keys = append(keys, tag)
			}
			walk(f.Type)
		}
	}
	walk(root)
	return keys
}

// nearestKey is the key within two edits of name (a third of its length
// for short names), or "" when none is that close.
func nearestKey(name string, keys []string) string {
	best, bestD := "", min(2, max(1, len(name)/3))+1
	for _, k := range keys {
		if d := editDistance(strings.ToLower(name), k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
