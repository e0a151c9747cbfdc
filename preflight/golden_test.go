package preflight

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/contractrefine/autonomy/preflight/envelope"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current decisions")

// goldenCases lists every request in testdata/requests with the verifier
// options it runs under; the clock, the bundle and the chain are fixed.
var goldenCases = map[string]struct {
	offline bool
	outcome Outcome
}{
	"refund_pass":                {outcome: OutcomePass},
	"refund_repair":              {outcome: OutcomeRepairRequired},
	"refund_model_high_risk":     {outcome: OutcomeDeny},
	"refund_clause_violation":    {outcome: OutcomeDeny},
	"echo_no_envelope":           {outcome: OutcomePass},
	"offline_chain_unverifiable": {offline: true, outcome: OutcomePass},
	"empty_plan":                 {outcome: OutcomeDeny},
}

// decideFile runs a request file the way the server will: decode, validate
// the envelope, evaluate.
func decideFile(t *testing.T, v *DefaultVerifier, gov *Governance, body []byte) *Decision {
	t.Helper()
	req, rerr := DecodeRequest(body)
	if rerr != nil {
		t.Fatalf("decode: %v", rerr)
	}
	var env *envelope.Envelope
	if req.Context.Request != nil {
		var errs []envelope.FieldError
		env, errs = envelope.Validate(req.Context.Request)
		if len(errs) > 0 {
			t.Fatalf("envelope: %+v", errs)
		}
	}
	d, err := v.Evaluate(context.Background(), Input{
		Request: req, Envelope: env, Governance: gov, Clauses: refundClauses{}, Attempt: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "requests", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".json"))
	}
	for name := range goldenCases {
		if !slices.Contains(names, name) {
			t.Errorf("golden case %s has no request file", name)
		}
	}
	gov := loadGovernance(t)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			tc, ok := goldenCases[name]
			if !ok {
				t.Fatalf("request %s.json has no entry in goldenCases", name)
			}
			body, err := os.ReadFile(filepath.Join("testdata", "requests", name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			v := NewVerifier(Options{Chain: testChain(), Offline: tc.offline, Now: fixedClock})
			first, err := json.Marshal(decideFile(t, v, gov, body))
			if err != nil {
				t.Fatal(err)
			}
			d := decideFile(t, v, gov, body)
			second, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(first, second) {
				t.Fatalf("two evaluations differ:\n%s\n%s", first, second)
			}
			assertShape(t, d)
			if d.Outcome != tc.outcome {
				t.Errorf("outcome = %s (%s), want %s", d.Outcome, d.Reason, tc.outcome)
			}

			var pretty bytes.Buffer
			if err := json.Indent(&pretty, first, "", "  "); err != nil {
				t.Fatal(err)
			}
			pretty.WriteByte('\n')
			golden := filepath.Join("testdata", "golden", name+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, pretty.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./preflight -run Golden -update)", err)
			}
			if !bytes.Equal(pretty.Bytes(), want) {
				t.Errorf("decision differs from %s:\n%s", golden, pretty.Bytes())
			}
		})
	}
}
