// Package display makes text that agents and clients wrote safe to show an
// operator: in a terminal (the CLI's tables, a page read with curl) a
// control character can clear the screen, set the window title or
// overwrite a line, and in a browser a bidirectional override reorders
// what is read. Such characters are shown as visible \uXXXX escapes;
// everything else is left as it is.
package display

import (
	"fmt"
	"strings"
)

// Text returns s with every control character (C0 and C1, DEL; newline and
// tab included, so that text cannot break a table's rows or columns) and
// every bidirectional formatting character written as a \uXXXX escape.
func Text(s string) string {
	return escape(s, func(r rune) bool { return unsafe(r) })
}

// Page is Text for a rendered page, whose own layout uses newlines and
// tabs: those are kept.
func Page(s string) string {
	return escape(s, func(r rune) bool { return r != '\n' && r != '\t' && unsafe(r) })
}

func escape(s string, bad func(rune) bool) string {
	if !strings.ContainsFunc(s, bad) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for _, r := range s {
		if bad(r) {
			fmt.Fprintf(&b, `\u%04x`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// unsafe reports the control characters and the bidirectional formatting
// characters (marks, embeddings, overrides, isolates).
func unsafe(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}
