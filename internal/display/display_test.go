package display

import "testing"

func TestText(t *testing.T) {
	for in, want := range map[string]string{
		"tool.echo":                       "tool.echo",
		"résumé ✓ 日本":                     "résumé ✓ 日本",
		"evil\x1b[2J\x1b]0;owned\x07":     `evil\u001b[2J\u001b]0;owned\u0007`,
		"a\nb\tc\rd\be":                   `a\u000ab\u0009c\u000dd\u0008e`,
		"refund \u202e0001$":              `refund \u202e0001$`,
		"\u2066x\u2069\u200f\u0085\u007f": `\u2066x\u2069\u200f\u0085\u007f`,
	} {
		if got := Text(in); got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
	}
	if got, want := Page("<p>\n\tx\x1b[2J\u202e</p>"), "<p>\n\tx\\u001b[2J\\u202e</p>"; got != want {
		t.Errorf("Page = %q, want %q (newline and tab kept)", got, want)
	}
}
