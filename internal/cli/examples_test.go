package cli

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// apiDocExamples returns the JSON blocks docs/API.md marks with
// <!-- example: NAME -->, by name.
func apiDocExamples(t *testing.T) map[string][]byte {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "API.md"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- example: ([a-z]+) -->\n```json\n(.*?)\n```")
	out := map[string][]byte{}
	for _, m := range re.FindAllSubmatch(doc, -1) {
		out[string(m[1])] = m[2]
	}
	return out
}

// TestAPIDocExamplesPass posts the PreflightRequests of docs/API.md, as
// written there with their times made fresh, to a real server on the
// default bundle, and requires a pass; the same text is what
// `autonomy preflight --example` prints.
func TestAPIDocExamplesPass(t *testing.T) {
	docs := apiDocExamples(t)
	names := ExampleNames()
	if got := slices.Sorted(func(yield func(string) bool) {
		for k := range docs {
			if !yield(k) {
				return
			}
		}
	}); !slices.Equal(got, names) || !slices.Contains(names, "envelope") || !slices.Contains(names, "plain") {
		t.Fatalf("docs/API.md shows examples %v, the CLI has %v; want plain and envelope in both", got, names)
	}
	url := startPreflightServer(t, nil)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			text, err := ExampleText(name)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(bytes.TrimSpace(text), bytes.TrimSpace(docs[name])) {
				t.Fatalf("docs/API.md's %s example differs from internal/cli/examples/%s.json", name, name)
			}
			// As written, the fixed times are stale: the refresh is needed.
			status, body, err := postJSON(t.Context(), url+"/v1/preflight?dry_run=true", "", docs[name])
			if err != nil {
				t.Fatal(err)
			}
			// The docs say what that answer is.
			var stale struct{ Outcome, Reason string }
			json.Unmarshal(body, &stale)
			switch {
			case name == "plain" && (status != http.StatusOK || stale.Reason != "contract: attestation_stale"):
				t.Errorf("the plain example as written: %d %s, want a deny contract: attestation_stale", status, body)
			case name == "envelope" && (status != http.StatusBadRequest || !bytes.Contains(body, []byte(`"deadline-exceeded"`))):
				t.Errorf("the envelope example as written: %d %s, want 400 deadline-exceeded", status, body)
			}
			fresh := Freshen(docs[name], time.Now())
			for range 2 { // a second post of the same request passes too
				status, body, err = postJSON(t.Context(), url+"/v1/preflight", "", fresh)
				if err != nil {
					t.Fatal(err)
				}
				var d struct{ Outcome, Reason string }
				if status != http.StatusOK || json.Unmarshal(body, &d) != nil || d.Outcome != "pass" {
					t.Fatalf("the %s example, made fresh: %d %s", name, status, body)
				}
			}
			// The CLI's --example output passes through the CLI.
			var out, errb bytes.Buffer
			if code := Main([]string{"preflight", "--example", name}, &out, &errb); code != 0 {
				t.Fatalf("--example %s: exit %d: %s", name, code, errb.String())
			}
			root := newRoot(&bytes.Buffer{}, &errb)
			root.SetIn(&out)
			root.SetArgs([]string{"preflight", "-f", "-", "--server", url})
			if err := root.Execute(); err != nil {
				t.Fatalf("preflight -f - of --example %s: %v %s", name, err, errb.String())
			}
		})
	}
	_, _, errs := runCLI(t, "preflight", "--example", "nope")
	if !strings.Contains(errs, `no example "nope": one of envelope, plain`) {
		t.Errorf("an unknown example: %q", errs)
	}
	if code, _, errs := runCLI(t, "preflight"); code != 1 || !strings.Contains(errs, "--example") {
		t.Errorf("preflight with neither -f nor --example: exit %d, %q", code, errs)
	}
}
