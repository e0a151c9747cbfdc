package canon

import (
	"bytes"
	"errors"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrLoneSurrogate reports a \u escape of half a UTF-16 surrogate pair with
// no other half: it names no character.
var ErrLoneSurrogate = errors.New("canon: \\u escape of a lone UTF-16 surrogate")

// CheckText reports whether b, JSON text about to be parsed, says one thing
// only. encoding/json reads every byte that is not UTF-8, and every \u
// escape of a lone surrogate, as U+FFFD, so two different texts would parse,
// and digest, as the same value while a reader that keeps them apart (a tool
// runtime in another language) sees two. RFC 8259 §8.1 asks for UTF-8 and
// RFC 8785 refuses lone surrogates; CheckText returns ErrInvalidUTF8 or
// ErrLoneSurrogate for such text, nil otherwise. It does not check the
// rest of the syntax, which the parser does.
func CheckText(b []byte) error {
	if !utf8.Valid(b) {
		return ErrInvalidUTF8
	}
	if !bytes.Contains(b, []byte(`\u`)) {
		return nil
	}
	inString := false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			inString = !inString
		case c == '\\' && inString && i+1 < len(b):
			i++
			if b[i] != 'u' {
				continue
			}
			r, ok := hex4(b, i+1)
			if !ok {
				continue // the parser refuses a malformed escape
			}
			i += 4
			switch {
			case utf16.IsSurrogate(r) && r < 0xdc00: // the high half: a low one must follow
				lo, ok := hex4(b, i+3)
				if i+2 >= len(b) || b[i+1] != '\\' || b[i+2] != 'u' || !ok || lo < 0xdc00 || lo > 0xdfff {
					return ErrLoneSurrogate
				}
				i += 6
			case utf16.IsSurrogate(r):
				return ErrLoneSurrogate
			}
		}
	}
	return nil
}

// hex4 reads the four hex digits at b[i:i+4].
func hex4(b []byte, i int) (rune, bool) {
	if i < 0 || i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// FoldKey returns the form of s that exactly the strings equal to s under
// Unicode simple case folding share: FoldKey(a) == FoldKey(b) when
// strings.EqualFold(a, b), for valid UTF-8. encoding/json matches member
// names to struct fields that way, so a Go tool runtime reads "kind",
// "KIND" and "\u212aind" (with the Kelvin sign) as one field, the last one
// given winning; a body naming two of them means one thing to a reader that
// compares names exactly and another to the runtime.
func FoldKey(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return strings.Map(foldRune, s)
		}
	}
	return strings.ToLower(s) // returns s itself when it has no upper case
}

// foldRune is the smallest rune of r's simple-folding orbit, in lower case
// when that is an ASCII letter, so FoldKey agrees with strings.ToLower on
// ASCII.
func foldRune(r rune) rune {
	least := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		least = min(least, f)
	}
	if 'A' <= least && least <= 'Z' {
		least += 'a' - 'A'
	}
	return least
}
