package binding

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// errDuplicateKey is wrapped by the error for a gated body in which one
// object names a member twice.
var errDuplicateKey = errors.New("duplicate member name")

// checkUniqueKeys returns an error when some object in the JSON text b
// names a member twice. Parsers disagree on which copy wins: encoding/json
// and most others keep the last, some keep the first. The gate must judge
// exactly the call the runtime will run, so a body that two parsers can
// read as two different calls (another tool kind, another amount) is
// refused instead of checked in one reading and executed in the other.
// RFC 8785 canonical JSON, which argument binding digests, is defined only
// for such I-JSON text (RFC 7493 §2.3) anyway.
func checkUniqueKeys(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	// One level per open object or array; arrays have a nil keys set.
	type level struct {
		keys      map[string]struct{}
		expectKey bool
	}
	var stack []*level
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			if len(stack) > 0 {
				return io.ErrUnexpectedEOF
			}
			return nil
		}
		if err != nil {
			return err
		}
		var top *level
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if top != nil && top.keys != nil {
					top.expectKey = true // this value done, a key comes next
				}
				l := &level{}
				if t == '{' {
					l.keys, l.expectKey = map[string]struct{}{}, true
				}
				stack = append(stack, l)
			default:
				stack = stack[:len(stack)-1]
			}
		default:
			if top == nil || top.keys == nil {
				continue
			}
			if !top.expectKey {
				top.expectKey = true
				continue
			}
			key, _ := t.(string) // the decoder only yields strings as keys
			if _, seen := top.keys[key]; seen {
				return fmt.Errorf("%w %q", errDuplicateKey, key)
			}
			top.keys[key] = struct{}{}
			top.expectKey = false
		}
	}
}
