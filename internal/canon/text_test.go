package canon

import (
	"errors"
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
