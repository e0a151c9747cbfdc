package canon

import "testing"

// TestWriterInsert: the inserted member lands in its sorted place in the
// outermost object only, and a member the caller names itself stands.
func TestWriterInsert(t *testing.T) {
	write := func(names ...string) string {
		var w Writer
		w.Insert("m", []byte(`"x"`))
		w.Open()
		for _, n := range names {
			w.Name(n)
			if n == "nested" {
				w.Open()
				w.Name("a")
				w.Value(1.0)
				w.Name("z")
				w.Value(2.0)
				w.Close()
				continue
			}
			w.String(n)
		}
		w.Close()
		b, err := w.Bytes()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, c := range []struct {
		names []string
		want  string
	}{
		{nil, `{"m":"x"}`},
		{[]string{"a"}, `{"a":"a","m":"x"}`},
		{[]string{"z"}, `{"m":"x","z":"z"}`},
		{[]string{"a", "z"}, `{"a":"a","m":"x","z":"z"}`},
		{[]string{"a", "m", "z"}, `{"a":"a","m":"m","z":"z"}`},
		{[]string{"a", "nested"}, `{"a":"a","m":"x","nested":{"a":1,"z":2}}`},
		{[]string{"b", "l"}, `{"b":"b","l":"l","m":"x"}`},
		{[]string{""}, `{"":"","m":"x"}`},
		{[]string{"", "z"}, `{"":"","m":"x","z":"z"}`},
	} {
		if got := write(c.names...); got != c.want {
			t.Errorf("%q: %s, want %s", c.names, got, c.want)
		}
	}
}
