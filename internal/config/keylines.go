package config

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// source remembers where each key of a configuration file was, so that an
// error found after decoding (a value out of range) names its line the way
// a decoding error does, and a decoding error (a value of the wrong type,
// which yaml reports by line only) names its key.
type source struct {
	keyLine map[string]int       // dotted key path → line of the key
	valueAt map[int][]valueEntry // line → the values on it, in the file's order
	floats  map[string]string    // dotted key path → a value written with a fraction or exponent
	// nulls are the keys written with no value (null, ~ or nothing), in
	// the file's order.
	nulls []string
	// empties are the keys written as "" (an empty string), in the
	// file's order.
	empties []string
}

// indexLines indexes the keys of a YAML document. It returns nil when the
// document does not parse; the decoder then reports why.
func indexLines(b []byte) *source {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil || len(doc.Content) == 0 {
		return nil
	}
	s := &source{keyLine: map[string]int{}, valueAt: map[int][]valueEntry{}, floats: map[string]string{}}
	s.walk(doc.Content[0], "")
	return s
}

func (s *source) walk(n *yaml.Node, prefix string) {
	if n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		path := k.Value
		if prefix != "" {
			path = prefix + "." + k.Value
		}
		s.keyLine[path] = k.Line
		s.valueAt[v.Line] = append(s.valueAt[v.Line], valueEntry{path: path, tag: v.ShortTag(), value: v.Value})
		if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!float" {
			s.floats[path] = v.Value
		}
		if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!null" {
			s.nulls = append(s.nulls, path)
		}
		if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" && v.Value == "" {
			s.empties = append(s.empties, path)
		}
		s.walk(v, path)
	}
}

// line returns the line of key in the file, 0 when it is not there.
// float returns the value of key when the file wrote it as a float: yaml
// truncates 2.9 into an integer field without a word.
func (s *source) float(key string) (string, bool) {
	if s == nil {
		return "", false
	}
	v, ok := s.floats[key]
	return v, ok
}

func (s *source) line(key string) int {
	if s == nil {
		return 0
	}
	return s.keyLine[key]
}

// valueEntry is one key's value as the file wrote it.
type valueEntry struct {
	path, tag, value string
}

// typeErrorRE matches yaml's "line N: cannot unmarshal !!tag `value` into
// T", whose value yaml cuts to seven characters and "..." past ten.
var typeErrorRE = regexp.MustCompile("(?m)^line (\\d+): (cannot unmarshal) (\\S+)(?: `([^`]*)`)?")

// nameKeys adds the key to each "line N: cannot unmarshal …" of a decoding
// error: the key on that line whose value has the tag and text the error
// names (several keys share a line in a flow mapping such as
// {mode: enforce, binding_window: 300}), else the first value on it.
func (s *source) nameKeys(err error) error {
	if s == nil || err == nil {
		return err
	}
	msg := typeErrorRE.ReplaceAllStringFunc(err.Error(), func(m string) string {
		sub := typeErrorRE.FindStringSubmatch(m)
		n, _ := strconv.Atoi(sub[1])
		key, ok := s.keyOf(n, sub[3], sub[4])
		if !ok {
			return m
		}
		return "line " + sub[1] + ": " + key + ": " + strings.TrimPrefix(m, "line "+sub[1]+": ")
	})
	return errors.New(strings.TrimSpace(msg))
}

// keyOf is the key of the value on line n with the tag and text a type
// error names.
func (s *source) keyOf(n int, tag, text string) (string, bool) {
	entries := s.valueAt[n]
	if len(entries) == 0 {
		return "", false
	}
	// A mapping or sequence on the line may be a parent's too (a flow
	// mapping's key whose value starts there): the innermost, the last,
	// is the one whose type was wrong.
	found, last := "", tag == "!!map" || tag == "!!seq"
	cut, short := strings.CutSuffix(text, "...")
	for _, e := range entries {
		if e.tag == tag && (e.value == text || (short && strings.HasPrefix(e.value, cut))) {
			found = e.path
			if !last {
				break
			}
		}
	}
	if found != "" {
		return found, true
	}
	for _, e := range entries {
		if e.tag != "!!map" {
			return e.path, true
		}
	}
	return entries[0].path, true
}

// unsetByEmpty are the keys whose "" would quietly turn something off or
// name nothing (the file's bundle, its tokens, its TLS, the caller's
// identity header, the replica): a template whose variable was unset.
// Left out, each takes its default.
var unsetByEmpty = []string{"bundle", "access.tokens_file", "tls.cert_file", "tls.key_file", "tls.client_ca_file",
	"gate.actor_header", "gate.kind_header", "upstream", "gateway_addr", "replica_id", "store.backend",
	"store.etcd.tls.ca_file", "store.etcd.tls.cert_file", "store.etcd.tls.key_file"}

// emptyKeys refuses the keys of unsetByEmpty written as "".
func (s *source) emptyKeys() error {
	if s == nil {
		return nil
	}
	var errs []error
	for _, k := range s.empties {
		if slices.Contains(unsetByEmpty, k) {
			errs = append(errs, fmt.Errorf("line %d: %s: \"\" names nothing; leave the key out for its default", s.keyLine[k], k))
		}
	}
	return errors.Join(errs...)
}

// nullKeys refuses the keys written with no value: yaml leaves the default
// in place for them, so `mode: ~` or a `mode:` left empty would run the
// default mode (advisory) without a word, where `mode: ""` is refused.
func (s *source) nullKeys() error {
	if s == nil || len(s.nulls) == 0 {
		return nil
	}
	errs := make([]error, len(s.nulls))
	for i, k := range s.nulls {
		errs[i] = fmt.Errorf("line %d: %s: no value (null); give one, or leave the key out for its default", s.keyLine[k], k)
	}
	return errors.Join(errs...)
}
