package e2e

// Approvals bound to a step (docs/API.md) against the real binary: the
// preflight lists the steps that wait, the gate holds them (approval:
// pending, approval: rejected) until a person with a role the step names,
// who is not the actor, decides through POST /v1/approvals/{id}/{step}; the
// decision is a durable autonomy.approval frame joined with
// include=approval, and the approved step runs once, through the gRPC
// check, the HTTP check and the gateway alike, across a restart too.
// Helpers carry the ap prefix.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	apAliceToken = "alice-0123456789abcdef0123"  // role:pay-approver, subject user:alice, every tenant
	apBobToken   = "bob-0123456789abcdef01234"   // no role
	apAgentToken = "agent-0123456789abcdef0123"  // role:pay-approver, but the actor itself
	apAcmeToken  = "acme-0123456789abcdef012345" // role:pay-approver, tenant acme only
	apRefToken   = "refund-0123456789abcdef0123" // role:refund-approver, every tenant
	apActor      = "user:agent"
	apKind       = "pay.send"
	apQuickKind  = "pay.quick"
	apClassKind  = "refund.create.v2"
	apArgs       = `{"amountUsd":40,"to":"acct:9"}`
	apApprover   = "role:pay-approver"
	apRefundRole = "role:refund-approver"
)

// apData is a bundle whose pay.send waits for role:pay-approver for ten
// minutes, pay.quick for one second, and pay.loose, which does not bind
// arguments, for ten minutes; refund.create.v2 is of the class
// the envelope's approvalPolicy names.
func apData(t *testing.T) string {
	t.Helper()
	data := cbDefaultData(t, true)
	data = strings.Replace(data, "    refund.create.v2:\n", "    refund.create.v2:\n      permission_class: financial-high-impact\n", 1)
	data = strings.Replace(data, "  capabilities:\n", `  capabilities:
    pay.send:
      zones: ["*"]
      requires_preflight: true
      bind_arguments: true
      approval: {required: true, authorities: ["role:pay-approver"], timeout: "10m"}
    pay.quick:
      zones: ["*"]
      requires_preflight: true
      approval: {required: true, authorities: ["role:pay-approver"], timeout: "1s"}
    pay.loose:
      zones: ["*"]
      requires_preflight: true
      approval: {required: true, authorities: ["role:pay-approver"], timeout: "10m"}
`, 1)
	return data
}

// apServe starts the service in mode with the approvals bundle and tokens.
func apServe(t *testing.T, mode string, extra ...string) *cbServer {
	t.Helper()
	return apServeConfig(t, mode, "", extra...)
}

// apServeConfig is apServe with more lines of configuration.
func apServeConfig(t *testing.T, mode, config string, extra ...string) *cbServer {
	t.Helper()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(tokens, []byte(fmt.Sprintf(`tokens:
  - {name: alice, tenant: "*", token: %q, roles: ["role:pay-approver"], subject: "user:alice"}
  - {name: bob, tenant: "*", token: %q, subject: "user:bob"}
  - {name: agent, tenant: "*", token: %q, roles: ["role:pay-approver"], subject: %q}
  - {name: acme, tenant: acme, token: %q, roles: ["role:pay-approver"], subject: "user:acme"}
  - {name: refunds, tenant: "*", token: %q, roles: ["role:refund-approver"], subject: "user:rita"}
`, apAliceToken, apBobToken, apAgentToken, apActor, apAcmeToken, apRefToken)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte("access:\n  tokens_file: "+tokens+"\n"+config), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--bundle", cbBundle(t, apData(t)), "--config", cfg}, extra...)
	return cbServe(t, mode, args...)
}

// apRequest is a one-step preflight of kind with apArgs.
func apRequest(name, kind string) []byte {
	var args map[string]any
	json.Unmarshal([]byte(apArgs), &args)
	b, _ := json.Marshal(map[string]any{
		"intent": map[string]any{"summary": "pay " + name, "plan_hash": "plan-" + name},
		"plan": map[string]any{"steps": []any{map[string]any{"id": "s1", "kind": kind, "zone": "default",
			"args": args}}},
		"context": map[string]any{"actor": map[string]any{"id": apActor, "session_id": "session:" + name}},
	})
	return b
}

type apRequired struct {
	StepID      string   `json:"step_id"`
	ToolKind    string   `json:"tool_kind"`
	ArgsDigest  string   `json:"args_digest"`
	Authorities []string `json:"authorities"`
	ExpiresAt   string   `json:"expires_at"`
}

type apDecision struct {
	PreflightID string `json:"preflight_id"`
	AuditID     string `json:"audit_id"`
	Outcome     string `json:"outcome"`
	Eligibility struct {
		ExpiresAt         string       `json:"expires_at"`
		ApprovalsRequired []apRequired `json:"approvals_required"`
	} `json:"eligibility"`
}

func apPreflight(t *testing.T, s *cbServer, body []byte) apDecision {
	t.Helper()
	status, raw, _ := PostJSON(t, s.URL("/v1/preflight"), body)
	var d apDecision
	if status != http.StatusOK || json.Unmarshal(raw, &d) != nil || d.Outcome != "pass" {
		t.Fatalf("preflight: %d %s", status, raw)
	}
	return d
}

// apDo sends method to path with token and body, and returns the status
// and the error code of an error answer.
func apDo(t *testing.T, s *cbServer, method, path, token, body string) (int, string, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL(path), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct {
			Code string `json:"code"`
			Path string `json:"path"`
		} `json:"error"`
	}
	json.Unmarshal(raw, &e)
	return resp.StatusCode, e.Error.Code, raw
}

func apDecide(t *testing.T, s *cbServer, d apDecision, token, decision string) (int, string) {
	t.Helper()
	status, code, _ := apDo(t, s, "POST", "/v1/approvals/"+d.PreflightID+"/s1", token,
		fmt.Sprintf(`{"decision":%q,"comment":"checked the invoice"}`, decision))
	return status, code
}

func apCheck(t *testing.T, s *cbServer, d apDecision, kind, requestID string) cbVerdict {
	t.Helper()
	return s.checkCall(t, cbCall{PreflightID: d.PreflightID, Kind: kind, Args: apArgs, RequestID: requestID})
}

// apFrames returns the kinds of the audit join with the query.
func apFrames(t *testing.T, s *cbServer, auditID, query string) ([]cbFrame, int) {
	t.Helper()
	status, _, raw := apDo(t, s, "GET", "/v1/audit/"+auditID+query, apAliceToken, "")
	var out struct {
		Frames []cbFrame `json:"frames"`
	}
	json.Unmarshal(raw, &out)
	return out.Frames, status
}

// TestApprovalsEnforce walks one approval through every refusal and then
// the approved call, which runs once.
func TestApprovalsEnforce(t *testing.T) {
	s := apServe(t, "enforce")
	d := apPreflight(t, s, apRequest("enforce", apKind))
	if len(d.Eligibility.ApprovalsRequired) != 1 {
		t.Fatalf("approvals_required = %+v, want one", d.Eligibility.ApprovalsRequired)
	}
	req := d.Eligibility.ApprovalsRequired[0]
	if req.StepID != "s1" || req.ToolKind != apKind || !strings.HasPrefix(req.ArgsDigest, "sha256:") ||
		len(req.Authorities) != 1 || req.Authorities[0] != apApprover || req.ExpiresAt > d.Eligibility.ExpiresAt {
		t.Fatalf("approvals_required[0] = %+v (binding expires %s)", req, d.Eligibility.ExpiresAt)
	}

	if v := apCheck(t, s, d, apKind, "req-before"); v.HTTPStatus != 403 || v.DenyCode != "pending" || v.DenyReason != "approval: pending" {
		t.Fatalf("check before any decision = %+v, want 403 pending", v)
	}
	status, _, raw := apDo(t, s, "GET", "/v1/approvals?state=pending", apAliceToken, "")
	if status != 200 || !bytes.Contains(raw, []byte(d.PreflightID)) {
		t.Fatalf("alice's pending list: %d %s", status, raw)
	}
	if _, _, raw := apDo(t, s, "GET", "/v1/approvals?state=pending", apBobToken, ""); bytes.Contains(raw, []byte(d.PreflightID)) {
		t.Errorf("bob, who holds no role, sees the approval in his pending list: %s", raw)
	}

	refusals := map[string]struct {
		token, body string
		status      int
		code, path  string
	}{
		"no token":         {"", `{"decision":"approve"}`, 401, "unauthorized", ""},
		"wrong role":       {apBobToken, `{"decision":"approve"}`, 403, "approver-not-authorized", ""},
		"actor themself":   {apAgentToken, `{"decision":"approve"}`, 409, "approver-is-actor", ""},
		"other tenant":     {apAcmeToken, `{"decision":"approve"}`, 404, "not-found", ""},
		"unknown decision": {apAliceToken, `{"decision":"yes"}`, 400, "malformed-request", "/decision"},
		"unknown member":   {apAliceToken, `{"decision":"approve","by":"me"}`, 400, "malformed-request", "/by"},
		"comment a number": {apAliceToken, `{"decision":"approve","comment":5}`, 400, "malformed-request", "/comment"},
		"not json":         {apAliceToken, `{"decision":`, 400, "malformed-request", ""},
	}
	for name, tc := range refusals {
		t.Run(name, func(t *testing.T) {
			status, code, raw := apDo(t, s, "POST", "/v1/approvals/"+d.PreflightID+"/s1", tc.token, tc.body)
			var e struct {
				Error struct {
					Path string `json:"path"`
				} `json:"error"`
			}
			json.Unmarshal(raw, &e)
			if status != tc.status || code != tc.code || (tc.path != "" && e.Error.Path != tc.path) {
				t.Fatalf("%d %s, want %d %s at %q", status, raw, tc.status, tc.code, tc.path)
			}
		})
	}
	if status, code, _ := apDo(t, s, "POST", "/v1/approvals/"+d.PreflightID+"/s9", apAliceToken, `{"decision":"approve"}`); status != 404 || code != "not-found" {
		t.Errorf("unknown step: %d %s, want 404 not-found", status, code)
	}
	// Paths no endpoint has are 404; the decision's path with another
	// method is 405, naming POST.
	for _, p := range []string{"/v1/approvals/" + d.PreflightID, "/v1/approvals/" + d.PreflightID + "/s1/x"} {
		if status, code, raw := apDo(t, s, "POST", p, apAliceToken, `{"decision":"approve"}`); status != 404 || code != "not-found" {
			t.Errorf("POST %s: %d %s, want 404 not-found", p, status, raw)
		}
	}
	if status, code, raw := apDo(t, s, "GET", "/v1/approvals/"+d.PreflightID+"/s1", apAliceToken, ""); status != 405 || code != "method-not-allowed" {
		t.Errorf("GET of a decision's path: %d %s, want 405", status, raw)
	}

	if status, code := apDecide(t, s, d, apAliceToken, "approve"); status != 200 {
		t.Fatalf("alice approves: %d %s", status, code)
	}
	if status, code := apDecide(t, s, d, apAliceToken, "reject"); status != 409 || code != "approval-already-decided" {
		t.Fatalf("a second decision: %d %s, want 409 approval-already-decided", status, code)
	}

	// 64 concurrent calls on the approved one-step id: exactly one runs.
	const n = 64
	verdicts := make([]cbVerdict, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { verdicts[i] = apCheck(t, s, d, apKind, fmt.Sprintf("req-%d", i)) })
	}
	wg.Wait()
	allowed := 0
	for _, v := range verdicts {
		switch {
		case v.HTTPStatus == 200:
			allowed++
		case v.DenyReason != "contract: preflight_replay":
			t.Errorf("a concurrent call was refused with %+v, want preflight_replay", v)
		}
	}
	if allowed != 1 {
		t.Fatalf("%d of %d concurrent calls allowed, want exactly 1", allowed, n)
	}

	frames, status := apFrames(t, s, d.AuditID, "")
	for _, f := range frames {
		if f.Kind == "autonomy.approval" {
			t.Errorf("the default audit join holds an approval frame")
		}
	}
	if status != 200 || len(frames) == 0 {
		t.Fatalf("default audit join: %d", status)
	}
	for _, q := range []string{"?include=approval", "?include=all"} {
		frames, _ := apFrames(t, s, d.AuditID, q)
		var approval *cbFrame
		for i := range frames {
			if frames[i].Kind == "autonomy.approval" {
				approval = &frames[i]
			}
		}
		if approval == nil || approval.Attrs["approver"] != "alice" || approval.Attrs["decision"] != "approve" ||
			approval.Attrs["args_digest"] != req.ArgsDigest || fmt.Sprint(approval.Attrs["roles"]) != "["+apApprover+"]" {
			t.Fatalf("audit join%s: approval frame %+v", q, approval)
		}
	}
	if _, status := apFrames(t, s, d.AuditID, "?include=everything"); status != 400 {
		t.Errorf("include=everything: %d, want 400", status)
	}
	if status, _, raw := apDo(t, s, "GET", "/v1/approvals?state=decided", apAliceToken, ""); status != 200 ||
		!bytes.Contains(raw, []byte(`"state":"approved"`)) {
		t.Errorf("decided list: %d %s", status, raw)
	}
}

// TestApprovalsRejectAndExpire: a rejected step is refused as rejected; an
// approval past its timeout cannot be given and the step stays pending.
func TestApprovalsRejectAndExpire(t *testing.T) {
	s := apServe(t, "enforce")
	d := apPreflight(t, s, apRequest("reject", apKind))
	if status, code := apDecide(t, s, d, apAliceToken, "reject"); status != 200 {
		t.Fatalf("reject: %d %s", status, code)
	}
	if v := apCheck(t, s, d, apKind, "req-rejected"); v.HTTPStatus != 403 || v.DenyCode != "rejected" || v.DenyReason != "approval: rejected" {
		t.Fatalf("check after a rejection = %+v, want 403 rejected", v)
	}

	// pay.quick's approval lasts one second: wait until the pending list
	// no longer offers it, then a decision is too late.
	q := apPreflight(t, s, apRequest("quick", apQuickKind))
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, _, raw := apDo(t, s, "GET", "/v1/approvals?state=pending", apAliceToken, "")
		if !bytes.Contains(raw, []byte(q.PreflightID)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the one-second approval is still offered after 20 s")
		}
		time.Sleep(100 * time.Millisecond) // waiting for a timeout is the point of this case
	}
	if status, code := apDecide(t, s, q, apAliceToken, "approve"); status != 410 || code != "approval-expired" {
		t.Fatalf("a decision after the approval's timeout: %d %s, want 410 approval-expired", status, code)
	}
	if v := apCheck(t, s, q, apQuickKind, "req-expired"); v.HTTPStatus != 403 || v.DenyCode != "pending" {
		t.Fatalf("check of an expired approval = %+v, want 403 pending", v)
	}
}

// TestApprovalsBindTheArgs: an approval allows its step with the args it
// was preflighted and approved with, also when the capability does not
// bind arguments: other args are a mismatch and consume nothing.
func TestApprovalsBindTheArgs(t *testing.T) {
	s := apServe(t, "enforce")
	d := apPreflight(t, s, apRequest("loose", "pay.loose"))
	if status, code := apDecide(t, s, d, apAliceToken, "approve"); status != 200 {
		t.Fatalf("approve: %d %s", status, code)
	}
	other := cbCall{PreflightID: d.PreflightID, Kind: "pay.loose", Args: `{"amountUsd":999999,"to":"acct:evil"}`, RequestID: "req-other-args"}
	if v := s.checkCall(t, other); v.HTTPStatus != 403 || v.DenyReason != "contract: preflight_binding_mismatch" {
		t.Fatalf("the approved step with other args = %+v, want 403 contract: preflight_binding_mismatch", v)
	}
	if v := apCheck(t, s, d, "pay.loose", "req-approved-args"); v.Code != 0 {
		t.Fatalf("the approved step with its args = %+v, want an allow", v)
	}
	if v := apCheck(t, s, d, "pay.loose", "req-again"); v.DenyReason != "contract: preflight_replay" {
		t.Fatalf("the approved step again = %+v, want contract: preflight_replay", v)
	}
}

// TestApprovalsAdvisory: in advisory mode a pending step is recorded and
// let through, and not consumed: once approved it still runs once.
func TestApprovalsAdvisory(t *testing.T) {
	s := apServe(t, "advisory")
	d := apPreflight(t, s, apRequest("advisory", apKind))
	v := apCheck(t, s, d, apKind, "req-advisory")
	if v.HTTPStatus != 200 || v.AdvisoryReason != "approval: pending" {
		t.Fatalf("advisory check of a pending step = %+v, want allowed with the advisory reason", v)
	}
	frames, _ := apFrames(t, s, d.AuditID, "")
	found := false
	for _, f := range frames {
		if f.Kind == "autonomy.decision" && f.Attrs["reason"] == "approval: pending" && f.Attrs["enforced"] == false {
			found = true
		}
	}
	if !found {
		t.Fatalf("no unenforced approval: pending decision frame in %+v", frames)
	}
	if status, code := apDecide(t, s, d, apAliceToken, "approve"); status != 200 {
		t.Fatalf("approve: %d %s", status, code)
	}
	if v := apCheck(t, s, d, apKind, "req-approved"); v.HTTPStatus != 200 || v.AdvisoryReason != "" {
		t.Fatalf("approved call = %+v, want a clean allow", v)
	}
	if v := apCheck(t, s, d, apKind, "req-again"); v.AdvisoryReason != "contract: preflight_replay" {
		t.Fatalf("a second call = %+v, want an advisory replay", v)
	}
}

// TestApprovalsEnvelopePolicy: the envelope's approvalPolicy (mode always,
// the capability's class in requiredFor) requires the approval, by the
// envelope's authorities and within its timeout.
func TestApprovalsEnvelopePolicy(t *testing.T) {
	s := apServe(t, "enforce")
	body := cbRefund{name: "ap-envelope", amountUsd: 125}.body(t)
	d := apPreflight(t, s, body)
	var refund *apRequired
	for i := range d.Eligibility.ApprovalsRequired {
		if d.Eligibility.ApprovalsRequired[i].StepID == "s2" {
			refund = &d.Eligibility.ApprovalsRequired[i]
		}
	}
	if refund == nil || len(d.Eligibility.ApprovalsRequired) != 1 || refund.Authorities[0] != apRefundRole ||
		refund.ArgsDigest != cbRefundDigest {
		t.Fatalf("approvals_required = %+v, want the refund step for %s", d.Eligibility.ApprovalsRequired, apRefundRole)
	}
	call := cbCall{PreflightID: d.PreflightID, Kind: apClassKind, Args: `{"caseRef":"case:882","amountUsd":125}`,
		RequestID: "req-refund", Principal: "user:example"}
	if v := s.checkCall(t, call); v.DenyCode != "pending" {
		t.Fatalf("refund before approval = %+v, want pending", v)
	}
	status, code, _ := apDo(t, s, "POST", "/v1/approvals/"+d.PreflightID+"/s2", apRefToken, `{"decision":"approve"}`)
	if status != 200 {
		t.Fatalf("refund approver approves: %d %s", status, code)
	}
	if v := s.checkCall(t, call); v.HTTPStatus != 200 {
		t.Fatalf("refund after approval = %+v, want allowed", v)
	}
}

// TestApprovalsEnvelopeActorMayNotApprove: the person the envelope names
// as the actor (actor.idRef) may not approve the plan's steps, even when
// the preflight's actor.id names someone else.
func TestApprovalsEnvelopeActorMayNotApprove(t *testing.T) {
	s := apServe(t, "enforce")
	var body map[string]any
	if err := json.Unmarshal(cbRefund{name: "ap-envelope-actor", amountUsd: 125}.body(t), &body); err != nil {
		t.Fatal(err)
	}
	env := body["context"].(map[string]any)["request"].(map[string]any)
	env["actor"] = map[string]any{"type": "user", "idRef": "user:rita"}
	raw, _ := json.Marshal(body)
	d := apPreflight(t, s, raw)
	path := "/v1/approvals/" + d.PreflightID + "/s2"
	if status, code, _ := apDo(t, s, "POST", path, apRefToken, `{"decision":"approve"}`); status != 409 || code != "approver-is-actor" {
		t.Fatalf("the envelope's actor approves: %d %s, want 409 approver-is-actor", status, code)
	}
	if _, _, list := apDo(t, s, "GET", "/v1/approvals?state=pending", apRefToken, ""); bytes.Contains(list, []byte(d.PreflightID)) {
		t.Fatalf("the envelope's actor is offered its own step: %s", list)
	}
}

// TestApprovalsSurviveRestart: an approval given before a restart lets the
// step run once after it.
func TestApprovalsSurviveRestart(t *testing.T) {
	s := apServe(t, "enforce")
	d := apPreflight(t, s, apRequest("restart", apKind))
	if status, code := apDecide(t, s, d, apAliceToken, "approve"); status != 200 {
		t.Fatalf("approve: %d %s", status, code)
	}
	s.Stop()
	r := &cbServer{Server: s.Restart()}
	r.check = r.Authz(t)
	if v := apCheck(t, r, d, apKind, "req-after-restart"); v.HTTPStatus != 200 {
		t.Fatalf("approved call after a restart = %+v, want allowed", v)
	}
	if v := apCheck(t, r, d, apKind, "req-second"); v.DenyReason != "contract: preflight_replay" {
		t.Fatalf("second call = %+v, want replay", v)
	}
}

// TestApprovalsHTTPCheckAndGateway: the approved step runs once through
// the HTTP check and through the built-in gateway, 64 calls at once each.
func TestApprovalsHTTPCheckAndGateway(t *testing.T) {
	var upstreamCalls sync.Map
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstreamCalls.Store(r.Header.Get("X-Request-Id"), true)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	}))
	defer upstream.Close()
	s := apServe(t, "enforce", "--upstream", upstream.URL, "--gateway-addr", "127.0.0.1:0")
	fronts := map[string]func(id string) string{
		"http check": func(id string) string { return "http://" + s.HTTPAddr + "/v1/authz/v1/tool" },
		"gateway":    func(id string) string { return "http://" + s.GatewayAddr + "/v1/tool" },
	}
	for name, url := range fronts {
		t.Run(name, func(t *testing.T) {
			d := apPreflight(t, s, apRequest("front-"+strings.ReplaceAll(name, " ", "-"), apKind))
			call := func(i int) int {
				body := fmt.Sprintf(`{"kind":%q,"args":%s}`, apKind, apArgs)
				req, _ := http.NewRequestWithContext(context.Background(), "POST", url(d.PreflightID), strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Autonomy-Preflight-Id", d.PreflightID)
				req.Header.Set("X-Request-Id", fmt.Sprintf("%s-%d", name, i))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return 0
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			if got := call(-1); got != 403 {
				t.Fatalf("before approval: %d, want 403", got)
			}
			if status, code := apDecide(t, s, d, apAliceToken, "approve"); status != 200 {
				t.Fatalf("approve: %d %s", status, code)
			}
			const n = 64
			codes := make([]int, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() { codes[i] = call(i) })
			}
			wg.Wait()
			ok := 0
			for _, c := range codes {
				if c == 200 {
					ok++
				} else if c != 403 {
					t.Errorf("a call answered %d, want 200 or 403", c)
				}
			}
			if ok != 1 {
				t.Fatalf("%d of %d calls allowed, want exactly 1", ok, n)
			}
		})
	}
}

// TestApprovalsDotStepIDs: a step whose id is "." or ".." can be decided,
// sent as is or escaped, though a path cleaner would make it another
// path; so can one whose id holds a slash, escaped.
func TestApprovalsDotStepIDs(t *testing.T) {
	s := apServe(t, "enforce")
	var args map[string]any
	json.Unmarshal([]byte(apArgs), &args)
	step := func(id string) map[string]any {
		return map[string]any{"id": id, "kind": "pay.send", "zone": "default", "args": args}
	}
	body, _ := json.Marshal(map[string]any{
		"intent": map[string]any{"summary": "pay twice", "plan_hash": "plan-dots"},
		"plan": map[string]any{"steps": []any{step("."), step(".."), step("a/b"), step("a/.."), step("./x"),
			step("/"), step("a//b")}},
		"context": map[string]any{"actor": map[string]any{"id": apActor, "session_id": "session:dots"}},
	})
	d := apPreflight(t, s, body)
	if n := len(d.Eligibility.ApprovalsRequired); n != 7 {
		t.Fatalf("%d approvals required, want 7", n)
	}
	if status, code, _ := apDo(t, s, "GET", "/v1/approvals/"+d.PreflightID+"/..", apAliceToken, ""); status != 405 || code != "method-not-allowed" {
		t.Fatalf("GET on a dot step's approval: %d %s, want 405 method-not-allowed", status, code)
	}
	for _, p := range []string{"/v1/approvals/" + d.PreflightID + "/..", "/v1/approvals/" + d.PreflightID + "/%2E",
		"/v1/approvals/" + d.PreflightID + "/a%2Fb", "/v1/approvals/" + d.PreflightID + "/a%2F..",
		"/v1/approvals/" + d.PreflightID + "/.%2Fx", "/v1/approvals/" + d.PreflightID + "/%2F",
		"/v1/approvals/" + d.PreflightID + "/a%2F%2Fb"} {
		if status, code, raw := apDo(t, s, "POST", p, apAliceToken, `{"decision":"approve"}`); status != 200 {
			t.Fatalf("POST %s: %d %s %s, want 200", p, status, code, raw)
		}
		if status, code, _ := apDo(t, s, "POST", p, apAliceToken, `{"decision":"approve"}`); status != 409 || code != "approval-already-decided" {
			t.Fatalf("POST %s again: %d %s, want 409 approval-already-decided", p, status, code)
		}
	}
	for i := range 7 {
		id := fmt.Sprintf("req-dot-%d", i)
		if v := apCheck(t, s, d, "pay.send", id); v.Code != 0 {
			t.Fatalf("an approved dot step (%s) = %+v, want an allow", id, v)
		}
	}
}

// TestApprovalsWebhookMatchesTheList: the approvals.pending notice names
// each approval as GET /v1/approvals lists it, requested_at included: the
// time the approval was recorded, not when the notice was built.
func TestApprovalsWebhookMatchesTheList(t *testing.T) {
	notices := make(chan []byte, 4)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		notices <- raw
	}))
	defer hook.Close()
	s := apServeConfig(t, "enforce", "approvals:\n  webhook_url: "+hook.URL+"/hook\n")
	d := apPreflight(t, s, apRequest("webhook", "pay.send"))
	var notice struct {
		Event     string            `json:"event"`
		Approvals []json.RawMessage `json:"approvals"`
	}
	select {
	case raw := <-notices:
		if err := json.Unmarshal(raw, &notice); err != nil || notice.Event != "approvals.pending" || len(notice.Approvals) != 1 {
			t.Fatalf("notice %s: %v", raw, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no approvals.pending notice")
	}
	status, _, raw := apDo(t, s, http.MethodGet, "/v1/approvals?state=pending", apAliceToken, "")
	var list struct {
		Approvals []json.RawMessage `json:"approvals"`
	}
	if status != http.StatusOK || json.Unmarshal(raw, &list) != nil {
		t.Fatalf("list: %d %s", status, raw)
	}
	for _, a := range list.Approvals {
		if bytes.Contains(a, []byte(d.PreflightID)) {
			if !bytes.Equal(a, notice.Approvals[0]) {
				t.Fatalf("the notice names\n%s\nthe list\n%s", notice.Approvals[0], a)
			}
			return
		}
	}
	t.Fatalf("the list %s does not hold %s", raw, d.PreflightID)
}
