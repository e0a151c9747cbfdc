package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The tests of tool outcomes (docs/API.md) through the built-in gateway, with
// the example tool runtime behind it: ledger.debit.v1 answers the right
// balance, ledger.debit.buggy.v1 applies the debit twice.

// ocGateway is `autonomy serve` with the gateway in front of a runtime.
type ocGateway struct {
	*cbServer
	front string
}

func ocServe(t *testing.T, mode string, extra ...string) *ocGateway {
	t.Helper()
	rt := dpStartRuntime(t)
	args := append([]string{"--upstream", rt.URL(), "--gateway-addr", "127.0.0.1:0"}, extra...)
	s := cbServe(t, mode, args...)
	return &ocGateway{cbServer: s, front: "http://" + s.GatewayAddr}
}

// call posts one tool call through the gateway.
func (g *ocGateway) call(t *testing.T, kind, args, preflightID string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.front+"/v1/tool", strings.NewReader(fmt.Sprintf(`{"kind":%q,"args":%s}`, kind, args)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if preflightID != "" {
		req.Header.Set("X-Autonomy-Preflight-Id", preflightID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body
}

// join reads GET /v1/audit/{id} with the query q.
func (g *ocGateway) join(t *testing.T, auditID, q string) (int, []cbFrame) {
	t.Helper()
	resp, err := http.Get(g.URL("/v1/audit/" + auditID + q))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out struct {
		Frames []cbFrame `json:"frames"`
		Error  struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("audit answer %s: %v", raw, err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, []cbFrame{{Kind: out.Error.Code}}
	}
	return resp.StatusCode, out.Frames
}

func ocKinds(frames []cbFrame) string {
	var ks []string
	for _, f := range frames {
		ks = append(ks, f.Kind)
	}
	return strings.Join(ks, " ")
}

const ocDebit = `{"accountRef":"acct:1","balanceUsd":100,"amountUsd":25}`

// TestOutcomeThroughGateway: right and wrong results, enforce and
// advisory, strict and not, through the gateway; the outcome frame joins
// the audit only with include=outcome.
func TestOutcomeThroughGateway(t *testing.T) {
	t.Parallel()
	t.Run("enforce", func(t *testing.T) {
		t.Parallel()
		g := ocServe(t, "enforce")
		status, h, body := g.call(t, "ledger.debit.v1", ocDebit, "")
		if status != http.StatusOK || !strings.Contains(string(body), `"balanceUsd":75`) || h.Get("X-Autonomy-Postcondition-Warning") != "" {
			t.Fatalf("right result: want 200 with balance 75 and no warning, got %d %s %v", status, body, h)
		}
		okAudit := h.Get("X-Autonomy-Audit-Id")

		status, h, body = g.call(t, "ledger.debit.buggy.v1", ocDebit, "")
		if status != http.StatusBadGateway {
			t.Fatalf("wrong result: want 502, got %d %s", status, body)
		}
		var v struct {
			Error struct {
				Code    string `json:"code"`
				Reason  string `json:"reason"`
				AuditID string `json:"audit_id"`
				Clause  struct {
					Kind       string         `json:"kind"`
					Expression string         `json:"expression"`
					Bindings   map[string]any `json:"bindings"`
					Message    string         `json:"message"`
				} `json:"clause"`
			} `json:"error"`
		}
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("502 body %s: %v", body, err)
		}
		e := v.Error
		wantBindings := map[string]any{"result.balanceUsd": 50.0, "old(args.balanceUsd)": 100.0, "args.amountUsd": 25.0}
		if e.Code != "postcondition_violated" || e.Reason != "clause: postcondition_violated" || e.AuditID == "" ||
			e.AuditID != h.Get("X-Autonomy-Audit-Id") || e.Clause.Kind != "postcondition" ||
			e.Clause.Expression != "result.balanceUsd == old(args.balanceUsd) - args.amountUsd" ||
			fmt.Sprint(e.Clause.Bindings) != fmt.Sprint(wantBindings) ||
			!strings.HasPrefix(e.Clause.Message, "the balance must drop by exactly the amount debited") {
			t.Errorf("502 body %s: want the postcondition with bindings %v and the contract's message", body, wantBindings)
		}
		if strings.Contains(string(body), "accountRef") {
			t.Errorf("the wrong result reached the caller: %s", body)
		}

		// The default join is unchanged; include=outcome adds the frame.
		if _, frames := g.join(t, okAudit, ""); ocKinds(frames) != "autonomy.decision" {
			t.Errorf("default join: %q, want the decision only", ocKinds(frames))
		}
		_, frames := g.join(t, e.AuditID, "?include=outcome")
		if ocKinds(frames) != "autonomy.decision autonomy.outcome" {
			t.Fatalf("include=outcome: %q, want the decision then the outcome", ocKinds(frames))
		}
		a := frames[1].Attrs
		if a["outcome"] != "violated" || a["enforced"] != true || a["status"] != 200.0 || a["tool_kind"] != "ledger.debit.buggy.v1" ||
			a["reported_by"] != "gateway" || !strings.HasPrefix(fmt.Sprint(a["response_digest"]), "sha256:") {
			t.Errorf("outcome frame %v", a)
		}
		for q, want := range map[string]string{"?include=all": "autonomy.decision autonomy.outcome",
			"?include=approval,outcome": "autonomy.decision autonomy.outcome", "?include=approval": "autonomy.decision"} {
			if _, frames := g.join(t, e.AuditID, q); ocKinds(frames) != want {
				t.Errorf("%s: %q, want %q", q, ocKinds(frames), want)
			}
		}
		if status, frames := g.join(t, e.AuditID, "?include=outcomes"); status != http.StatusBadRequest || frames[0].Kind != "malformed-request" {
			t.Errorf("include=outcomes: %d %v, want 400 malformed-request", status, frames)
		}
	})
	t.Run("advisory records only", func(t *testing.T) {
		t.Parallel()
		g := ocServe(t, "advisory")
		status, h, body := g.call(t, "ledger.debit.buggy.v1", ocDebit, "")
		if status != http.StatusOK || !strings.Contains(string(body), `"balanceUsd":50`) || h.Get("X-Autonomy-Postcondition-Warning") != "" {
			t.Fatalf("advisory: want the tool's answer as it is, got %d %s", status, body)
		}
		_, frames := g.join(t, h.Get("X-Autonomy-Audit-Id"), "?include=outcome")
		if len(frames) != 2 || frames[1].Attrs["outcome"] != "violated" || frames[1].Attrs["enforced"] != false {
			t.Errorf("advisory outcome frames %v", frames)
		}
	})
	t.Run("strict false passes with a warning", func(t *testing.T) {
		t.Parallel()
		data := cbDefaultData(t, true)
		data = strings.Replace(data, `message: "the balance must drop by exactly the amount debited"`,
			"message: \"the balance must drop by exactly the amount debited\"\n        strict: false", 1)
		g := ocServe(t, "enforce", "--bundle", cbBundle(t, data))
		status, h, body := g.call(t, "ledger.debit.buggy.v1", ocDebit, "")
		if status != http.StatusOK || h.Get("X-Autonomy-Postcondition-Warning") != "clause: postcondition_violated" {
			t.Fatalf("strict: false: want 200 with the warning header, got %d %v %s", status, h, body)
		}
		_, frames := g.join(t, h.Get("X-Autonomy-Audit-Id"), "?include=outcome")
		if len(frames) != 2 || frames[1].Attrs["warning"] != true || frames[1].Attrs["enforced"] != false {
			t.Errorf("strict: false outcome frames %v", frames)
		}
	})
}

// TestOutcomeOutputContract: a preflight whose envelope caps the output
// at outputContract.maxBytes gets a 502 output_contract_violated when the
// tool answers more, and its outcome joins the preflight's audit id.
func TestOutcomeOutputContract(t *testing.T) {
	t.Parallel()
	g := ocServe(t, "enforce")
	now := time.Now().UTC().Truncate(time.Second)
	args := map[string]any{"accountRef": "acct:1", "balanceUsd": 100, "amountUsd": 25}
	var d cbDecision
	// maxBytes 0 is a limit too: only an empty body.
	for _, limit := range []int{0, 16} {
		name := fmt.Sprintf("oc-output-%d", limit)
		env := cbEnvelope(name, "user:example", now, args)
		env["allowedTools"] = []any{"ledger.debit.v1"}
		env["outputContract"].(map[string]any)["maxBytes"] = limit
		req := map[string]any{
			"intent": map[string]any{"summary": "Debit an account", "plan_hash": "plan-" + name},
			"plan":   map[string]any{"steps": []any{map[string]any{"id": "s1", "kind": "ledger.debit.v1", "zone": "payments", "args": args}}},
			"context": map[string]any{"actor": map[string]any{"id": "user:example", "session_id": "session:" + name},
				"request": env},
		}
		body, _ := json.Marshal(req)
		d = g.mustPass(t, body)
		status, _, answer := g.call(t, "ledger.debit.v1", ocDebit, d.PreflightID)
		if status != http.StatusBadGateway || !strings.Contains(string(answer), `"code":"output_contract_violated"`) ||
			!strings.Contains(string(answer), `"reason":"outcome: output_contract_violated"`) {
			t.Fatalf("maxBytes %d: want 502 output_contract_violated, got %d %s", limit, status, answer)
		}
	}
	_, frames := g.join(t, d.AuditID, "?include=outcome")
	if ocKinds(frames) != "autonomy.preflight autonomy.decision autonomy.outcome" {
		t.Fatalf("join %q", ocKinds(frames))
	}
	if a := frames[2].Attrs; a["step_id"] != "s1" || a["preflight_id"] != d.PreflightID || a["reason"] != "outcome: output_contract_violated" {
		t.Errorf("outcome frame %v", a)
	}
	// The CLI shows it too.
	res := RunAutonomy(t, "audit", "--server", g.URL(""), "--include", "outcome", d.AuditID)
	if res.Code != 0 || !strings.Contains(res.Stdout, "outcome: output_contract_violated") || !strings.Contains(res.Stdout, "(response replaced by 502)") {
		t.Errorf("autonomy audit --include outcome: %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
}
