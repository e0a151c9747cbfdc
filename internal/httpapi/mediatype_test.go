package httpapi_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/contractrefine/autonomy/preflight"
)

// TestPreflightMediaType: POST /v1/preflight does not read its declared
// Content-Type (the spec's error table has no status for it): a JSON
// PreflightRequest is decided whatever it was declared as (curl -d sends a
// form type), and a body that is not one is 400 malformed-request, with
// nothing recorded or spent.
func TestPreflightMediaType(t *testing.T) {
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON",
		"application/vnd.autonomy.preflight+json", "", "text/plain", "application/x-www-form-urlencoded",
		"multipart/form-data; boundary=x", "application/octet-stream", "application/json; charset=utf-16",
		"application/json; =", "application/json\x00text/plain"} {
		t.Run(ct, func(t *testing.T) {
			f := newFixture(t)
			post := func(body []byte) response {
				req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/preflight", bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				for v := range strings.SplitSeq(ct, "\x00") {
					if v != "" {
						req.Header.Add("Content-Type", v)
					}
				}
				return send(t, req)
			}
			if errs := mustError(t, post([]byte("summary=hi&plan=x")), http.StatusBadRequest); errs[0].Code != preflight.CodeMalformedRequest {
				t.Errorf("a form body declared %q: code %q, want %q", ct, errs[0].Code, preflight.CodeMalformedRequest)
			}
			if got := f.frames(); got != 0 {
				t.Errorf("a refused body left %d frames", got)
			}
			// The JSON body is decided, as the session's first attempt.
			r := post(readRequest(t, "read_repair"))
			if r.status != http.StatusOK {
				t.Fatalf("a JSON PreflightRequest declared %q: %d %s, want a decision", ct, r.status, r.body)
			}
			if d := mustDecision(t, r); d.Attempt != 1 {
				t.Errorf("attempt after a refused body: %d, want 1", d.Attempt)
			}
		})
	}
}

// TestQueryProblemsAreNamed: a refused query says what is wrong with it:
// an unknown parameter by its name, not as a repeated dry_run.
func TestQueryProblemsAreNamed(t *testing.T) {
	cases := map[string]string{
		"dry-run=true":            `Unknown query parameter \"dry-run\": POST /v1/preflight takes only dry_run.`,
		"dry_run=true&zeta=1&b=2": `Unknown query parameter \"b\"`,
		"dry_run=true&dry_run=1":  "given more than once",
		"dry_run=maybe":           "must be true or false",
		"dry_run=tru%":            "does not parse",
	}
	for query, want := range cases {
		t.Run(query, func(t *testing.T) {
			f := newFixture(t)
			r := f.do(http.MethodPost, "/v1/preflight?"+query, readRequest(t, "echo_pass"))
			if errs := mustError(t, r, http.StatusBadRequest); !strings.Contains(string(r.body), want) || errs[0].Code != preflight.CodeMalformedRequest {
				t.Errorf("?%s: %s, want a malformed-request saying %s", query, r.body, want)
			}
		})
	}
}
