package canon

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckText(t *testing.T) {
	tests := map[string]struct {
		text string
		want error
	}{
		"plain":                              {`{"a":"b"}`, nil},
		"escapes":                            {`{"a":"\n\"\\\/\u00e9\uFFFD"}`, nil},
		"a surrogate pair":                   {`{"a":"\ud83d\ude00"}`, nil},
		"a pair in upper case":               {`["\uD83D\uDE00"]`, nil},
		"an escaped backslash before u":      {`{"a":"\\ud800"}`, nil},
		"a u outside strings":                {`{"\u0061":1}`, nil},
		"a lone high half":                   {`{"a":"\ud800"}`, ErrLoneSurrogate},
		"a lone high half in a key":          {`{"\ud800":1}`, ErrLoneSurrogate},
		"a lone low half":                    {`{"a":"x\udc00"}`, ErrLoneSurrogate},
		"a high half then a letter":          {`{"a":"\ud800x"}`, ErrLoneSurrogate},
		"two high halves":                    {`{"a":"\ud800\ud800"}`, ErrLoneSurrogate},
		"a high half at the end":             {`"\ud83d`, ErrLoneSurrogate},
		"a high half then a short escape":    {`"\ud83d\ude0"`, ErrLoneSurrogate},
		"a pair, then a lone low":            {`"\ud83d\ude00\ude00"`, ErrLoneSurrogate},
		"invalid UTF-8":                      {"{\"a\":\"\xff\"}", ErrInvalidUTF8},
		"a malformed escape is the parser's": {`"\uzzzz"`, nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if err := CheckText([]byte(tc.text)); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("CheckText(%s) = %v, want %v", tc.text, err, tc.want)
			}
		})
	}
}

func TestFoldKey(t *testing.T) {
	same := [][]string{
		{"kind", "KIND", "Kind", "\u212aind"},
		{"args", "ARGS", "arg\u017f"},
		{"amountUsd", "AMOUNTUSD", "amountusd"},
		{"σ", "Σ", "ς"},
		{"ß", "ẞ"},
		{"", ""},
	}
	for _, group := range same {
		for _, s := range group {
			if FoldKey(s) != FoldKey(group[0]) {
				t.Errorf("FoldKey(%q) = %q, FoldKey(%q) = %q: want equal", s, FoldKey(s), group[0], FoldKey(group[0]))
			}
		}
	}
	// Against strings.EqualFold, over names made of the letters that fold
	// across scripts and their neighbours.
	names := []string{"k", "K", "\u212a", "s", "S", "\u017f", "ı", "i", "I", "İ", "σ", "ς", "Σ", "ß", "ẞ", "a1", "A1", "é", "É", "-"}
	for _, a := range names {
		for _, b := range names {
			if got, want := FoldKey(a) == FoldKey(b), strings.EqualFold(a, b); got != want {
				t.Errorf("FoldKey(%q) == FoldKey(%q) is %v, EqualFold says %v", a, b, got, want)
			}
		}
	}
	if s := "kind"; FoldKey(s) != s {
		t.Errorf("FoldKey(%q) = %q", s, FoldKey(s))
	}
}
