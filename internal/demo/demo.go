// Package demo walks the ContractRefine story end to end — a preflight that
// needs repair, the corrected one passing, the tool call allowed, its replay
// denied, a call without a preflight denied, and the audit join; in-process,
// a tool's wrong result replaced by the 502 of its violated postcondition
// and a payment that waits for a person's approval — either in-process on
// loopback or against an existing deployment.
package demo

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/contractrefine/autonomy/internal/config"
	"github.com/contractrefine/autonomy/internal/mcpexample"
	"github.com/contractrefine/autonomy/internal/server"
	"github.com/contractrefine/autonomy/internal/toolruntime"
	"github.com/contractrefine/autonomy/preflight"
)

// ErrMisbehaved reports that at least one step did not behave as the story
// says it must.
var ErrMisbehaved = errors.New("demo: a step misbehaved")

// Options configures Run.
type Options struct {
	// Target is the base URL of a deployment whose front routes /v1/preflight,
	// /v1/audit and /v1/tool (Envoy at :10000 in the compose demo). Empty
	// starts everything in-process.
	Target string
	// Out receives the walkthrough.
	Out io.Writer
	// Client is the HTTP client; nil means one with a 10 s timeout.
	Client *http.Client
	// ApproverToken is a bearer token of the target whose roles include
	// role:payment-approver, for the approval steps (the in-process run
	// makes its own); without one those steps are skipped on a target.
	ApproverToken string
	// MCP walks the story over MCP (gate.protocol: mcp) with the official
	// Go SDK's client, in-process against the example MCP server, or
	// against a Target whose front serves MCP at /mcp.
	MCP bool
}

// Run walks the story and returns ErrMisbehaved if any step misbehaved.
func Run(ctx context.Context, o Options) error {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 10 * time.Second}
	}
	w := &walk{out: o.Out, client: o.Client, api: strings.TrimRight(o.Target, "/"), tool: strings.TrimRight(o.Target, "/"),
		token: o.ApproverToken}
	if o.Target == "" {
		stop, err := w.startInProcess(ctx, o.MCP)
		if err != nil {
			return err
		}
		defer stop()
		w.inProcess = true
	} else {
		fmt.Fprintf(w.out, "ContractRefine demo against %s (the replay and header-less calls are denied only if it runs in enforce mode)\n\n", o.Target)
	}
	if o.MCP {
		w.mcpStory(ctx)
	} else {
		w.story(ctx)
	}
	if w.failed > 0 {
		fmt.Fprintf(w.out, "\n%d of %d steps misbehaved.\n", w.failed, w.steps)
		return ErrMisbehaved
	}
	fmt.Fprintf(w.out, "\nAll %d steps behaved.\n", w.steps)
	return nil
}

type walk struct {
	out       io.Writer
	client    *http.Client
	api, tool string
	steps     int
	failed    int
	// token is the approver's bearer token, sent on every API request.
	token string
	// inProcess is true when the walk started the service itself.
	inProcess bool
}

// startInProcess starts the example tool runtime (or, with mcp, the example
// MCP server), then the service in enforce mode with the built-in gateway
// in front of it, all on loopback with a temporary data directory.
func (w *walk) startInProcess(ctx context.Context, mcp bool) (stop func(), err error) {
	dir, err := os.MkdirTemp("", "autonomy-demo-")
	if err != nil {
		return nil, err
	}
	rtLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	var upstream http.Handler = toolruntime.New(toolruntime.Options{})
	what := "tool runtime"
	if mcp {
		upstream, what = mcpexample.New(mcpexample.Options{}), "MCP server"
	}
	rt := &http.Server{Handler: upstream, ReadHeaderTimeout: 5 * time.Second}
	go rt.Serve(rtLn)

	cfg := config.Default()
	cfg.HTTPAddr, cfg.GRPCAddr, cfg.GatewayAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.DataDir = dir
	cfg.ContractRefine.Mode = config.ModeEnforce
	cfg.Upstream = "http://" + rtLn.Addr().String()
	// An approver for the payment step: with a tokens file every read
	// needs a token too, so the walk sends it on every API request.
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	w.token = "demo-" + hex.EncodeToString(tok[:])
	cfg.Access.TokensFile = dir + "/tokens.yaml"
	tokens := fmt.Sprintf("tokens:\n  - {name: demo-approver, tenant: \"*\", token: %q, roles: [\"role:payment-approver\"], subject: \"user:demo-approver\"}\n", w.token)
	if err := os.WriteFile(cfg.Access.TokensFile, []byte(tokens), 0o600); err != nil {
		rt.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	if mcp {
		cfg.Gate.Protocol, cfg.Gate.Path = config.ProtocolMCP, mcpexample.Path
	}
	addrs := make(chan server.Addrs, 1)
	srv, err := server.New(ctx, cfg, server.Options{
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Listening: func(a server.Addrs) { addrs <- a },
	})
	if err != nil {
		rt.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()
	stop = func() {
		cancel()
		<-done
		rt.Close()
		os.RemoveAll(dir)
	}
	select {
	case a := <-addrs:
		w.api, w.tool = "http://"+a.HTTP, "http://"+a.Gateway
		fmt.Fprintf(w.out, "ContractRefine demo, in-process (enforce mode: the denials below are enforced;\n"+
			"autonomy serve starts in advisory mode, which records them and lets the calls through):\n  gate         gate.protocol %s, gate.path %s\n  service API  %s\n  ext_authz    grpc://%s\n  gateway      %s -> %s %s\n  WAL          %s\n\n",
			cfg.Gate.Protocol, cfg.Gate.Path, w.api, a.GRPC, w.tool, what, cfg.Upstream, dir)
		return stop, nil
	case err := <-done:
		stop()
		return nil, fmt.Errorf("demo: service did not start: %w", err)
	}
}

// step prints one step's result and counts failures.
func (w *walk) step(title string, err error, detail string) bool {
	w.steps++
	if err != nil {
		w.failed++
		fmt.Fprintf(w.out, "%d. %s\n   MISBEHAVED: %v\n", w.steps, title, err)
		return false
	}
	fmt.Fprintf(w.out, "%d. %s\n   ok: %s\n", w.steps, title, detail)
	return true
}

type decision struct {
	PreflightID     string `json:"preflight_id"`
	AuditID         string `json:"audit_id"`
	Outcome         string `json:"outcome"`
	Reason          string `json:"reason"`
	Attempt         int    `json:"attempt"`
	ContractResults []struct {
		Contract    string `json:"contract"`
		Outcome     string `json:"outcome"`
		RepairHints []struct {
			Field      string `json:"field"`
			Suggestion any    `json:"suggestion"`
			Bounded    bool   `json:"bounded"`
		} `json:"repair_hints"`
	} `json:"contract_results"`
	Eligibility struct {
		BoundToolKinds []string `json:"bound_tool_kinds"`
		ExpiresAt      string   `json:"expires_at"`
	} `json:"eligibility"`
}

// plan is the demo's two-step plan: read the customer, then run a shell
// command (a side-effecting capability that requires a preflight).
func plan(session, zone string) map[string]any {
	return map[string]any{
		"intent": map[string]any{"summary": "Look up case 882, then notify the on-call engineer", "plan_hash": "demo-plan-v1"},
		"plan": map[string]any{"steps": []any{
			map[string]any{"id": "s1", "kind": "customer.read.v3", "zone": zone, "args": map[string]any{"caseRef": "case:882"}},
			map[string]any{"id": "s2", "kind": "tool.shell", "zone": "ops", "depends_on": []string{"s1"},
				"args": map[string]any{"cmd": "notify on-call case:882"}, "provenance": map[string]string{"cmd": "literal"}},
		}},
		"context": map[string]any{
			"actor":       map[string]any{"id": "user:demo", "session_id": session},
			"attestation": map[string]any{"node_id": "edge-7", "issued_at": time.Now().UTC().Format(time.RFC3339)},
		},
	}
}

func (w *walk) story(ctx context.Context) {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	session := "demo-" + hex.EncodeToString(rnd[:])

	var first decision
	err := w.postJSON(ctx, w.api+"/v1/preflight", plan(session, "support"), &first)
	if err == nil {
		err = expectRepair(&first)
	}
	w.step("Preflight a plan whose first step names the wrong zone", err,
		fmt.Sprintf("outcome %s (%s), hint /plan/steps/0/zone -> \"payments\"", first.Outcome, first.Reason))

	var second decision
	err = w.postJSON(ctx, w.api+"/v1/preflight", plan(session, "payments"), &second)
	if err == nil && (second.Outcome != "pass" || second.PreflightID == "" || second.Attempt != 2) {
		err = fmt.Errorf("want outcome pass on attempt 2 with a preflight id, got %s (%s) attempt %d", second.Outcome, second.Reason, second.Attempt)
	}
	w.step("Resubmit with the hint applied (same session, attempt 2)", err,
		fmt.Sprintf("outcome pass, preflight_id %s binds %v until %s", second.PreflightID, second.Eligibility.BoundToolKinds, second.Eligibility.ExpiresAt))

	call := map[string]any{"kind": "tool.shell", "args": map[string]any{"cmd": "notify on-call case:882"}}
	status, hdr, body, err := w.tool1(ctx, call, second.PreflightID, "demo-call-1")
	if err == nil && (second.PreflightID == "" || second.AuditID == "") {
		// Without ids from step 2 an answer here proves nothing.
		err = errors.New("step 2 gave no preflight id and audit id to call with")
	} else if err == nil && status != http.StatusOK {
		err = fmt.Errorf("want 200 from the tool runtime, got %d: %s", status, body)
	}
	// The runtime echoes the audit id the front gave it: an answer without
	// it means the call reached the runtime without the decision.
	if got := hdr.Get("X-Autonomy-Audit-Id"); err == nil && got != second.AuditID {
		err = fmt.Errorf("want the answer to carry x-autonomy-audit-id %s, got %q", second.AuditID, got)
	}
	w.step("Call tool.shell with X-Autonomy-Preflight-Id", err,
		fmt.Sprintf("allowed, the runtime answered %d %s with x-autonomy-audit-id %s", status, strings.TrimSpace(string(body)), second.AuditID))

	status, _, body, err = w.tool1(ctx, call, second.PreflightID, "demo-call-2")
	if err == nil {
		err = expectDeny(status, body, preflight.ReasonReplay)
	}
	w.step("Call it again with the same preflight id (a replay)", err, fmt.Sprintf("denied %d %s", status, strings.TrimSpace(string(body))))

	status, _, body, err = w.tool1(ctx, call, "", "demo-call-3")
	if err == nil {
		err = expectDeny(status, body, preflight.ReasonPreflightRequired)
	}
	w.step("Call tool.shell without a preflight id", err, fmt.Sprintf("denied %d %s", status, strings.TrimSpace(string(body))))

	var join struct {
		AuditID string `json:"audit_id"`
		Frames  []struct {
			Seq   uint64         `json:"seq"`
			Kind  string         `json:"kind"`
			Time  string         `json:"timestamp"`
			Attrs map[string]any `json:"attrs"`
		} `json:"frames"`
	}
	err = w.getJSON(ctx, w.api+"/v1/audit/"+second.AuditID, &join)
	var lines []string
	if err == nil {
		var kinds []string
		for _, f := range join.Frames {
			kinds = append(kinds, f.Kind)
			lines = append(lines, fmt.Sprintf("      %s  %-20s %-6v %v", f.Time, f.Kind, f.Attrs["outcome"], f.Attrs["reason"]))
		}
		want := "autonomy.preflight autonomy.decision autonomy.decision"
		if strings.Join(kinds, " ") != want {
			err = fmt.Errorf("want frames [%s], got %v", want, kinds)
		}
	}
	w.step("Read the audit join for "+second.AuditID, err, "intent, verdict and both tool decisions under one audit id:\n"+strings.Join(lines, "\n"))
	w.outcomeStory(ctx)
	w.approvalStory(ctx, session)
}

// outcomeStory: the gateway judges the runtime's result against the
// capability's postcondition (docs/API.md): a right balance passes, the buggy
// tool's wrong one is replaced by the 502 naming the clause. In-process
// only: a target's front may not judge responses (nginx, Caddy), and in
// advisory mode it records the violation and lets it through.
func (w *walk) outcomeStory(ctx context.Context) {
	if !w.inProcess {
		fmt.Fprintf(w.out, "\n(tool-outcome steps skipped against a target: they run in-process, where the gateway judges responses)\n")
		return
	}
	args := map[string]any{"accountRef": "acct:1", "balanceUsd": 100, "amountUsd": 25}
	status, _, body, err := w.tool1(ctx, map[string]any{"kind": "ledger.debit.v1", "args": args}, "", "demo-debit-1")
	var result struct {
		BalanceUsd float64 `json:"balanceUsd"`
	}
	if err == nil && (status != http.StatusOK || json.Unmarshal(body, &result) != nil || result.BalanceUsd != 75) {
		err = fmt.Errorf("want 200 with balanceUsd 75, got %d: %s", status, body)
	}
	w.step("Debit 25 USD with ledger.debit.v1 (its postcondition checks the new balance)", err,
		fmt.Sprintf("the result passed the postcondition; the runtime answered %d %s", status, strings.TrimSpace(string(body))))

	status, _, body, err = w.tool1(ctx, map[string]any{"kind": "ledger.debit.buggy.v1", "args": args}, "", "demo-debit-2")
	var v struct {
		Error struct {
			Code   string `json:"code"`
			Reason string `json:"reason"`
			Clause struct {
				Kind       string         `json:"kind"`
				Expression string         `json:"expression"`
				Bindings   map[string]any `json:"bindings"`
			} `json:"clause"`
		} `json:"error"`
	}
	if err == nil && (status != http.StatusBadGateway || json.Unmarshal(body, &v) != nil ||
		v.Error.Reason != preflight.ReasonPostconditionViolated || v.Error.Clause.Kind != preflight.ClausePostcondition) {
		err = fmt.Errorf("want 502 %s naming the postcondition, got %d: %s", preflight.ReasonPostconditionViolated, status, body)
	}
	bindings, _ := json.Marshal(v.Error.Clause.Bindings)
	w.step("Debit it with ledger.debit.buggy.v1, whose runtime applies the debit twice", err,
		fmt.Sprintf("the wrong result never reached the caller: 502 %s, clause %q with %s", v.Error.Code,
			v.Error.Clause.Expression, bindings))
}

// payment is a one-step plan that sends a payment, which the default
// bundle's payment.send.v1 lets run only once a person approved it.
func payment(session string) map[string]any {
	return map[string]any{
		"intent": map[string]any{"summary": "Pay invoice 77 to the supplier", "plan_hash": "demo-payment-v1"},
		"plan": map[string]any{"steps": []any{
			map[string]any{"id": "s1", "kind": "payment.send.v1", "zone": "payments",
				"args":       map[string]any{"to": "acct:supplier-77", "amountUsd": 480},
				"provenance": map[string]string{"to": "literal", "amountUsd": "literal"}},
		}},
		"context": map[string]any{
			"actor":       map[string]any{"id": "user:demo", "session_id": session + "-pay"},
			"attestation": map[string]any{"node_id": "edge-7", "issued_at": time.Now().UTC().Format(time.RFC3339)},
		},
	}
}

// approvalStory: the payment waits for approval, is approved by someone
// else than the agent's actor, and runs once.
func (w *walk) approvalStory(ctx context.Context, session string) {
	if w.token == "" {
		fmt.Fprintf(w.out, "\n(approval steps skipped: no approver token for the target; pass --approver-token)\n")
		return
	}
	var d struct {
		decision
		Eligibility struct {
			ApprovalsRequired []struct {
				StepID      string   `json:"step_id"`
				Authorities []string `json:"authorities"`
				ExpiresAt   string   `json:"expires_at"`
			} `json:"approvals_required"`
		} `json:"eligibility"`
	}
	err := w.postJSON(ctx, w.api+"/v1/preflight", payment(session), &d)
	if err == nil && (d.Outcome != "pass" || len(d.Eligibility.ApprovalsRequired) != 1 || d.Eligibility.ApprovalsRequired[0].StepID != "s1") {
		err = fmt.Errorf("want pass with step s1 waiting for approval, got %s (%s) %+v", d.Outcome, d.Reason, d.Eligibility.ApprovalsRequired)
	}
	detail := "outcome pass, no approval listed"
	if len(d.Eligibility.ApprovalsRequired) == 1 {
		a := d.Eligibility.ApprovalsRequired[0]
		detail = fmt.Sprintf("outcome pass; step s1 waits for %v until %s", a.Authorities, a.ExpiresAt)
	}
	w.step("Preflight a payment of 480 USD (payment.send.v1 needs a person's approval)", err, detail)

	call := map[string]any{"kind": "payment.send.v1", "args": map[string]any{"to": "acct:supplier-77", "amountUsd": 480}}
	status, _, body, err := w.tool1(ctx, call, d.PreflightID, "demo-pay-1")
	if err == nil {
		err = expectDeny(status, body, preflight.ReasonApprovalPending)
	}
	w.step("Call it before anyone approved", err, fmt.Sprintf("denied %d %s", status, strings.TrimSpace(string(body))))

	var approved struct {
		State    string `json:"state"`
		Approver string `json:"approver"`
	}
	err = w.postJSON(ctx, w.api+"/v1/approvals/"+d.PreflightID+"/s1",
		map[string]any{"decision": "approve", "comment": "invoice 77 checked"}, &approved)
	if err == nil && approved.State != "approved" {
		err = fmt.Errorf("want state approved, got %q", approved.State)
	}
	w.step("An approver approves step s1 (POST /v1/approvals/{preflight_id}/s1)", err,
		fmt.Sprintf("%s by %s, recorded as an autonomy.approval frame", approved.State, approved.Approver))

	status, _, body, err = w.tool1(ctx, call, d.PreflightID, "demo-pay-2")
	if err == nil && status != http.StatusOK {
		err = fmt.Errorf("want 200 from the tool runtime, got %d: %s", status, body)
	}
	w.step("Call it again, now approved", err, fmt.Sprintf("allowed, the runtime answered %d %s", status, strings.TrimSpace(string(body))))

	status, _, body, err = w.tool1(ctx, call, d.PreflightID, "demo-pay-3")
	if err == nil {
		err = expectDeny(status, body, preflight.ReasonReplay)
	}
	w.step("Call it a third time (the approval was for one call)", err, fmt.Sprintf("denied %d %s", status, strings.TrimSpace(string(body))))
}

func expectRepair(d *decision) error {
	if d.Outcome != "repair_required" || d.Reason != preflight.ReasonRepairRequired {
		return fmt.Errorf("want repair_required, got %s (%s)", d.Outcome, d.Reason)
	}
	for _, r := range d.ContractResults {
		for _, h := range r.RepairHints {
			if h.Field == "/plan/steps/0/zone" && h.Suggestion == "payments" && h.Bounded {
				return nil
			}
		}
	}
	return errors.New("no bounded hint /plan/steps/0/zone -> payments")
}

func expectDeny(status int, body []byte, reason string) error {
	var e struct {
		Error struct {
			Reason string `json:"reason"`
		} `json:"error"`
	}
	_ = json.Unmarshal(body, &e)
	if status/100 == 2 {
		return fmt.Errorf("want 403 %s, got %d: the call was let through, as advisory mode (the default of autonomy serve) does; serve with --mode enforce to deny it", reason, status)
	}
	if status != http.StatusForbidden || e.Error.Reason != reason {
		return fmt.Errorf("want 403 %s, got %d %s", reason, status, strings.TrimSpace(string(body)))
	}
	return nil
}

func (w *walk) postJSON(ctx context.Context, url string, in, out any) error {
	b, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return w.do(req, out)
}

// authorize sends the approver's token to the service's API.
func (w *walk) authorize(req *http.Request) {
	if w.token != "" {
		req.Header.Set("Authorization", "Bearer "+w.token)
	}
}

func (w *walk) getJSON(ctx context.Context, url string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	return w.do(req, out)
}

func (w *walk) do(req *http.Request, out any) error {
	w.authorize(req)
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s answered %d: %s", req.Method, req.URL.Path, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	return nil
}

// tool1 makes one tool call through the front.
func (w *walk) tool1(ctx context.Context, call any, preflightID, requestID string) (int, http.Header, []byte, error) {
	b, _ := json.Marshal(call)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.tool+"/v1/tool", bytes.NewReader(b))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", requestID)
	if preflightID != "" {
		req.Header.Set("X-Autonomy-Preflight-Id", preflightID)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, resp.Header, body, err
}
