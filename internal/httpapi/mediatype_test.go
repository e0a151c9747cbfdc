package httpapi_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/contractrefine/autonomy/preflight"
)

// TestPreflightMediaType: a body declared as anything but JSON is refused
// with 415 before anything is recorded or spent; JSON with parameters, a
// +json type and an absent header are decided.
func TestPreflightMediaType(t *testing.T) {
	cases := map[string]struct {
		contentType string
		status      int
	}{
		"json":              {"application/json", 200},
		"json charset":      {"application/json; charset=utf-8", 200},
		"json upper case":   {"Application/JSON", 200},
		"plus json":         {"application/vnd.autonomy.preflight+json", 200},
		"absent":            {"", 200},
		"text":              {"text/plain", 415},
		"form":              {"application/x-www-form-urlencoded", 415},
		"multipart":         {"multipart/form-data; boundary=x", 415},
		"json lookalike":    {"application/jsonx", 415},
		"unparsable":        {"application/json; =", 415},
		"octet stream":      {"application/octet-stream", 415},
		"text json lookali": {"text/json", 415},
		"json in utf-16":    {"application/json; charset=utf-16", 415},
		"json in UTF-8":     {"application/json; charset=UTF-8", 200},
		"declared twice":    {"application/json\x00text/plain", 415},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			body := readRequest(t, "read_repair")
			req, err := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/preflight", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			for ct := range strings.SplitSeq(tc.contentType, "\x00") {
				if ct != "" {
					req.Header.Add("Content-Type", ct)
				}
			}
			r := send(t, req)
			if r.status != tc.status {
				t.Fatalf("Content-Type %q: status %d, want %d: %s", tc.contentType, r.status, tc.status, r.body)
			}
			if tc.status != http.StatusUnsupportedMediaType {
				return
			}
			if errs := mustError(t, r, tc.status); errs[0].Code != preflight.CodeUnsupportedMediaType {
				t.Errorf("code %q, want %q", errs[0].Code, preflight.CodeUnsupportedMediaType)
			}
			if got := f.frames(); got != 0 {
				t.Errorf("a refused body left %d frames", got)
			}
			// The next JSON submission of the session is still its first.
			d := mustDecision(t, f.post(body))
			if d.Attempt != 1 {
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
