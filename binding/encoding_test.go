package binding_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"net/http"
	"testing"

	"github.com/contractrefine/autonomy/binding"
)

// TestOutcomeJudgesTheDecodedBody: a gzip response is judged on the body
// the tool produced, not on its compressed bytes; a response in an
// encoding the gate cannot decode is unverified, never passed.
func TestOutcomeJudgesTheDecodedBody(t *testing.T) {
	e := newEnv(t, postconditionBundle(t, "tool.report", "result.ok == true"), binding.ModeEnforce)
	gz := func(s string) []byte {
		var buf bytes.Buffer
		w := gzip.NewWriter(&buf)
		w.Write([]byte(s))
		w.Close()
		return buf.Bytes()
	}
	for _, tc := range []struct {
		name     string
		encoding string
		body     []byte
		release  bool
		reason   string
	}{
		{"gzip passing", "gzip", gz(`{"ok":true}`), true, ""},
		{"gzip failing", "gzip", gz(`{"ok":false}`), false, "postcondition_violated"},
		{"plain passing", "", []byte(`{"ok":true}`), true, ""},
		{"identity", "identity", []byte(`{"ok":true}`), true, ""},
		{"brotli", "br", []byte(`not decodable here`), false, "unverified"},
		{"gzip, then br", "gzip,br", gz(`{"ok":true}`), false, "unverified"},
		{"gzip that is not", "gzip", []byte(`{"ok":true}`), false, "unverified"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := toolCall("tool.report", map[string]any{}, map[string]string{binding.HeaderRequestID: "r-" + tc.name})
			d := e.check(req)
			if !d.Allowed {
				t.Fatalf("check: %+v", d)
			}
			v := e.gate.Outcome(context.Background(), &binding.Exchange{Request: req, Decision: &d,
				Response: binding.Response{Status: http.StatusOK, Body: tc.body, Encoding: tc.encoding}})
			if v.Release != tc.release {
				t.Fatalf("verdict %+v, want release %v", v, tc.release)
			}
			if !tc.release && !bytes.Contains(v.Body, []byte(`"code":"`+tc.reason+`"`)) {
				t.Fatalf("refusal %s, want code %s", v.Body, tc.reason)
			}
		})
	}
}
