package binding_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/preflight"
)

// TestInexactNumbersRefused: args digests compare numbers as doubles, so a
// preflight bound to "amountUsd":9007199254740992 would admit a call of
// 9007199254740993, which a runtime keeping the number's text acts on. A
// number in args whose text does not round-trip through a double is
// refused as gate: malformed_tool_call in every mode, and the deny body
// names it by JSON Pointer; the exact number is still allowed.
func TestInexactNumbersRefused(t *testing.T) {
	for _, mode := range []binding.Mode{binding.ModeDisabled, binding.ModeAdvisory, binding.ModeEnforce} {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnv(t, loadTestBundle(t), mode)
			bound := map[string]any{"caseRef": "case:882", "amountUsd": json.Number("9007199254740992")}
			b := e.record(preflight.OutcomePass, actorID, step("s1", "refund.create.v2", bound))
			for body, pointer := range map[string]string{
				`{"kind":"refund.create.v2","args":{"caseRef":"case:882","amountUsd":9007199254740993}}`:               "/args/amountUsd",
				`{"kind":"refund.create.v2","args":{"caseRef":"case:882","amountUsd":9007199254740992.0000001}}`:       "/args/amountUsd",
				`{"kind":"refund.create.v2","args":{"caseRef":"case:882","amountUsd":125,"x":[1,1.0000000000000001]}}`: "/args/x/1",
				`{"kind":"refund.create.v2","args":{"caseRef":"case:882","amountUsd":125,"a~/b":{"c":1e-400}}}`:        "/args/a~0~1b/c",
			} {
				d := e.check(&binding.Request{Method: http.MethodPost, Path: "/v1/tool", Body: []byte(body),
					Headers: withID(b.PreflightID, "req-"+pointer)})
				if d.Allowed || d.Status != http.StatusForbidden || d.Reason != "gate: malformed_tool_call" || d.Pointer != pointer {
					t.Fatalf("%s: got %+v, want a 403 gate: malformed_tool_call at %s", body, d, pointer)
				}
				if got := denyBody(t, d.DenyBody())["error"]["path"]; got != pointer {
					t.Fatalf("deny body %s names %q, want %q", d.DenyBody(), got, pointer)
				}
			}
			exact := `{"kind":"refund.create.v2","args":{"caseRef":"case:882","amountUsd":9007199254740992}}`
			d := e.check(&binding.Request{Method: http.MethodPost, Path: "/v1/tool", Body: []byte(exact),
				Headers: withID(b.PreflightID, "req-exact")})
			if !d.Allowed || d.Pointer != "" {
				t.Fatalf("the preflighted number: got %+v, want an allow", d)
			}
		})
	}
}
