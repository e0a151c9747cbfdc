package preflight

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/contractrefine/autonomy/internal/canon"
)

// sameAsMarshal fails unless d.CanonicalJSON gives what canon.Marshal(d)
// gives: the same bytes, or an error both times.
func sameAsMarshal(t *testing.T, name string, d *Decision) {
	t.Helper()
	want, wantErr := canon.Marshal(d)
	got, gotErr := d.CanonicalJSON()
	if (wantErr != nil) != (gotErr != nil) || !bytes.Equal(got, want) {
		t.Fatalf("%s:\n got %s (%v)\nwant %s (%v)", name, got, gotErr, want, wantErr)
	}
}

// TestCanonicalJSONAsMarshal: every golden decision and a set of awkward
// ones are written byte for byte as canon.Marshal writes them.
func TestCanonicalJSONAsMarshal(t *testing.T) {
	var files []string
	for _, dir := range []string{"testdata/golden", "../internal/httpapi/testdata/golden"} {
		m, err := filepath.Glob(filepath.Join(dir, "*.json"))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Fatal("no golden decisions found")
	}
	read := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d Decision
		if json.Unmarshal(raw, &d) != nil || d.Outcome == "" {
			continue // not a decision
		}
		read++
		sameAsMarshal(t, f, &d)
	}
	if read == 0 {
		t.Fatal("no golden file held a decision")
	}

	full := func() Decision {
		return Decision{PreflightID: "pf_x", AuditID: "au_x", Outcome: OutcomeRepairRequired, Reason: "contract: a<b&c",
			Attempt: 2, DecidedAt: "2026-11-29T00:00:00Z",
			Eligibility: Eligibility{BoundToolKinds: []string{}, ExpiresAt: "2026-11-29T00:05:00Z"},
			ContractResults: []Result{{Contract: "c1", Outcome: RowOutcome("fail"), Severity: Severity("error"), Reason: "r",
				Evidence:    map[string]any{"z": 1.5, "a": []any{"x", nil, true}, "é": map[string]any{"k": "\u2028"}},
				RepairHints: []Hint{{Field: "/plan/steps/0", Suggestion: map[string]any{"b": 1, "a": 2}, Bounded: true}, {Field: "/x"}}}},
			ClauseResults: []Result{}}
	}
	cases := map[string]func(d *Decision){
		"full": func(d *Decision) {},
		"nil slices and maps": func(d *Decision) {
			d.ClauseResults, d.ContractResults[0].Evidence, d.ContractResults[0].RepairHints, d.Eligibility.BoundToolKinds = nil, nil, nil, nil
		},
		"nil results": func(d *Decision) { d.ContractResults = nil },
		"rollback":    func(d *Decision) { d.Eligibility.RequiredRollback = "rb-1"; d.Eligibility.Allowed = true },
		"evidence of other types": func(d *Decision) {
			d.ContractResults[0].Evidence["list"] = []string{"b", "a"}
			d.ContractResults[0].Evidence["n"] = int32(7)
		},
		"suggestion of a struct": func(d *Decision) { d.ContractResults[0].RepairHints[0].Suggestion = struct{ B, A int }{1, 2} },
		"reason not UTF-8":       func(d *Decision) { d.Reason = "bad \xff byte" },
		"evidence not UTF-8":     func(d *Decision) { d.ContractResults[0].Evidence["k"] = map[string]any{"deep": "\xfe"} },
		"evidence key not UTF-8": func(d *Decision) { d.ContractResults[0].Evidence["\xff"] = 1 },
		"evidence not a number":  func(d *Decision) { d.ContractResults[0].Evidence["nan"] = math.NaN() },
		"big and small numbers": func(d *Decision) {
			d.ContractResults[0].Evidence["n"] = []any{1e21, 1e-7, math.Copysign(0, -1), json.Number("12.50")}
		},
		"approvals required": func(d *Decision) {
			d.Outcome, d.Eligibility.Allowed = OutcomePass, true
			d.Eligibility.ApprovalsRequired = []ApprovalRequired{{StepID: "s<2>", ToolKind: "pay.send",
				ArgsDigest: "sha256:00", Authorities: []string{"role:b", "role:a"}, ExpiresAt: "2026-11-29T00:04:00Z"},
				{StepID: "s3", ToolKind: "pay.send", Authorities: []string{}}}
		},
		"escapes in kinds": func(d *Decision) {
			d.Eligibility.BoundToolKinds = []string{"tool.\"q\"", "tool.\\", "tool.\u007f\u0001"}
		},
		"supplementary characters": func(d *Decision) {
			d.ContractResults[0].Evidence["\U0001F600"], d.ContractResults[0].Evidence["\uFB01"] = 1, 2
		},
	}
	for name, change := range cases {
		d := full()
		change(&d)
		sameAsMarshal(t, name, &d)
	}
}

// FuzzCanonicalJSON compares the two writers on decisions whose strings
// and evidence come from the fuzzer.
func FuzzCanonicalJSON(f *testing.F) {
	f.Add("contract: x", "k", `{"a":[1,"b"]}`, "/plan")
	f.Add("\xff", "\U0001F600", `[1e400]`, "")
	f.Fuzz(func(t *testing.T, reason, key, evidence, field string) {
		var ev any
		_ = json.Unmarshal([]byte(evidence), &ev)
		d := Decision{Reason: reason, Outcome: OutcomeDeny, Eligibility: Eligibility{BoundToolKinds: []string{key}},
			ContractResults: []Result{{Contract: key, Evidence: map[string]any{key: ev, reason: evidence},
				RepairHints: []Hint{{Field: field, Suggestion: ev}}}}}
		sameAsMarshal(t, "fuzzed", &d)
	})
}
