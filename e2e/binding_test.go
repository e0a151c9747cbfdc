package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
)

// This file proves argument binding, actor binding and gate clauses (SPEC
// §5 step 4, §7, §8) against the real autonomy binary over real gRPC, using
// the shared harness (harness_test.go). Its own helpers carry the cb prefix
// so they cannot collide with other e2e files.

// cbServer is one running `autonomy serve` with an ext_authz client.
type cbServer struct {
	*Server
	check authv3.AuthorizationClient
}

// cbServe starts `autonomy serve` in mode with extra flags through the
// shared harness and connects an ext_authz client to it.
func cbServe(t *testing.T, mode string, extra ...string) *cbServer {
	t.Helper()
	s := StartServer(t, ServeOptions{Mode: mode, Args: extra})
	return &cbServer{Server: s, check: s.Authz(t)}
}

// cbDecision is the part of a PreflightDecision these tests read.
type cbDecision struct {
	PreflightID   string `json:"preflight_id"`
	AuditID       string `json:"audit_id"`
	Outcome       string `json:"outcome"`
	Reason        string `json:"reason"`
	ClauseResults []struct {
		Contract    string         `json:"contract"`
		Outcome     string         `json:"outcome"`
		Severity    string         `json:"severity"`
		Reason      string         `json:"reason"`
		RepairHints []any          `json:"repair_hints"`
		Evidence    map[string]any `json:"evidence"`
	} `json:"clause_results"`
	ContractResults []struct {
		Contract string `json:"contract"`
		Outcome  string `json:"outcome"`
		Reason   string `json:"reason"`
	} `json:"contract_results"`
}

// preflight posts body to /v1/preflight and decodes the 200 answer.
func (s *cbServer) preflight(t *testing.T, body []byte) cbDecision {
	t.Helper()
	status, raw, _ := PostJSON(t, s.URL("/v1/preflight"), body)
	if status != http.StatusOK {
		t.Fatalf("POST /v1/preflight: %d %s", status, raw)
	}
	var d cbDecision
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("decode decision: %v\n%s", err, raw)
	}
	return d
}

// mustPass preflights body and fails the test unless the outcome is pass.
func (s *cbServer) mustPass(t *testing.T, body []byte) cbDecision {
	t.Helper()
	d := s.preflight(t, body)
	if d.Outcome != "pass" {
		t.Fatalf("preflight outcome %q (%s), want pass; rows %+v; clauses %+v", d.Outcome, d.Reason, d.ContractResults, d.ClauseResults)
	}
	return d
}

// cbCall is one gated /v1/tool request as Envoy presents it to Check.
type cbCall struct {
	PreflightID string
	Kind        string
	// Args is written into the body as raw JSON text, so a test controls
	// key order and number spelling.
	Args string
	// Body, when set, is sent as the whole body instead of Kind and Args.
	Body      string
	Principal string
	Headers   map[string]string
	RequestID string
}

// cbVerdict is what a CheckResponse says, flattened.
type cbVerdict struct {
	Code           codes.Code
	HTTPStatus     int32
	DenyCode       string
	DenyReason     string
	AuditID        string
	AdvisoryReason string
}

// checkCall sends c through envoy.service.auth.v3.Authorization/Check.
func (s *cbServer) checkCall(t *testing.T, c cbCall) cbVerdict {
	t.Helper()
	headers := map[string]string{"content-type": "application/json", ":method": "POST", ":path": "/v1/tool"}
	if c.PreflightID != "" {
		headers["x-autonomy-preflight-id"] = c.PreflightID
	}
	if c.RequestID != "" {
		headers["x-request-id"] = c.RequestID
	}
	for k, v := range c.Headers {
		headers[k] = v
	}
	body := fmt.Sprintf(`{"kind":%q,"args":%s}`, c.Kind, c.Args)
	if c.Body != "" {
		body = c.Body
	}
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Principal: c.Principal},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: c.RequestID, Method: "POST", Path: "/v1/tool", Host: "tools.local",
			Headers: headers, Body: body,
		}},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.check.Check(ctx, req)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	v := cbVerdict{Code: codes.Code(resp.GetStatus().GetCode())}
	if ok := resp.GetOkResponse(); ok != nil {
		v.HTTPStatus = 200
		for _, h := range ok.GetHeaders() {
			switch h.GetHeader().GetKey() {
			case "x-autonomy-audit-id":
				v.AuditID = h.GetHeader().GetValue()
			case "x-autonomy-advisory-reason":
				v.AdvisoryReason = h.GetHeader().GetValue()
			}
		}
		return v
	}
	denied := resp.GetDeniedResponse()
	v.HTTPStatus = int32(denied.GetStatus().GetCode())
	var deny struct {
		Error struct {
			Code    string `json:"code"`
			Reason  string `json:"reason"`
			AuditID string `json:"audit_id"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(denied.GetBody()), &deny); err != nil {
		t.Fatalf("deny body is not JSON: %v: %q", err, denied.GetBody())
	}
	v.DenyCode, v.DenyReason, v.AuditID = deny.Error.Code, deny.Error.Reason, deny.Error.AuditID
	return v
}

// cbFrame is one WAL frame from GET /v1/audit/{id}.
type cbFrame struct {
	Kind  string         `json:"kind"`
	Attrs map[string]any `json:"attrs"`
}

// audit returns the frames recorded under auditID.
func (s *cbServer) audit(t *testing.T, auditID string) []cbFrame {
	t.Helper()
	resp, err := http.Get(s.URL("/v1/audit/" + auditID))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/audit/%s: %d %s", auditID, resp.StatusCode, raw)
	}
	var out struct {
		Frames []cbFrame `json:"frames"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out.Frames
}

// cbRefund is a passing refund preflight in the shape of docs/API.md#preflightrequest: a
// customer read and a refund, both in zone payments, every refund argument
// traced to a high-risk envelope's input, the rollback and evidence the
// default bundle asks for, and an attestation from the enrolled node issued
// now. name keeps idempotency keys and repair sessions apart between tests.
type cbRefund struct {
	name      string
	actor     string
	amountUsd any
}

func (r cbRefund) body(t *testing.T) []byte {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Second)
	actor := r.actor
	if actor == "" {
		actor = "user:example"
	}
	args := map[string]any{"caseRef": "case:882", "amountUsd": r.amountUsd}
	req := map[string]any{
		"intent": map[string]any{"summary": "Refund case 882", "plan_hash": "plan-" + r.name},
		"plan": map[string]any{"steps": []any{
			map[string]any{"id": "s1", "kind": "customer.read.v3", "zone": "payments",
				"args":       map[string]any{"caseRef": "case:882"},
				"provenance": map[string]any{"caseRef": "input:/caseRef"}},
			map[string]any{"id": "s2", "kind": "refund.create.v2", "zone": "payments", "depends_on": []any{"s1"},
				"args":       args,
				"provenance": map[string]any{"caseRef": "input:/caseRef", "amountUsd": "input:/amountUsd"},
				"rollback":   "rb.refund.void", "expected_evidence": []any{"receipt.id"}},
		}},
		"context": map[string]any{
			"actor":             map[string]any{"id": actor, "session_id": "session:" + r.name},
			"attestation":       map[string]any{"node_id": "edge-7", "issued_at": now.Format(time.RFC3339)},
			"decision_chain":    []any{},
			"required_rollback": "rb.refund.void",
			"request":           cbEnvelope(r.name, actor, now, args),
		},
	}
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// cbEnvelope is a valid aruntime.runtime-request.v1 envelope
// for a high-risk refund whose input is input.
func cbEnvelope(name, actor string, now time.Time, input map[string]any) map[string]any {
	return map[string]any{
		"contractVersion": "aruntime.runtime-request.v1",
		"requestId":       "req_" + name,
		"correlationId":   "corr_" + name,
		"idempotencyKey":  "idem_" + name,
		"timestampUtc":    now.Format(time.RFC3339),
		"deadlineUtc":     now.Add(10 * time.Minute).Format(time.RFC3339),
		"actor":           map[string]any{"type": "user", "idRef": actor},
		"tenant":          map[string]any{"idRef": "tenant:demo", "region": "us-central"},
		"session":         map[string]any{"idRef": "session:" + name, "sequence": 3},
		"taskType":        "customer-refund",
		"riskLevel":       "high",
		"input":           input,
		"permissions":     []any{"read:customer-account", "write:refund"},
		"contextPolicy": map[string]any{"classificationMax": "internal", "citeSources": true,
			"allowExternalRetrieval": false, "allowedRepositories": []any{"architecture-records"},
			"maxContextTokens": 12000},
		"modelRouteConstraints": map[string]any{"allowHosted": true, "allowedRoutes": []any{"hosted-general-v3"},
			"deniedProviders": []any{}, "maxLatencyMs": 8000, "requiredCapabilities": []any{"structured-output"}},
		"allowedTools": []any{"customer.read.v3", "refund.create.v2"},
		"toolPolicy": map[string]any{"defaultDecision": "deny", "maxCalls": 5, "allowSideEffects": true,
			"requiredPermissionClasses": []any{"read", "financial-high-impact"}},
		"memoryPolicy": map[string]any{"readScopes": []any{"session"}, "writeScopes": []any{},
			"writeRequiresApproval": true, "ttlSeconds": 3600},
		"budget": map[string]any{"maxInputTokens": 14000, "maxOutputTokens": 1200, "maxToolCalls": 4,
			"maxCostUsd": 1, "currency": "USD"},
		"approvalPolicy": map[string]any{"mode": "always", "requiredFor": []any{"financial-high-impact"},
			"timeoutSeconds": 900, "authorityRefs": []any{"role:refund-approver"}},
		"outputContract": map[string]any{"format": "json-schema", "schemaRef": "answer-with-citations.v1.json",
			"maxBytes": 64000, "requiresCitations": true},
		"traceSettings": map[string]any{"level": "standard", "redactInputs": true, "captureToolResults": false,
			"samplingDecision": "record-and-sample"},
		"dataClassification": "confidential",
		"retentionPolicy": map[string]any{"policyId": "retention:financial-365d", "days": 365,
			"storeRawInputs": false, "legalHold": false},
		"metadata": map[string]any{"channel": "web"},
	}
}

// cbDefaultData is the embedded default bundle's data with argument
// binding on refund.create.v2 set to bindArguments.
func cbDefaultData(t *testing.T, bindArguments bool) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "internal", "bundle", "default", "data.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	data := string(raw)
	if !strings.Contains(data, "bind_arguments: true") {
		t.Fatalf("the default bundle no longer sets bind_arguments: true on refund.create.v2:\n%s", data)
	}
	if !bindArguments {
		data = strings.Replace(data, "bind_arguments: true", "bind_arguments: false", 1)
	}
	return data
}

// cbBundle writes a bundle directory holding the default policy and data.
func cbBundle(t *testing.T, data string) string {
	t.Helper()
	dir := t.TempDir()
	policy, err := os.ReadFile(filepath.Join("..", "internal", "bundle", "default", "policy.rego"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "policy.rego"), policy, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data.yaml"), []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// cbRefundDigest is sha256 over {"amountUsd":125,"caseRef":"case:882"},
// the canonical form of the preflighted refund args (docs/CLAUSES.md).
const cbRefundDigest = "sha256:0f18684be17a5b2101f7ed710014901518a5c9e9fe36eb2ea76abaf50a19d601"

const (
	cbReasonMismatch     = "contract: preflight_binding_mismatch"
	cbReasonPrecondition = "clause: precondition_violated"
	cbReasonReplay       = "contract: preflight_replay"
)

// TestArgumentBinding: with bind_arguments on refund.create.v2 (the default
// bundle), a Check carrying other args than the preflighted step is a
// binding mismatch, and the preflighted args, however they are spelt, pass.
func TestArgumentBinding(t *testing.T) {
	srv := cbServe(t, "enforce")
	tests := map[string]struct {
		args       []string // args of successive Checks on one preflight id
		wantCodes  []codes.Code
		wantReason []string // "" for an allow
	}{
		"changed amount is a mismatch, then the preflighted args pass": {
			args:       []string{`{"caseRef":"case:882","amountUsd":9999}`, `{"caseRef":"case:882","amountUsd":125}`},
			wantCodes:  []codes.Code{codes.PermissionDenied, codes.OK},
			wantReason: []string{cbReasonMismatch, ""},
		},
		"an added argument is a mismatch": {
			args:       []string{`{"caseRef":"case:882","amountUsd":125,"note":"x"}`},
			wantCodes:  []codes.Code{codes.PermissionDenied},
			wantReason: []string{cbReasonMismatch},
		},
		"a changed case is a mismatch": {
			args:       []string{`{"caseRef":"case:883","amountUsd":125}`},
			wantCodes:  []codes.Code{codes.PermissionDenied},
			wantReason: []string{cbReasonMismatch},
		},
		"the same args in another key order and number spelling pass once": {
			args:       []string{`{ "amountUsd" : 1.25e2 , "caseRef" : "case:882" }`, `{"caseRef":"case:882","amountUsd":125}`},
			wantCodes:  []codes.Code{codes.OK, codes.PermissionDenied},
			wantReason: []string{"", cbReasonReplay},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := srv.mustPass(t, cbRefund{name: "bind-" + strings.ReplaceAll(name, " ", "-"), amountUsd: 125}.body(t))
			for i, args := range tc.args {
				v := srv.checkCall(t, cbCall{PreflightID: d.PreflightID, Kind: "refund.create.v2", Args: args,
					RequestID: fmt.Sprintf("req-%d", i)})
				if v.Code != tc.wantCodes[i] || v.DenyReason != tc.wantReason[i] {
					t.Fatalf("check %d with %s: code %v reason %q, want %v %q", i, args, v.Code, v.DenyReason, tc.wantCodes[i], tc.wantReason[i])
				}
				if v.Code == codes.PermissionDenied {
					wantCode := strings.SplitN(tc.wantReason[i], ": ", 2)[1]
					if v.HTTPStatus != 403 || v.DenyCode != wantCode || v.AuditID != d.AuditID {
						t.Errorf("check %d deny: status %d code %q audit %q, want 403 %q %q", i, v.HTTPStatus, v.DenyCode, v.AuditID, wantCode, d.AuditID)
					}
				}
				if v.Code == codes.OK && v.AuditID != d.AuditID {
					t.Errorf("check %d allow: audit id %q, want the preflight's %q", i, v.AuditID, d.AuditID)
				}
			}
			// The allow's frame records the digest docs/CLAUSES.md works out
			// by hand for these args, whatever spelling the call used.
			allows := 0
			for _, f := range srv.audit(t, d.AuditID) {
				if f.Kind == "autonomy.decision" && f.Attrs["outcome"] == "allow" {
					allows++
					if got := f.Attrs["args_digest"]; got != cbRefundDigest {
						t.Errorf("allow frame args_digest %v, want %s", got, cbRefundDigest)
					}
				}
			}
			wantAllows := 0
			if slices.Contains(tc.wantCodes, codes.OK) {
				wantAllows = 1
			}
			if allows != wantAllows {
				t.Errorf("%d allow frames, want %d", allows, wantAllows)
			}
		})
	}
}

// TestGateOnlyPrecondition: with binding off, the gate still runs the
// capability's preconditions on the real args, so args that changed after
// the preflight are denied in enforce and recorded in advisory.
func TestGateOnlyPrecondition(t *testing.T) {
	bundleDir := cbBundle(t, cbDefaultData(t, false))
	tests := map[string]struct {
		mode string
		args string
		// want
		code       codes.Code
		denyReason string
		advisory   string
		frame      map[string]any // attrs the decision frame must carry
	}{
		"enforce denies a violated precondition": {
			mode: "enforce", args: `{"caseRef":"case:882","amountUsd":-5}`,
			code: codes.PermissionDenied, denyReason: cbReasonPrecondition,
			frame: map[string]any{"outcome": "deny", "enforced": true, "mode": "enforce", "reason": cbReasonPrecondition},
		},
		"enforce denies a missing field": {
			mode: "enforce", args: `{"caseRef":"case:882"}`,
			code: codes.PermissionDenied, denyReason: cbReasonPrecondition,
			frame: map[string]any{"outcome": "deny", "enforced": true, "mode": "enforce", "reason": cbReasonPrecondition},
		},
		"enforce allows changed args that hold when binding is off": {
			mode: "enforce", args: `{"caseRef":"case:882","amountUsd":7}`,
			code:  codes.OK,
			frame: map[string]any{"outcome": "allow", "enforced": true, "mode": "enforce", "reason": "contract: passed"},
		},
		"advisory records the violation and lets the call through": {
			mode: "advisory", args: `{"caseRef":"case:882","amountUsd":-5}`,
			code: codes.OK, advisory: cbReasonPrecondition,
			frame: map[string]any{"outcome": "deny", "enforced": false, "mode": "advisory", "reason": cbReasonPrecondition},
		},
	}
	// Started here, not in the subtests, so they outlive each subtest.
	servers := map[string]*cbServer{
		"enforce":  cbServe(t, "enforce", "--bundle", bundleDir),
		"advisory": cbServe(t, "advisory", "--bundle", bundleDir),
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := servers[tc.mode]
			d := srv.mustPass(t, cbRefund{name: "gate-" + strings.ReplaceAll(name, " ", "-"), amountUsd: 125}.body(t))
			v := srv.checkCall(t, cbCall{PreflightID: d.PreflightID, Kind: "refund.create.v2", Args: tc.args, RequestID: "req-1"})
			if v.Code != tc.code || v.DenyReason != tc.denyReason || v.AdvisoryReason != tc.advisory {
				t.Fatalf("Check: code %v deny %q advisory %q, want %v %q %q", v.Code, v.DenyReason, v.AdvisoryReason, tc.code, tc.denyReason, tc.advisory)
			}
			var decisions []cbFrame
			for _, f := range srv.audit(t, d.AuditID) {
				if f.Kind == "autonomy.decision" {
					decisions = append(decisions, f)
				}
			}
			if len(decisions) != 1 {
				t.Fatalf("%d decision frames under %s, want 1", len(decisions), d.AuditID)
			}
			for k, want := range tc.frame {
				if got := decisions[0].Attrs[k]; got != want {
					t.Errorf("decision frame %s = %v, want %v (attrs %v)", k, got, want, decisions[0].Attrs)
				}
			}
			if got := decisions[0].Attrs["tool_kind"]; got != "refund.create.v2" {
				t.Errorf("decision frame tool_kind = %v", got)
			}
		})
	}
}

// TestActorBinding: the caller identity at the gate (the mTLS principal,
// or the configured actor header when present) must be the preflight's
// actor.id.
func TestActorBinding(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "autonomy.yaml")
	if err := os.WriteFile(cfg, []byte("gate:\n  actor_header: x-autonomy-actor\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	servers := map[bool]*cbServer{
		false: cbServe(t, "enforce"),
		true:  cbServe(t, "enforce", "--config", cfg),
	}
	tests := map[string]struct {
		actorHeader bool // serve with gate.actor_header: x-autonomy-actor
		principal   string
		headers     map[string]string
		wantCode    codes.Code
		wantReason  string
	}{
		"principal differs from the actor": {
			principal: "spiffe://mesh/agent-b", wantCode: codes.PermissionDenied, wantReason: cbReasonMismatch,
		},
		"same principal passes": {
			principal: "user:example", wantCode: codes.OK,
		},
		"an identity header is ignored when none is configured": {
			principal: "spiffe://mesh/agent-b", headers: map[string]string{"x-autonomy-actor": "user:example"},
			wantCode: codes.PermissionDenied, wantReason: cbReasonMismatch,
		},
		"configured header differs from the actor": {
			actorHeader: true, principal: "user:example", headers: map[string]string{"x-autonomy-actor": "user:mallory"},
			wantCode: codes.PermissionDenied, wantReason: cbReasonMismatch,
		},
		"configured header names the actor": {
			actorHeader: true, principal: "spiffe://mesh/agent-b", headers: map[string]string{"x-autonomy-actor": "user:example"},
			wantCode: codes.OK,
		},
		"configured header absent falls back to the principal": {
			actorHeader: true, principal: "spiffe://mesh/agent-b",
			wantCode: codes.PermissionDenied, wantReason: cbReasonMismatch,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := servers[tc.actorHeader]
			d := srv.mustPass(t, cbRefund{name: "actor-" + strings.ReplaceAll(name, " ", "-"), actor: "user:example", amountUsd: 125}.body(t))
			v := srv.checkCall(t, cbCall{PreflightID: d.PreflightID, Kind: "refund.create.v2",
				Args: `{"caseRef":"case:882","amountUsd":125}`, Principal: tc.principal, Headers: tc.headers, RequestID: "req-1"})
			if v.Code != tc.wantCode || v.DenyReason != tc.wantReason {
				t.Fatalf("Check: code %v reason %q, want %v %q", v.Code, v.DenyReason, tc.wantCode, tc.wantReason)
			}
			if tc.wantCode != codes.OK {
				return
			}
			// The step is consumed: the same caller again is a replay, so the
			// allow above really bound to this preflight.
			again := srv.checkCall(t, cbCall{PreflightID: d.PreflightID, Kind: "refund.create.v2",
				Args: `{"caseRef":"case:882","amountUsd":125}`, Principal: tc.principal, Headers: tc.headers, RequestID: "req-2"})
			if again.DenyReason != cbReasonReplay {
				t.Errorf("second Check: reason %q, want %q", again.DenyReason, cbReasonReplay)
			}
		})
	}
}

// TestDuplicateKeysRefused: a gated body with a repeated member name, or
// two names that differ only in case, is refused in every mode. JSON
// parsers disagree on which copy wins (Go and most keep the last, others
// the first; Go matches names to fields without regard to case), so the
// gate could check one tool or amount while the runtime executes another.
func TestDuplicateKeysRefused(t *testing.T) {
	servers := map[string]*cbServer{"enforce": cbServe(t, "enforce"), "advisory": cbServe(t, "advisory")}
	tests := map[string]struct {
		mode     string
		noHeader bool
		body     string
	}{
		"repeated amount, the preflighted one last": {
			mode: "enforce",
			body: `{"kind":"refund.create.v2","args":{"caseRef":"case:882","amountUsd":9999,"amountUsd":125}}`,
		},
		"repeated kind, the ungated one last": {
			mode: "enforce",
			body: `{"kind":"refund.create.v2","kind":"tool.echo","args":{"caseRef":"case:882","amountUsd":125}}`,
		},
		"repeated kind without a preflight id": {
			mode: "enforce", noHeader: true,
			body: `{"kind":"refund.create.v2","kind":"tool.echo","args":{"caseRef":"case:882","amountUsd":125}}`,
		},
		"repeated nested key": {
			mode: "enforce",
			body: `{"kind":"refund.create.v2","args":{"caseRef":"case:882","amountUsd":125,"meta":{"a":1,"a":2}}}`,
		},
		"kind again in upper case, the gated one last": {
			mode: "enforce", noHeader: true,
			body: `{"kind":"tool.echo","KIND":"refund.create.v2","args":{"caseRef":"case:882","amountUsd":125}}`,
		},
		"args again with a long s, another amount last": {
			mode: "enforce",
			body: `{"kind":"refund.create.v2","args":{"caseRef":"case:882","amountUsd":125},"arg\u017f":{"caseRef":"case:999","amountUsd":999999}}`,
		},
		"amount again in another case": {
			mode: "enforce",
			body: `{"kind":"refund.create.v2","args":{"caseRef":"case:882","amountUsd":125,"AmountUSD":999999}}`,
		},
		"repeated amount in advisory": {
			mode: "advisory",
			body: `{"kind":"refund.create.v2","args":{"caseRef":"case:882","amountUsd":9999,"amountUsd":125}}`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := servers[tc.mode]
			d := srv.mustPass(t, cbRefund{name: "dup-" + strings.ReplaceAll(name, " ", "-"), amountUsd: 125}.body(t))
			call := cbCall{PreflightID: d.PreflightID, Body: tc.body, RequestID: "req-1"}
			if tc.noHeader {
				call.PreflightID = ""
			}
			v := srv.checkCall(t, call)
			if v.Code != codes.PermissionDenied || v.HTTPStatus != 403 || v.DenyReason != "gate: malformed_tool_call" {
				t.Fatalf("Check: code %v status %d reason %q, want PermissionDenied 403 %q", v.Code, v.HTTPStatus, v.DenyReason, "gate: malformed_tool_call")
			}
			// Nothing was consumed: the same call, written once, passes.
			ok := srv.checkCall(t, cbCall{PreflightID: d.PreflightID, Kind: "refund.create.v2",
				Args: `{"caseRef":"case:882","amountUsd":125}`, RequestID: "req-2"})
			if ok.Code != codes.OK {
				t.Errorf("clean Check after the refused one: code %v reason %q, want OK", ok.Code, ok.DenyReason)
			}
		})
	}
}
