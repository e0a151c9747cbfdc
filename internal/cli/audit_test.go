package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// TestAuditFromWAL reads the join straight from a stopped service's WAL.
func TestAuditFromWAL(t *testing.T) {
	dir := t.TempDir()
	db, err := wal.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 6, 23, 14, 29, 0, 0, time.UTC)
	b := preflight.Binding{PreflightID: "pf_auditfromwal0001", AuditID: "au_auditfromwal0001",
		Outcome: preflight.OutcomePass, ActorID: "user:example", ExpiresAt: at.Add(5 * time.Minute),
		Steps: []preflight.BoundStep{{ID: "s1", Kind: "tool.echo", ArgsDigest: "sha256:x"}}}
	ctx := context.Background()
	if _, err := db.RecordPreflight(ctx, wal.PreflightRecord{Binding: b, Decision: json.RawMessage(`{"outcome":"pass"}`), Time: at}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AppendDecision(ctx, wal.FrameInput{Kind: wal.KindDecision, AuditID: b.AuditID, Time: at.Add(time.Second),
		Attrs: &wal.DecisionAttrs{Outcome: "allow", Enforced: true, Reason: "contract: passed", ToolKind: "tool.echo", StepID: "s1"}}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	tests := map[string]struct {
		args     []string
		code     int
		contains []string
	}{
		"table":      {[]string{"audit", b.AuditID, "--data-dir", dir}, 0, []string{"2 frames", "preflight", "decision", "allow", "tool tool.echo step s1"}},
		"json":       {[]string{"audit", b.AuditID, "--data-dir", dir, "--json"}, 0, []string{`"kind":"autonomy.preflight"`, `"kind":"autonomy.decision"`}},
		"unknown id": {[]string{"audit", "au_nothinghere00001", "--data-dir", dir}, 1, []string{"no frames have audit id au_nothinghere00001"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Main(tc.args, &out, &errOut)
			text := out.String() + errOut.String()
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %s", code, tc.code, text)
			}
			for _, want := range tc.contains {
				if !strings.Contains(text, want) {
					t.Fatalf("output lacks %q:\n%s", want, text)
				}
			}
		})
	}
}

// TestCLIErrorsReadAlike: an unknown audit id and a bad preflight are
// printed the same way: the request, then the error body's code, path and
// message, never the raw JSON.
func TestCLIErrorsReadAlike(t *testing.T) {
	url := startPreflightServer(t, nil)
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"audit", "au_UNKNOWN0000000000", "--server", url}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, stderr %s", code, stderr.String())
	}
	want := "autonomy: GET " + url + "/v1/audit/au_UNKNOWN0000000000: 404 not-found: "
	if got := stderr.String(); !strings.HasPrefix(got, want) || strings.Contains(got, "{") {
		t.Errorf("audit of an unknown id printed %q, want it to start %q and hold no JSON", got, want)
	}
	plan := filepath.Join(t.TempDir(), "plan.json")
	if err := os.WriteFile(plan, []byte(`{"intent":`), 0o600); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := Main([]string{"preflight", "-f", plan, "--server", url}, &stdout, &stderr); code != 1 {
		t.Fatalf("exit %d, stderr %s", code, stderr.String())
	}
	if want := "autonomy: POST " + url + "/v1/preflight: 400 malformed-request"; !strings.HasPrefix(stderr.String(), want) {
		t.Errorf("preflight printed %q, want it to start %q", stderr.String(), want)
	}
}

// TestAuditTakesTheTokenFromTheEnvironment: without --token, the bearer
// token comes from $AUTONOMY_TOKEN (out of the process list); --token
// wins over it.
func TestAuditTakesTheTokenFromTheEnvironment(t *testing.T) {
	const envToken, flagToken = "token-from-the-environment", "token-from-the-flag"
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
		http.Error(w, `{"error":{"code":"not-found"}}`, http.StatusNotFound)
	}))
	defer srv.Close()
	t.Setenv(TokenEnv, envToken)
	runCLI(t, "audit", "au_x", "--server", srv.URL)
	runCLI(t, "audit", "au_x", "--server", srv.URL, "--token", flagToken)
	want := []string{"Bearer " + envToken, "Bearer " + flagToken}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("Authorization headers %q, want %q", got, want)
	}
}

// TestTablesShowNoControlCharacters: text an agent wrote (a tool kind, a
// step id) is printed with its control and bidi characters escaped, so
// it cannot clear the operator's screen, retitle the terminal or reorder
// a row.
func TestTablesShowNoControlCharacters(t *testing.T) {
	const hostile = "evil\x1b[2J\x1b]0;owned\x07\u202ekind\r\n"
	attrs, _ := json.Marshal(map[string]any{"outcome": "deny", "reason": "policy: unknown_tool_kind", "tool_kind": hostile, "step_id": hostile})
	var table bytes.Buffer
	if err := PrintAuditTable(&table, "au_x", []wal.Frame{{Seq: 1, Kind: wal.KindDecision, Timestamp: "2026-06-23T14:29:00Z", Attrs: attrs}}); err != nil {
		t.Fatal(err)
	}
	d := &preflight.Decision{Outcome: preflight.OutcomeDeny, Reason: "clause: precondition_violated",
		ClauseResults: []preflight.Result{{Contract: hostile + ":precondition[0]", Outcome: preflight.RowFail,
			Severity: preflight.SeverityBlocking, Reason: "clause: precondition_violated",
			RepairHints: []preflight.Hint{{Field: "/plan/steps/0/" + hostile, Suggestion: hostile}}}}}
	var decision bytes.Buffer
	if err := PrintDecision(&decision, d, ""); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"audit table": table.String(), "decision": decision.String()} {
		if strings.ContainsAny(out, "\x1b\x07\r\u202e") {
			t.Errorf("%s holds a raw control or bidi character:\n%q", name, out)
		}
		if !strings.Contains(out, `evil\u001b[2J`) {
			t.Errorf("%s does not show the escaped text:\n%s", name, out)
		}
	}
}

// TestAuditTableShowsApprovals: an approval row says what was decided, on
// which step and by whom.
func TestAuditTableShowsApprovals(t *testing.T) {
	attrs, _ := json.Marshal(wal.ApprovalAttrs{Approver: "alice-token", Decision: "reject", PreflightID: "pf_x",
		StepID: "s2", ToolKind: "pay.send", Roles: []string{"role:payment-approver"}})
	var table bytes.Buffer
	if err := PrintAuditTable(&table, "au_x", []wal.Frame{{Seq: 3, Kind: wal.KindApproval, Timestamp: "2026-06-23T14:29:00Z", Attrs: attrs}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"approval", "reject", "pf_x step s2 tool pay.send by alice-token"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("approval row lacks %q:\n%s", want, table.String())
		}
	}
}

// TestAuditTableNamesReplicas: on the etcd backend each replica numbers
// its own log, so a join's rows name the replica that wrote them; a
// single log's table has no such column.
func TestAuditTableNamesReplicas(t *testing.T) {
	frame := func(seq uint64, replica string) wal.Frame {
		attrs, _ := json.Marshal(map[string]any{"outcome": "allow", "reason": "", "tool_kind": "tool.echo", "replica": replica})
		return wal.Frame{Seq: seq, Kind: wal.KindDecision, Timestamp: "2026-06-23T14:29:00Z", Attrs: attrs}
	}
	var table bytes.Buffer
	if err := PrintAuditTable(&table, "au_x", []wal.Frame{frame(2, "replica-a"), frame(2, "replica-b")}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(table.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[1], "REPLICA") || !strings.HasPrefix(lines[2], "replica-a") || !strings.HasPrefix(lines[3], "replica-b") {
		t.Fatalf("a join across replicas:\n%s", table.String())
	}
	table.Reset()
	if err := PrintAuditTable(&table, "au_x", []wal.Frame{frame(1, "")}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(table.String(), "REPLICA") {
		t.Fatalf("a single log's table with a replica column:\n%s", table.String())
	}
}
