package binding

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/internal/bundle"
	"github.com/contractrefine/autonomy/internal/bundle/bundletest"
	"github.com/contractrefine/autonomy/internal/ids"
	"github.com/contractrefine/autonomy/wal"
)

// docInputExample returns the JSON block docs/CLAUSES.md shows as the
// policy's input, the one after its "policy input example" marker.
func docInputExample(t *testing.T) []byte {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "CLAUSES.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := bytes.Cut(doc, []byte("<!-- policy input example"))
	if !ok {
		t.Fatal("docs/CLAUSES.md has no policy input example")
	}
	_, rest, ok = bytes.Cut(rest, []byte("```json\n"))
	if !ok {
		t.Fatal("the policy input example is not a json block")
	}
	block, _, ok := bytes.Cut(rest, []byte("```"))
	if !ok {
		t.Fatal("the policy input example does not end")
	}
	return block
}

// inputRecorder is a Policy that keeps the input the gate gave it.
type inputRecorder struct {
	Policy
	got map[string]any
}

func (r *inputRecorder) Allow(ctx context.Context, input map[string]any) (bool, string, error) {
	r.got = input
	return true, "", nil
}

// TestPolicyInputIsDocumented: the gate gives the policy exactly the input
// docs/CLAUSES.md shows for the call it describes, on the Go map path and
// on the OPA value path.
func TestPolicyInputIsDocumented(t *testing.T) {
	example := docInputExample(t)
	var want any
	if err := json.Unmarshal(example, &want); err != nil {
		t.Fatalf("the documented input is not JSON: %v", err)
	}
	// The call the documentation describes.
	req := func() *Request {
		return &Request{Method: http.MethodPost, Path: "/v1/tool?trace=1",
			Headers: map[string]string{"content-type": "application/json",
				"x-autonomy-actor": "user:example", HeaderRequestID: "req-1"},
			Body: []byte(`{"kind":"tool.echo","args":{"text":"hi"}}`)}
	}
	data := "autonomy:\n  capabilities:\n    tool.echo: { zones: [\"*\"] }\n"
	// A policy that allows exactly the documented input: JSON is a Rego term.
	policy := "package autonomy\n\nimport rego.v1\n\nallow if input == " + string(example) + "\n\ndeny_reason := \"other_input\"\n"
	b, err := bundle.Load(context.Background(), bundletest.Dir(t, map[string]string{
		"policy.rego": policy, "data.yaml": data}), nil)
	if err != nil {
		t.Fatal(err)
	}
	gate := func(t *testing.T, pol Policy) *Gate {
		db, err := wal.Open(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		now := time.Date(2026, 6, 23, 14, 29, 0, 0, time.UTC)
		return New(Options{Store: db, Log: db, Policy: func() Policy { return pol }, Mode: ModeEnforce,
			ActorHeader: "x-autonomy-actor", Now: func() time.Time { return now }, NewID: ids.Audit})
	}

	t.Run("map input", func(t *testing.T) {
		rec := &inputRecorder{Policy: mapPolicy{b}}
		if d := gate(t, rec).Check(context.Background(), req()); !d.Allowed {
			t.Fatalf("denied: %+v", d)
		}
		raw, err := json.Marshal(rec.got)
		if err != nil {
			t.Fatal(err)
		}
		var got any
		if err := json.Unmarshal(raw, &got); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("the gate's input is\n%s\ndocs/CLAUSES.md shows\n%s", raw, example)
		}
	})
	t.Run("value input", func(t *testing.T) {
		if d := gate(t, b).Check(context.Background(), req()); !d.Allowed {
			t.Fatalf("the policy that allows only the documented input denied: %+v", d)
		}
	})
}
