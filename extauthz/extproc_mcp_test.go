package extauthz_test

import (
	"encoding/json"
	"strconv"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/extauthz"
	"github.com/contractrefine/autonomy/wal"
)

// mcpExchange is what Envoy sends ext_proc for a POST /mcp of body that
// ext_authz allowed with auditID, and its answer.
func mcpExchange(body, requestID, auditID, answer string) []*extprocv3.ProcessingRequest {
	return append([]*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hm(
			":authority", "tools.internal", ":method", "POST", ":path", "/mcp", ":scheme", "http",
			"content-type", "application/json", "content-length", strconv.Itoa(len(body)),
			"x-request-id", requestID, binding.HeaderAuditID, auditID)}}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}},
	}, envoyResponse(200, answer)...)
}

func rpcCall(id int, name string, args map[string]any) string {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call",
		"params": map[string]any{"name": name, "arguments": args}})
	return string(b)
}

// TestExtProcMCPJudgesToolCallsOnly: with gate.protocol: mcp only the
// answers to tools/call are judged. A message of another method passes
// unjudged, with no outcome frame; a batch the gate allowed has each of
// its tools/call judged on the answer of its id, under its own decision,
// and is refused whole when one of them fails.
func TestExtProcMCPJudgesToolCallsOnly(t *testing.T) {
	e := newOutcomeEnv(t, binding.ModeEnforce, extauthz.ProcessorOptions{}, func(o *binding.Options) {
		o.Protocol, o.Path = binding.ProtocolMCP, "/mcp"
	})
	allow := func(body, requestID string) string {
		t.Helper()
		resp := check(t, e.authz, mcpCheck(body, "", requestID, true))
		if resp.GetOkResponse() == nil {
			t.Fatalf("Check denied %s: %v", body, resp)
		}
		return headerValues(resp.GetOkResponse().GetHeaders())[binding.HeaderAuditID]
	}
	passes := func(out []*extprocv3.ProcessingResponse) {
		t.Helper()
		for _, r := range out {
			if r.GetImmediateResponse() != nil {
				t.Fatalf("answer refused: %v", r.GetImmediateResponse())
			}
		}
	}

	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	audit := allow(list, "req-list")
	passes(e.exchange(t, mcpExchange(list, "req-list", audit, `{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}`)))
	if got := e.outcomes(t, audit); len(got) != 0 {
		t.Fatalf("tools/list answer judged: %+v", got)
	}

	debit := rpcCall(2, "ledger.debit", map[string]any{"balance": 10, "amount": 4})
	echo := rpcCall(3, "tool.echo", map[string]any{"msg": "hi"})
	batch := "[" + list + "," + debit + "," + echo + "]"
	audit = allow(batch, "req-batch")
	answers := `[{"jsonrpc":"2.0","id":3,"result":{"content":[]}},` +
		`{"jsonrpc":"2.0","id":1,"result":{"tools":[]}},{"jsonrpc":"2.0","id":2,"balance":6,"result":{}}]`
	passes(e.exchange(t, mcpExchange(batch, "req-batch", audit, answers)))
	got := e.outcomes(t, audit)
	if len(got) != 2 || got[0].RequestID != "req-batch/1" || got[0].ToolKind != "ledger.debit" ||
		got[0].Outcome != wal.OutcomeOK || got[1].RequestID != "req-batch/2" || got[1].ToolKind != "tool.echo" {
		t.Fatalf("batch outcomes %+v, want ledger.debit's and tool.echo's, both ok", got)
	}

	// An id the server writes back in another form (2.0 as 2) is the same
	// id: the call is judged on its own answer.
	odd := `[{"jsonrpc":"2.0","id":2.0,"method":"tools/call","params":{"name":"ledger.debit","arguments":{"balance":10,"amount":4}}}]`
	audit = allow(odd, "req-odd")
	passes(e.exchange(t, mcpExchange(odd, "req-odd", audit, `[{"jsonrpc":"2.0","id":2,"balance":6,"result":{}}]`)))

	// A message presenting a known preflight (in _meta) was decided under
	// the preflight's audit id, not the batch's: its answer is judged and
	// recorded there.
	bd := e.record("ledger.debit", map[string]any{"balance": 10, "amount": 4})
	withMeta := `[{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"ledger.debit","arguments":{"balance":10,"amount":4},` +
		`"_meta":{"autonomy/preflight_id":"` + bd.PreflightID + `"}}}]`
	audit = allow(withMeta, "req-meta")
	passes(e.exchange(t, mcpExchange(withMeta, "req-meta", audit, `[{"jsonrpc":"2.0","id":8,"balance":6,"result":{}}]`)))
	if got := e.outcomes(t, bd.AuditID); len(got) != 1 || got[0].Outcome != wal.OutcomeOK || got[0].PreflightID != bd.PreflightID {
		t.Fatalf("outcomes under the preflight's audit id: %+v, want the call's, ok", got)
	}

	// The debit's answer does not show the balance dropping: refused.
	audit = allow(batch, "req-bad")
	bad := `[{"jsonrpc":"2.0","id":2,"balance":10,"result":{}},{"jsonrpc":"2.0","id":3,"result":{}}]`
	out := e.exchange(t, mcpExchange(batch, "req-bad", audit, bad))
	ir := out[len(out)-1].GetImmediateResponse()
	if ir == nil || ir.GetStatus().GetCode() != 502 {
		t.Fatalf("a batch whose debit answer fails its postcondition: %v, want 502", out[len(out)-1])
	}
	var v violation
	if err := json.Unmarshal(ir.GetBody(), &v); err != nil || v.Error.Code != "postcondition_violated" {
		t.Fatalf("502 body %s (%v)", ir.GetBody(), err)
	}
}
