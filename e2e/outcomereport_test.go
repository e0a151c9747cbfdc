package e2e

// POST /v1/outcome against the real binary: a tool runtime behind a proxy
// that cannot judge responses (nginx, Caddy) reports its own result with a
// reporter token; the gate judges it on the path ext_proc and the gateway
// use, records it once (reported_by runtime), and answers a violation with
// the 502 of docs/API.md. Helpers carry the orp prefix.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/contractrefine/autonomy/internal/etcdtest"
)

const (
	orpReporterToken = "reporter-0123456789abcdef01" // role:outcome-reporter, every tenant
	orpPlainToken    = "plain-0123456789abcdef01234" // no role
	orpAcmeToken     = "acmerep-0123456789abcdef012" // role:outcome-reporter, tenant acme only
)

func orpServe(t *testing.T, extra ...string) *cbServer {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(tokens, []byte(fmt.Sprintf(`tokens:
  - {name: ledger-runtime, tenant: "*", token: %q, roles: ["role:outcome-reporter"]}
  - {name: plain, tenant: "*", token: %q}
  - {name: acme-runtime, tenant: acme, token: %q, roles: ["role:outcome-reporter"]}
`, orpReporterToken, orpPlainToken, orpAcmeToken)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("access:\n  tokens_file: "+tokens+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return cbServe(t, "enforce", append([]string{"--config", cfg}, extra...)...)
}

// orpReport is a report body for the call auditID/requestID of kind.
func orpReport(auditID, requestID, kind, args, result string) string {
	return fmt.Sprintf(`{"audit_id":%q,"request_id":%q,"request":{"kind":%q,"args":%s},"status":200,"result":%s}`,
		auditID, requestID, kind, args, result)
}

func TestOutcomeReportedByRuntime(t *testing.T) {
	t.Parallel()
	s := orpServe(t)
	allowed := func(kind, requestID string) string {
		t.Helper()
		v := s.checkCall(t, cbCall{Kind: kind, Args: ocDebit, RequestID: requestID})
		if v.HTTPStatus != 200 || v.AuditID == "" {
			t.Fatalf("Check %s: %+v, want an allow", kind, v)
		}
		return v.AuditID
	}
	okAudit := allowed("ledger.debit.v1", "rq-right")
	right := orpReport(okAudit, "rq-right", "ledger.debit.v1", ocDebit, `{"accountRef":"acct:1","balanceUsd":75}`)

	refusals := map[string]struct {
		token, body    string
		status         int
		code, path     string
		contentTypeBad bool
	}{
		"no token":              {"", right, 401, "unauthorized", "", false},
		"a token without role":  {orpPlainToken, right, 403, "reporter-not-authorized", "", false},
		"not JSON":              {orpReporterToken, `{"audit_id":`, 400, "malformed-request", "/audit_id", false},
		"status a string":       {orpReporterToken, strings.Replace(right, `"status":200`, `"status":"200"`, 1), 400, "malformed-request", "/status", false},
		"status out of range":   {orpReporterToken, strings.Replace(right, `"status":200`, `"status":42`, 1), 400, "malformed-request", "/status", false},
		"unknown member":        {orpReporterToken, strings.Replace(right, `{"audit_id"`, `{"verdict":"ok","audit_id"`, 1), 400, "malformed-request", "/verdict", false},
		"no result":             {orpReporterToken, strings.Replace(right, `,"result":{"accountRef":"acct:1","balanceUsd":75}`, "", 1), 400, "malformed-request", "/result", false},
		"duplicate in result":   {orpReporterToken, strings.Replace(right, `"balanceUsd":75}`, `"balanceUsd":75,"balanceUsd":80}`, 1), 400, "malformed-request", "/result/balanceUsd", false},
		"form body":             {orpReporterToken, right, 415, "unsupported-media-type", "", true},
		"another tenant":        {orpAcmeToken, right, 404, "not-found", "", false},
		"unknown request id":    {orpReporterToken, strings.Replace(right, "rq-right", "rq-never", 1), 404, "not-found", "", false},
		"other args":            {orpReporterToken, strings.Replace(right, `"amountUsd":25`, `"amountUsd":5`, 1), 409, "outcome-mismatch", "/request", false},
		"other kind":            {orpReporterToken, strings.Replace(right, `"kind":"ledger.debit.v1"`, `"kind":"ledger.debit.buggy.v1"`, 1), 409, "outcome-mismatch", "/request", false},
		"other preflight named": {orpReporterToken, strings.Replace(right, `{"audit_id"`, `{"preflight_id":"pf_other","audit_id"`, 1), 409, "outcome-mismatch", "/preflight_id", false},
	}
	for name, tc := range refusals {
		req, _ := http.NewRequest("POST", s.URL("/v1/outcome"), strings.NewReader(tc.body))
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		req.Header.Set("Content-Type", "application/json")
		if tc.contentTypeBad {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		status, code, path, raw := orpDo(t, req)
		if status != tc.status || code != tc.code || path != tc.path {
			t.Errorf("%s: %d %s at %q (%s), want %d %s at %q", name, status, code, path, raw, tc.status, tc.code, tc.path)
		}
	}
	// Nothing was recorded by a refused report.
	if frames := orpOutcomes(t, s, okAudit); len(frames) != 0 {
		t.Fatalf("refused reports recorded %v", frames)
	}

	// The right result: recorded once, reported by the runtime.
	status, h, raw := orpPost(t, s, orpReporterToken, right)
	var ans map[string]any
	if status != 200 || json.Unmarshal(raw, &ans) != nil || ans["outcome"] != "ok" || ans["reason"] != "outcome: ok" ||
		ans["reported_by"] != "runtime" || ans["audit_id"] != okAudit || h.Get("X-Autonomy-Audit-Id") != okAudit {
		t.Fatalf("right result: %d %s", status, raw)
	}
	if status, _, raw := orpPost(t, s, orpReporterToken, right); status != 409 || !strings.Contains(string(raw), `"code":"outcome-already-reported"`) {
		t.Errorf("second report: %d %s, want 409 outcome-already-reported", status, raw)
	}

	// The buggy runtime's wrong result: the 502 of docs/API.md.
	badAudit := allowed("ledger.debit.buggy.v1", "rq-wrong")
	status, h, raw = orpPost(t, s, orpReporterToken,
		orpReport(badAudit, "rq-wrong", "ledger.debit.buggy.v1", ocDebit, `{"accountRef":"acct:1","balanceUsd":50}`))
	var v struct {
		Error struct {
			C      string `json:"code"`
			R      string `json:"reason"`
			A      string `json:"audit_id"`
			Clause struct {
				Kind       string         `json:"kind"`
				Expression string         `json:"expression"`
				Bindings   map[string]any `json:"bindings"`
				Message    string         `json:"message"`
			} `json:"clause"`
		} `json:"error"`
	}
	if status != http.StatusBadGateway || json.Unmarshal(raw, &v) != nil {
		t.Fatalf("wrong result: %d %s, want 502", status, raw)
	}
	if e := v.Error; e.C != "postcondition_violated" || e.R != "clause: postcondition_violated" || e.A != badAudit ||
		h.Get("X-Autonomy-Audit-Id") != badAudit || e.Clause.Kind != "postcondition" ||
		e.Clause.Expression != "result.balanceUsd == old(args.balanceUsd) - args.amountUsd" ||
		e.Clause.Bindings["result.balanceUsd"] != 50.0 || !strings.HasPrefix(e.Clause.Message, "the balance must drop") {
		t.Errorf("502 body %s", raw)
	}

	// Each call has one outcome frame, naming the runtime and its token,
	// durable: it is there after a kill -9 and a restart.
	s.Kill()
	s2 := &cbServer{Server: s.Restart()}
	for audit, want := range map[string]string{okAudit: "ok", badAudit: "violated"} {
		frames := orpOutcomes(t, s2, audit)
		if len(frames) != 1 {
			t.Fatalf("audit %s after restart: %d outcome frames, want 1", audit, len(frames))
		}
		a := frames[0].Attrs
		if a["outcome"] != want || a["reported_by"] != "runtime" || a["reporter"] != "ledger-runtime" ||
			a["status"] != 200.0 || !strings.HasPrefix(fmt.Sprint(a["response_digest"]), "sha256:") {
			t.Errorf("audit %s outcome frame %v", audit, a)
		}
	}
	if a := orpOutcomes(t, s2, badAudit)[0].Attrs; a["enforced"] != true {
		t.Errorf("the violation was not recorded as enforced: %v", a)
	}
}

func orpPost(t *testing.T, s *cbServer, token, body string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", s.URL("/v1/outcome"), strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, raw
}

func orpDo(t *testing.T, req *http.Request) (status int, code, path string, raw []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ = io.ReadAll(resp.Body)
	var e struct {
		Error struct {
			Code string `json:"code"`
			Path string `json:"path"`
		} `json:"error"`
	}
	json.Unmarshal(raw, &e)
	return resp.StatusCode, e.Error.Code, e.Error.Path, raw
}

// orpOutcomes are the outcome frames under auditID.
func orpOutcomes(t *testing.T, s *cbServer, auditID string) []cbFrame {
	t.Helper()
	status, _, raw := apDo(t, s, "GET", "/v1/audit/"+auditID+"?include=outcome", orpReporterToken, "")
	var join struct {
		Frames []cbFrame `json:"frames"`
	}
	if status != http.StatusOK || json.Unmarshal(raw, &join) != nil {
		t.Fatalf("audit %s: %d %s", auditID, status, raw)
	}
	frames := join.Frames
	var out []cbFrame
	for _, f := range frames {
		if f.Kind == "autonomy.outcome" {
			out = append(out, f)
		}
	}
	return out
}

// TestOutcomeAcrossReplicas: on etcd, the response of a call one replica
// let through is judged on another (the reporter, like Envoy's ext_proc
// stream, may reach any replica): the decision is found in what every
// replica wrote, the outcome joins the audit on every replica, and it is
// recorded once across them.
func TestOutcomeAcrossReplicas(t *testing.T) {
	t.Parallel()
	c := etcdtest.StartT(t, etcdtest.Options{})
	endpoints := strings.Join(c.Endpoints(), ",")
	a := orpServe(t, "--etcd-endpoints", endpoints, "--replica-id", "replica-a")
	b := orpServe(t, "--etcd-endpoints", endpoints, "--replica-id", "replica-b")
	for _, s := range []*cbServer{a, b} {
		s.WaitReadyz(http.StatusOK, "its start") // on etcd, a replica listens before it is ready
	}

	v := a.checkCall(t, cbCall{Kind: "ledger.debit.v1", Args: ocDebit, RequestID: "rq-across"})
	if v.HTTPStatus != 200 || v.AuditID == "" {
		t.Fatalf("Check on A: %+v, want an allow", v)
	}
	report := orpReport(v.AuditID, "rq-across", "ledger.debit.v1", ocDebit, `{"accountRef":"acct:1","balanceUsd":75}`)
	status, _, raw := orpPost(t, b, orpReporterToken, report)
	if status != 200 || !strings.Contains(string(raw), `"outcome":"ok"`) {
		t.Fatalf("report on B of A's call: %d %s, want 200 ok", status, raw)
	}
	for _, s := range []*cbServer{a, b} {
		frames := orpOutcomes(t, s, v.AuditID)
		if len(frames) != 1 || frames[0].Attrs["replica"] != "replica-b" || frames[0].Attrs["request_id"] != "rq-across" {
			t.Fatalf("outcome frames on %s: %v, want B's one", s.URL(""), frames)
		}
	}
	if status, _, raw := orpPost(t, a, orpReporterToken, report); status != 409 ||
		!strings.Contains(string(raw), `"code":"outcome-already-reported"`) {
		t.Errorf("the same report on A: %d %s, want 409 outcome-already-reported", status, raw)
	}
}
