package httpapi_test

import (
	"bytes"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current answers")

// goldenCases are request sequences posted in order to a fresh server; the
// golden file holds the exact bytes of the last answer.
var goldenCases = map[string]struct {
	requests []string
	query    string
	outcome  string
	reason   string
	attempt  int
}{
	"refund_pass":             {requests: []string{"refund_pass"}, outcome: "pass", reason: "contract: passed", attempt: 1},
	"refund_repair":           {requests: []string{"refund_repair"}, outcome: "repair_required", reason: "contract: repair_required", attempt: 1},
	"refund_repaired":         {requests: []string{"refund_repair", "refund_pass"}, outcome: "pass", reason: "contract: passed", attempt: 2},
	"refund_model_high_risk":  {requests: []string{"refund_model_high_risk"}, outcome: "deny", reason: "contract: argument_provenance_invalid", attempt: 1},
	"refund_clause_violation": {requests: []string{"refund_clause_violation"}, outcome: "deny", reason: "clause: precondition_violated", attempt: 1},
	"refund_pass_dry_run":     {requests: []string{"refund_pass"}, query: "?dry_run=true", outcome: "pass", reason: "contract: passed", attempt: 1},
	"echo_pass":               {requests: []string{"echo_pass"}, outcome: "pass", reason: "contract: passed", attempt: 1},
	"echo_no_session":         {requests: []string{"echo_no_session"}, outcome: "deny", reason: "contract: session_metadata_missing", attempt: 1},
	"read_repair_exhausted":   {requests: []string{"read_repair", "read_pass", "read_pass"}, outcome: "deny", reason: "contract: repair_exhausted", attempt: 3},
}

// TestGoldenDecisions posts each case's requests twice, to two fresh
// servers with the same clock and ids, and compares the last answers with
// each other and with testdata/golden (go test -run Golden -update
// rewrites the files). Every answer in the sequence is checked for the
// decision invariants, and GET /v1/preflight/{id} must return the POST's
// bytes.
func TestGoldenDecisions(t *testing.T) {
	for name, tc := range goldenCases {
		t.Run(name, func(t *testing.T) {
			var runs [2][]byte
			for i := range runs {
				f := newFixture(t)
				var last response
				for _, req := range tc.requests {
					last = f.do(http.MethodPost, "/v1/preflight"+tc.query, readRequest(t, req))
					d := mustDecision(t, last)
					if d.PreflightID == "" {
						continue
					}
					got := f.do(http.MethodGet, "/v1/preflight/"+d.PreflightID, nil)
					if got.status != http.StatusOK || !bytes.Equal(got.body, last.body) {
						t.Errorf("GET /v1/preflight/%s: status %d, bytes differ from the POST answer:\n%s\n%s",
							d.PreflightID, got.status, got.body, last.body)
					}
				}
				runs[i] = last.body
				if rep, err := f.db.Verify(t.Context()); err != nil || !rep.OK() {
					t.Errorf("wal verify after the run: %+v, %v", rep, err)
				}
				d := mustDecision(t, last)
				if d.Outcome != tc.outcome || d.Reason != tc.reason || d.Attempt != tc.attempt {
					t.Errorf("run %d: %s (%s) attempt %d, want %s (%s) attempt %d",
						i, d.Outcome, d.Reason, d.Attempt, tc.outcome, tc.reason, tc.attempt)
				}
			}
			if !bytes.Equal(runs[0], runs[1]) {
				t.Fatalf("two runs answered different bytes:\n%s\n%s", runs[0], runs[1])
			}
			golden := filepath.Join("testdata", "golden", name+".json")
			if *update {
				if err := os.WriteFile(golden, runs[0], 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/httpapi -run Golden -update)", err)
			}
			if !bytes.Equal(runs[0], want) {
				t.Errorf("answer differs from %s:\n got %s\nwant %s", golden, runs[0], want)
			}
		})
	}
}
