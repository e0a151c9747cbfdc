package binding

import (
	"errors"
	"testing"
)

func TestCheckUniqueKeys(t *testing.T) {
	tests := map[string]struct {
		body    string
		wantDup bool
		wantErr bool // not JSON at all
	}{
		"flat object":                      {body: `{"kind":"tool.echo","args":{"a":1}}`},
		"same key in sibling objects":      {body: `{"a":{"x":1},"b":{"x":2}}`},
		"same key in objects of an array":  {body: `{"args":{"items":[{"id":1},{"id":2}]}}`},
		"key equal to a value":             {body: `{"a":"b","b":"a"}`},
		"nested containers keep the count": {body: `{"a":[[],{}],"b":{"c":[1,{"d":2}]},"e":3}`},
		"empty object":                     {body: `{}`},
		"top-level scalar":                 {body: `"x"`},
		"top-level array":                  {body: `[{"a":1},{"a":1}]`},
		"repeated top-level key":           {body: `{"kind":"refund.create.v2","kind":"tool.echo"}`, wantDup: true},
		"repeated key after a container":   {body: `{"args":{"a":1},"x":[1],"args":{}}`, wantDup: true},
		"repeated nested key":              {body: `{"args":{"amountUsd":9999,"amountUsd":125}}`, wantDup: true},
		"repeated key deep in an array":    {body: `{"a":[{"b":{"c":1,"c":1}}]}`, wantDup: true},
		"repeated key spelt with escapes":  {body: `{"a":1,"\u0061":2}`, wantDup: true},
		"not JSON":                         {body: `{"a":`, wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := checkUniqueKeys([]byte(tc.body))
			switch {
			case tc.wantDup:
				if !errors.Is(err, errDuplicateKey) {
					t.Errorf("checkUniqueKeys(%s) = %v, want a duplicate-key error", tc.body, err)
				}
			case tc.wantErr:
				if err == nil || errors.Is(err, errDuplicateKey) {
					t.Errorf("checkUniqueKeys(%s) = %v, want a syntax error", tc.body, err)
				}
			case err != nil:
				t.Errorf("checkUniqueKeys(%s) = %v, want nil", tc.body, err)
			}
		})
	}
}

// BenchmarkCheckUniqueKeys measures the duplicate-name scan on a typical
// gated body; it runs on every gated call beside canon.Parse.
func BenchmarkCheckUniqueKeys(b *testing.B) {
	body := []byte(`{"kind":"refund.create.v2","args":{"caseRef":"case:882","amountUsd":125,"meta":{"channel":"web","tags":["a","b"]}}}`)
	b.ReportAllocs()
	for b.Loop() {
		if err := checkUniqueKeys(body); err != nil {
			b.Fatal(err)
		}
	}
}
