package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// cbMalformedData declares three clauses that cannot compile, across two
// capabilities: a syntax error, an unknown function and a clause whose
// type is not bool. The third capability is fine and must not be blamed.
const cbMalformedData = `autonomy:
  capabilities:
    tool.echo:
      zones: ["*"]
      side_effects: false
    account.withdraw:
      zones: ["*"]
      side_effects: false
      contract:
        preconditions:
          - "args.amount > 0"
          - "args.amount <= args.account.balance &&"
        invariants:
          - "args.account.balance + 1"
    refund.create.v2:
      zones: ["payments"]
      side_effects: true
      contract:
        preconditions: ["isPositive(args.amountUsd)"]
`

// cbMalformedWant is how each problem must be named: capability kind,
// clause list and index, and line:column inside the expression.
var cbMalformedWant = []string{
	`capability "account.withdraw": preconditions[1] at 1:39: Syntax error:`,
	`capability "account.withdraw": invariants[0] at 1:1: clause must evaluate to bool, found int`,
	`capability "refund.create.v2": preconditions[0] at 1:11: undeclared reference to 'isPositive'`,
}

// TestClauseBundleRefused: a bundle with malformed clauses fails
// check-config listing every problem, and serve refuses to start on it.
func TestClauseBundleRefused(t *testing.T) {
	dir := cbBundle(t, cbMalformedData)
	wantAll := func(t *testing.T, what, out string) {
		t.Helper()
		for _, want := range cbMalformedWant {
			if !strings.Contains(out, want) {
				t.Errorf("%s output lacks %q:\n%s", what, want, out)
			}
		}
		if !strings.Contains(out, "bundle "+dir+": clause: 3 invalid clauses") {
			t.Errorf("%s output does not name the bundle and count the problems:\n%s", what, out)
		}
		if strings.Contains(out, "tool.echo") || strings.Contains(out, `"account.withdraw": preconditions[0]`) {
			t.Errorf("%s output blames a good clause:\n%s", what, out)
		}
	}

	t.Run("check-config lists all three", func(t *testing.T) {
		res := RunAutonomy(t, "check-config", "--bundle", dir)
		if res.Code != 1 {
			t.Fatalf("check-config exit %d, want 1\nstdout: %s\nstderr: %s", res.Code, res.Stdout, res.Stderr)
		}
		wantAll(t, "check-config", res.Stderr)
		if res.Stdout != "" {
			t.Errorf("check-config printed to stdout on failure: %s", res.Stdout)
		}
	})

	t.Run("serve exits before listening", func(t *testing.T) {
		s, err := TryStartServer(t, ServeOptions{Mode: "enforce", Args: []string{"--bundle", dir}})
		if err == nil {
			t.Fatalf("serve started on a bundle with malformed clauses at %s", s.HTTPAddr)
		}
		if s == nil {
			t.Fatal(err)
		}
		if s.code == 0 {
			t.Errorf("serve exited 0 on a bad bundle")
		}
		if lines := s.LogLines("listening"); len(lines) != 0 {
			t.Errorf("serve logged listening on a bad bundle: %v", lines)
		}
		wantAll(t, "serve", s.Logs())
	})
}

// cbClauseData declares the seed's withdraw contract in CEL, documentation
// only and message variants of it, a cost-bounded list clause, and the
// default bundle's refund capability.
const cbClauseData = `autonomy:
  capabilities:
    account.withdraw:
      zones: ["*"]
      side_effects: false
      contract:
        preconditions: ["args.amount > 0", "args.amount <= args.account.balance"]
        postconditions: ["result.balance == old(args.account.balance) - args.amount"]
        invariants: ["args.account.balance >= 0"]
    account.withdraw.documented:
      zones: ["*"]
      side_effects: false
      contract:
        preconditions: ["args.amount > 0"]
        validate: false
    account.withdraw.explained:
      zones: ["*"]
      side_effects: false
      contract:
        preconditions: ["args.amount > 0"]
        message: "a withdrawal must move a positive amount"
    ledger.adjust:
      zones: ["*"]
      side_effects: false
      contract:
        invariants: ["args.account.balance >= 0"]
    batch.sum:
      zones: ["*"]
      side_effects: false
      contract:
        preconditions: ["args.items.all(i, i > 0)"]
    refund.create.v2:
      zones: ["payments"]
      side_effects: true
      requires_preflight: true
      requires_rollback: true
      rollbacks: ["rb.refund.void"]
      evidence: ["receipt.id"]
      bind_arguments: true
      contract:
        preconditions: ["args.amountUsd > 0"]
  attestation:
    required: false
    max_age: "10m"
    enrolled_nodes: ["edge-7"]
`

// cbClauseRow is a clause_results row as the API returns it.
type cbClauseRow struct {
	Contract    string         `json:"contract"`
	Outcome     string         `json:"outcome"`
	Severity    string         `json:"severity"`
	Reason      string         `json:"reason"`
	RepairHints []any          `json:"repair_hints"`
	Evidence    map[string]any `json:"evidence"`
}

// cbClauseRequest is a one-step plan of kind with args; a side-effecting
// kind gets literal provenance, a rollback, evidence and a fresh
// attestation, so only its clauses can fail.
func cbClauseRequest(t *testing.T, name, kind, args string) []byte {
	t.Helper()
	step := map[string]any{"id": "s1", "kind": kind, "zone": "payments", "args": json.RawMessage(args)}
	ctx := map[string]any{"actor": map[string]any{"id": "user:example", "session_id": "session:" + name}}
	if kind == "refund.create.v2" {
		var decoded map[string]any
		if err := json.Unmarshal([]byte(args), &decoded); err != nil {
			t.Fatal(err)
		}
		prov := map[string]any{}
		for k := range decoded {
			prov[k] = "literal"
		}
		step["provenance"] = prov
		step["rollback"] = "rb.refund.void"
		step["expected_evidence"] = []any{"receipt.id"}
		ctx["attestation"] = map[string]any{"node_id": "edge-7", "issued_at": time.Now().UTC().Format(time.RFC3339)}
	}
	b, err := json.Marshal(map[string]any{
		"intent":  map[string]any{"summary": "clause test " + name, "plan_hash": "plan-" + name},
		"plan":    map[string]any{"steps": []any{step}},
		"context": ctx,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestClausePreflightRows: preconditions and invariants run on every plan
// step at preflight; each failure is a blocking clause_results row without
// a bounded hint, so the outcome is deny with the clause's reason.
func TestClausePreflightRows(t *testing.T) {
	dir := cbBundle(t, cbClauseData)
	cfg := filepath.Join(t.TempDir(), "autonomy.yaml")
	// 200 is below what all() over a 100-element list costs and above what
	// a short list costs, so the same clause passes small and fails large.
	if err := os.WriteFile(cfg, []byte("clauses:\n  cost_limit: 200\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := cbServe(t, "enforce", "--bundle", dir, "--config", cfg)
	// The validate: false contract is accepted but never run: serve says
	// so (postconditions run on the tool's response).
	var notes []any
	for _, l := range srv.LogLines("clause not enforced") {
		if l["level"] == "WARN" {
			notes = append(notes, l["note"])
		}
	}
	wantNotes := []any{
		`capability "account.withdraw.documented": preconditions[0] not enforced: the contract is validate: false (documentation only)`,
	}
	if !reflect.DeepEqual(notes, wantNotes) {
		t.Errorf("serve logged %q as unenforced clauses, want WARN notes %q", notes, wantNotes)
	}

	manyItems := "[" + strings.TrimSuffix(strings.Repeat("1,", 100), ",") + "]"
	row := func(kind, contract, reason, expression, message string) cbClauseRow {
		return cbClauseRow{Contract: contract, Outcome: "fail", Severity: "blocking", Reason: reason,
			RepairHints: []any{}, Evidence: map[string]any{"step": "s1", "kind": kind,
				"expression": expression, "message": message}}
	}
	tests := map[string]struct {
		kind, args  string
		wantOutcome string
		wantReason  string
		wantRows    []cbClauseRow
	}{
		"withdraw within the balance passes": {
			kind: "account.withdraw", args: `{"amount": 30, "account": {"balance": 100}}`,
			wantOutcome: "pass", wantReason: "contract: passed",
		},
		"withdraw of nothing violates the first precondition": {
			kind: "account.withdraw", args: `{"amount": 0, "account": {"balance": 100}}`,
			wantOutcome: "deny", wantReason: cbReasonPrecondition,
			wantRows: []cbClauseRow{row("account.withdraw", "s1:precondition[0]", cbReasonPrecondition, "args.amount > 0",
				"precondition violated: args.amount > 0 (args.amount = 0)")},
		},
		"withdraw over the balance violates the second precondition": {
			kind: "account.withdraw", args: `{"amount": 150, "account": {"balance": 100}}`,
			wantOutcome: "deny", wantReason: cbReasonPrecondition,
			wantRows: []cbClauseRow{row("account.withdraw", "s1:precondition[1]", cbReasonPrecondition, "args.amount <= args.account.balance",
				"precondition violated: args.amount <= args.account.balance (args.amount = 150, args.account.balance = 100)")},
		},
		"preconditions are reported before invariants": {
			kind: "account.withdraw", args: `{"amount": -20, "account": {"balance": -10}}`,
			wantOutcome: "deny", wantReason: cbReasonPrecondition,
			wantRows: []cbClauseRow{
				row("account.withdraw", "s1:precondition[0]", cbReasonPrecondition, "args.amount > 0",
					"precondition violated: args.amount > 0 (args.amount = -20)"),
				row("account.withdraw", "s1:invariant[0]", "clause: invariant_violated", "args.account.balance >= 0",
					"invariant violated: args.account.balance >= 0 (args.account.balance = -10)"),
			},
		},
		"a broken invariant alone denies with its reason": {
			kind: "ledger.adjust", args: `{"account": {"balance": -10}}`,
			wantOutcome: "deny", wantReason: "clause: invariant_violated",
			wantRows: []cbClauseRow{row("ledger.adjust", "s1:invariant[0]", "clause: invariant_violated", "args.account.balance >= 0",
				"invariant violated: args.account.balance >= 0 (args.account.balance = -10)")},
		},
		"a missing field fails closed": {
			kind: "account.withdraw", args: `{"amount": 5}`,
			wantOutcome: "deny", wantReason: cbReasonPrecondition,
			wantRows: []cbClauseRow{
				row("account.withdraw", "s1:precondition[1]", cbReasonPrecondition, "args.amount <= args.account.balance",
					"precondition could not be evaluated: args.amount <= args.account.balance: no such key: account (args.amount = 5)"),
				row("account.withdraw", "s1:invariant[0]", "clause: invariant_violated", "args.account.balance >= 0",
					"invariant could not be evaluated: args.account.balance >= 0: no such key: account"),
			},
		},
		"a wrong type fails closed": {
			kind: "account.withdraw", args: `{"amount": "ten", "account": {"balance": 100}}`,
			wantOutcome: "deny", wantReason: cbReasonPrecondition,
			wantRows: []cbClauseRow{
				row("account.withdraw", "s1:precondition[0]", cbReasonPrecondition, "args.amount > 0",
					`precondition could not be evaluated: args.amount > 0: no such overload (args.amount = "ten")`),
				row("account.withdraw", "s1:precondition[1]", cbReasonPrecondition, "args.amount <= args.account.balance",
					`precondition could not be evaluated: args.amount <= args.account.balance: no such overload (args.amount = "ten", args.account.balance = 100)`),
			},
		},
		"validate false makes the clause documentation only": {
			kind: "account.withdraw.documented", args: `{"amount": -1}`,
			wantOutcome: "pass", wantReason: "contract: passed",
		},
		"message opens the text, the expression and its values follow": {
			kind: "account.withdraw.explained", args: `{"amount": 0}`,
			wantOutcome: "deny", wantReason: cbReasonPrecondition,
			wantRows: []cbClauseRow{row("account.withdraw.explained", "s1:precondition[0]", cbReasonPrecondition, "args.amount > 0",
				"a withdrawal must move a positive amount: args.amount > 0 (args.amount = 0)")},
		},
		"a short list is within the configured cost limit": {
			kind: "batch.sum", args: `{"items": [1, 2, 3]}`,
			wantOutcome: "pass", wantReason: "contract: passed",
		},
		"exceeding the configured cost limit fails the clause": {
			kind: "batch.sum", args: `{"items": ` + manyItems + `}`,
			wantOutcome: "deny", wantReason: cbReasonPrecondition,
			wantRows: []cbClauseRow{row("batch.sum", "s1:precondition[0]", cbReasonPrecondition, "args.items.all(i, i > 0)",
				"precondition could not be evaluated: args.items.all(i, i > 0): operation cancelled: actual cost limit exceeded (args.items = [1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1…)")},
		},
		"the default refund precondition": {
			kind: "refund.create.v2", args: `{"caseRef": "case:882", "amountUsd": 0}`,
			wantOutcome: "deny", wantReason: cbReasonPrecondition,
			wantRows: []cbClauseRow{row("refund.create.v2", "s1:precondition[0]", cbReasonPrecondition, "args.amountUsd > 0",
				"precondition violated: args.amountUsd > 0 (args.amountUsd = 0)")},
		},
		"a positive refund passes": {
			kind: "refund.create.v2", args: `{"caseRef": "case:882", "amountUsd": 125}`,
			wantOutcome: "pass", wantReason: "contract: passed",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := srv.preflight(t, cbClauseRequest(t, strings.ReplaceAll(name, " ", "-"), tc.kind, tc.args))
			for _, c := range d.ContractResults {
				if c.Outcome == "fail" {
					t.Fatalf("catalog row %s failed (%s): the request should fail only on clauses", c.Contract, c.Reason)
				}
			}
			if d.Outcome != tc.wantOutcome || d.Reason != tc.wantReason {
				t.Errorf("outcome %q reason %q, want %q %q", d.Outcome, d.Reason, tc.wantOutcome, tc.wantReason)
			}
			got := make([]cbClauseRow, len(d.ClauseResults))
			for i, r := range d.ClauseResults {
				got[i] = cbClauseRow(r)
			}
			want := tc.wantRows
			if want == nil {
				want = []cbClauseRow{}
			}
			if !reflect.DeepEqual(got, want) {
				gotJSON, _ := json.MarshalIndent(got, "", "  ")
				wantJSON, _ := json.MarshalIndent(want, "", "  ")
				t.Errorf("clause_results:\n%s\nwant:\n%s", gotJSON, wantJSON)
			}
		})
	}
}
