package binding_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/internal/bundle/bundletest"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// mcpPost is POST /mcp with a JSON-RPC body, as an MCP client sends it
// over Streamable HTTP.
func mcpPost(body string, headers map[string]string) *binding.Request {
	h := map[string]string{"content-type": "application/json", "accept": "application/json, text/event-stream",
		"mcp-session-id": "sess-1", "mcp-protocol-version": "2025-06-18"}
	for k, v := range headers {
		h[k] = v
	}
	return &binding.Request{Method: http.MethodPost, Path: "/mcp", Headers: h, Body: []byte(body)}
}

// toolsCall is a tools/call body; meta, when not empty, is the preflight
// id in params._meta.
func toolsCall(id, name, args, meta string) string {
	params := `{"name":` + mustJSON(name) + `,"arguments":` + args
	if meta != "" {
		params += `,"_meta":{"autonomy/preflight_id":` + mustJSON(meta) + `}`
	}
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":` + params + `}}`
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func mcpEnv(t *testing.T, mode binding.Mode) *env {
	return newEnv(t, loadTestBundle(t), mode, func(o *binding.Options) {
		o.Protocol, o.Path = binding.ProtocolMCP, "/mcp"
	})
}

// toolResult is the JSON-RPC answer to a denied tools/call.
type toolResult struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  *struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent map[string]string `json:"structuredContent"`
		IsError           bool              `json:"isError"`
	} `json:"result"`
	Error *struct {
		Code    int               `json:"code"`
		Message string            `json:"message"`
		Data    map[string]string `json:"data"`
	} `json:"error"`
}

// mcpDeny checks that d is answered to the client as MCP asks and returns
// the answers it holds.
func mcpDeny(t *testing.T, d *binding.Decision, batch bool) []toolResult {
	t.Helper()
	status, body := d.ClientDeny()
	if d.Allowed || status != http.StatusOK {
		t.Fatalf("allowed %v, client status %d, want a deny answered 200: %s", d.Allowed, status, body)
	}
	var out []toolResult
	if batch {
		if err := json.Unmarshal(body, &out); err != nil {
			t.Fatalf("batch answer %s: %v", body, err)
		}
	} else {
		var one toolResult
		if err := json.Unmarshal(body, &one); err != nil {
			t.Fatalf("answer %s: %v", body, err)
		}
		out = append(out, one)
	}
	for _, r := range out {
		want := map[string]string{"code": d.Code(), "reason": d.Reason, "audit_id": d.AuditID}
		switch {
		case r.JSONRPC != "2.0":
			t.Errorf("answer %s: jsonrpc %q", body, r.JSONRPC)
		case r.Result != nil:
			if !r.Result.IsError || len(r.Result.Content) != 1 || r.Result.Content[0].Type != "text" ||
				!strings.Contains(r.Result.Content[0].Text, d.Reason) || mustJSON(r.Result.StructuredContent) != mustJSON(want) {
				t.Errorf("tool result %s, want isError, one text item naming %q, structuredContent %v", body, d.Reason, want)
			}
		case r.Error != nil:
			if r.Error.Code != binding.RPCCodeDenied || mustJSON(r.Error.Data) != mustJSON(want) {
				t.Errorf("error %s, want code %d and data %v", body, binding.RPCCodeDenied, want)
			}
		default:
			t.Errorf("answer %s has neither result nor error", body)
		}
	}
	return out
}

func TestMCPToolsCallLadder(t *testing.T) {
	e := mcpEnv(t, binding.ModeEnforce)
	b := e.record(preflight.OutcomePass, "", step("s1", "tool.shell", map[string]any{"cmd": "uptime"}))

	d := e.check(mcpPost(toolsCall(`7`, "tool.shell", `{"cmd":"uptime"}`, ""), nil))
	if d.Reason != preflight.ReasonPreflightRequired {
		t.Fatalf("no preflight: %+v", d)
	}
	r := mcpDeny(t, &d, false)
	if string(r[0].ID) != "7" || r[0].Result == nil || !strings.Contains(r[0].Result.Content[0].Text, "/v1/preflight") {
		t.Fatalf("deny without preflight: %+v", r[0])
	}

	d = e.check(mcpPost(toolsCall(`"a"`, "tool.shell", `{"cmd":"uptime"}`, b.PreflightID), map[string]string{binding.HeaderRequestID: "r1"}))
	if !d.Allowed || d.StepID != "s1" || d.PreflightID != b.PreflightID || d.ToolKind != "tool.shell" {
		t.Fatalf("preflighted call by _meta: %+v", d)
	}
	// Envoy's retry of the same request is the same allow.
	if d = e.check(mcpPost(toolsCall(`"a"`, "tool.shell", `{"cmd":"uptime"}`, b.PreflightID), map[string]string{binding.HeaderRequestID: "r1"})); !d.Allowed {
		t.Fatalf("retry: %+v", d)
	}
	d = e.check(mcpPost(toolsCall(`"b"`, "tool.shell", `{"cmd":"uptime"}`, b.PreflightID), map[string]string{binding.HeaderRequestID: "r2"}))
	if d.Reason != preflight.ReasonReplay {
		t.Fatalf("replay: %+v", d)
	}
	if r := mcpDeny(t, &d, false); string(r[0].ID) != `"b"` {
		t.Fatalf("replay answers id %s", r[0].ID)
	}

	b2 := e.record(preflight.OutcomePass, "", step("s1", "tool.shell", nil))
	d = e.check(mcpPost(toolsCall(`1`, "tool.shell", `{}`, ""), withID(b2.PreflightID, "r3")))
	if !d.Allowed || d.StepID != "s1" {
		t.Fatalf("preflighted call by header: %+v", d)
	}
	frames := e.decisionFrames(b2.AuditID)
	if len(frames) != 1 || frames[0].ToolKind != "tool.shell" || frames[0].Outcome != "allow" {
		t.Fatalf("decision frames %+v", frames)
	}
}

func TestMCPOtherMethodsPassTheLadder(t *testing.T) {
	e := mcpEnv(t, binding.ModeEnforce)
	bogus := map[string]string{binding.HeaderPreflightID: "not an id"}
	for name, body := range map[string]string{
		"initialize":   `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`,
		"tools/list":   `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`,
		"notification": `{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		"response":     `{"jsonrpc":"2.0","id":"srv-1","result":{}}`,
		"error answer": `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"x"}}`,
		"batch":        `[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","method":"notifications/progress"}]`,
	} {
		t.Run(name, func(t *testing.T) {
			d := e.check(mcpPost(body, bogus))
			if !d.Allowed || d.Reason != "policy: allowed" || d.AdvisoryReason != "" || d.ToolKind != "" {
				t.Fatalf("%s: %+v", body, d)
			}
			// Not gated: the gateway streams its answer unjudged.
			if d.Gated {
				t.Fatalf("%s: an allow marked gated, whose answer would be judged", body)
			}
		})
	}
}

func TestMCPMalformed(t *testing.T) {
	e := mcpEnv(t, binding.ModeAdvisory) // refused in every mode
	b := e.record(preflight.OutcomePass, "", step("s1", "tool.echo", nil))
	for name, tc := range map[string]struct {
		body    string
		headers map[string]string
		// answered says the deny is a JSON-RPC answer to an id.
		answered bool
	}{
		"empty":               {body: ``},
		"not JSON":            {body: `{"jsonrpc":`},
		"tool protocol body":  {body: `{"kind":"tool.echo","args":{}}`},
		"old version":         {body: `{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"tool.echo"}}`},
		"empty batch":         {body: `[]`},
		"nested batch":        {body: `[[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]]`, answered: false},
		"object id":           {body: `{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{"name":"tool.echo"}}`},
		"null request id":     {body: `{"jsonrpc":"2.0","id":null,"method":"tools/list"}`},
		"method not a string": {body: `{"jsonrpc":"2.0","id":1,"method":5}`, answered: true},
		"an id and no method": {body: `{"jsonrpc":"2.0","id":6}`, answered: true},
		"no params":           {body: `{"jsonrpc":"2.0","id":1,"method":"tools/call"}`, answered: true},
		"bad tool name":       {body: toolsCall("1", "tool echo", `{}`, ""), answered: true},
		"long tool name":      {body: toolsCall("1", strings.Repeat("a", 129), `{}`, ""), answered: true},
		"arguments array":     {body: toolsCall("1", "tool.echo", `[]`, ""), answered: true},
		"meta id a number":    {body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tool.echo","_meta":{"autonomy/preflight_id":5}}}`, answered: true},
		"two preflight ids": {body: toolsCall("1", "tool.echo", `{}`, b.PreflightID),
			headers: map[string]string{binding.HeaderPreflightID: "pf_" + strings.Repeat("0", 20)}, answered: true},
		"name spelt otherwise": {body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"Name":"tool.echo"}}`, answered: true},
		"duplicate name":       {body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tool.echo","name":"tool.shell"}}`, answered: true},
		"a value after it":     {body: toolsCall("7", "tool.echo", `{}`, "") + `{}`, answered: true},
		"id twice":             {body: `{"jsonrpc":"2.0","id":1,"ID":2,"method":"tools/call","params":{"name":"tool.echo"}}`},
		"method twice":         {body: `{"jsonrpc":"2.0","id":1,"method":"tools/list","METHOD":"tools/call","params":{"name":"tool.shell"}}`},
	} {
		t.Run(name, func(t *testing.T) {
			d := e.check(mcpPost(tc.body, tc.headers))
			if d.Allowed || d.Reason != "gate: malformed_tool_call" {
				t.Fatalf("%s: %+v", tc.body, d)
			}
			if tc.answered {
				mcpDeny(t, &d, false)
				return
			}
			if status, body := d.ClientDeny(); status != http.StatusForbidden || denyBody(t, body)["error"]["code"] != "malformed_tool_call" {
				t.Fatalf("unanswerable deny: %d %s", status, body)
			}
		})
	}
}

func TestMCPBatch(t *testing.T) {
	e := mcpEnv(t, binding.ModeEnforce)
	one := e.record(preflight.OutcomePass, "", step("s1", "tool.shell", nil))
	list := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	note := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9}}`

	d := e.check(mcpPost(`[`+list+`,`+note+`,`+toolsCall("2", "tool.shell", `{}`, "")+`]`, nil))
	if d.Reason != preflight.ReasonPreflightRequired {
		t.Fatalf("batch with an unpreflighted call: %+v", d)
	}
	r := mcpDeny(t, &d, true)
	if len(r) != 2 || string(r[0].ID) != "1" || r[0].Error == nil || string(r[1].ID) != "2" || r[1].Result == nil {
		t.Fatalf("batch answer %+v", r)
	}

	// Two calls on a one-step preflight in one batch are two calls, not a
	// retry of one: the second is a replay and the batch is denied whole.
	call := func(id, pf string) string { return toolsCall(id, "tool.shell", `{}`, pf) }
	d = e.check(mcpPost(`[`+call("3", one.PreflightID)+`,`+call("4", one.PreflightID)+`]`, map[string]string{binding.HeaderRequestID: "rb"}))
	if d.Reason != preflight.ReasonReplay {
		t.Fatalf("two calls on one step: %+v", d)
	}
	mcpDeny(t, &d, true)

	// Two requests with one id (1 and 1.0 are one id) cannot be told apart
	// by their answers: the batch is refused whole.
	for _, ids := range [][2]string{{"5", "5"}, {"5", "5.0"}, {`"a"`, `"a"`}} {
		echo := func(id string) string { return toolsCall(id, "tool.echo", `{}`, "") }
		if d = e.check(mcpPost(`[`+echo(ids[0])+`,`+echo("7")+`]`, nil)); !d.Allowed {
			t.Fatalf("a batch with ids %s and 7: %+v, want it allowed", ids[0], d)
		}
		d = e.check(mcpPost(`[`+echo(ids[0])+`,`+echo(ids[1])+`]`, nil))
		if d.Allowed || d.Reason != "gate: malformed_tool_call" {
			t.Fatalf("a batch with ids %v: %+v, want it refused whole", ids, d)
		}
	}

	two := e.record(preflight.OutcomePass, "", step("s1", "tool.shell", nil), step("s2", "tool.shell", nil))
	d = e.check(mcpPost(`[`+list+`,`+call("4", two.PreflightID)+`,`+call("6", two.PreflightID)+`]`, map[string]string{binding.HeaderRequestID: "rc"}))
	if !d.Allowed || d.PreflightID != two.PreflightID || d.ToolKind != "tool.shell" {
		t.Fatalf("two calls on two steps: %+v", d)
	}
	if frames := e.decisionFrames(two.AuditID); len(frames) != 2 || frames[0].RequestID != "rc/1" || frames[1].RequestID != "rc/2" {
		t.Fatalf("frames %+v", frames)
	}

	// A batch Envoy could not buffer whole is refused, whatever is in it.
	d = e.check(mcpPost(`[`+list+`]`, map[string]string{"x-envoy-auth-partial-body": "true"}))
	if d.Allowed || d.Reason != "gate: partial_body" {
		t.Fatalf("partial batch: %+v", d)
	}
}

func TestMCPAdvisory(t *testing.T) {
	e := mcpEnv(t, binding.ModeAdvisory)
	d := e.check(mcpPost(toolsCall("1", "tool.shell", `{}`, ""), nil))
	if !d.Allowed || d.AdvisoryReason != preflight.ReasonPreflightRequired {
		t.Fatalf("advisory: %+v", d)
	}
	d = e.check(mcpPost(toolsCall("1", "tool.blocked", `{}`, ""), nil))
	if d.Reason != "policy: blocked_by_operator" {
		t.Fatalf("policy deny in advisory: %+v", d)
	}
	mcpDeny(t, &d, false)
}

// TestMCPPolicyInput: the policy sees the JSON-RPC method as input.mcp.method.
func TestMCPPolicyInput(t *testing.T) {
	b := bundletest.Load(t, map[string]string{"policy.rego": `package autonomy

import rego.v1

allow if input.mcp.method != "tools/list"

deny_reason := sprintf("no %s", [input.mcp.method])
`, "data.yaml": "autonomy:\n  capabilities:\n    tool.echo: { zones: [\"*\"] }\n"}, nil)
	for name, pol := range map[string]binding.Policy{"value input": b, "map input": mapOnly{b}} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, b, binding.ModeEnforce, func(o *binding.Options) { o.Protocol, o.Path = binding.ProtocolMCP, "/mcp" })
			e.setPolicy(pol)
			d := e.check(mcpPost(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, nil))
			if d.Reason != "policy: no_tools_list" {
				t.Fatalf("tools/list: %+v", d)
			}
			if r := mcpDeny(t, &d, false); r[0].Error == nil {
				t.Fatalf("tools/list deny is not a JSON-RPC error: %+v", r)
			}
			if d = e.check(mcpPost(toolsCall("2", "tool.echo", `{}`, ""), nil)); !d.Allowed {
				t.Fatalf("tools/call: %+v", d)
			}
		})
	}
}

// mapOnly hides the bundle's AllowValue, so the gate takes its Go map path.
type mapOnly struct{ binding.Policy }

// TestMCPUnreadableCallNamesItsPreflight: a tools/call refused as
// unreadable names the preflight id its params._meta gives, and joins that
// preflight's audit, as one giving it in the header does.
func TestMCPUnreadableCallNamesItsPreflight(t *testing.T) {
	e := mcpEnv(t, binding.ModeEnforce)
	b := e.record(preflight.OutcomePass, "", step("s1", "tool.shell", nil))
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tool.shell","arguments":"x","_meta":{"autonomy/preflight_id":` + mustJSON(b.PreflightID) + `}}}`
	d := e.check(mcpPost(body, nil))
	if d.Allowed || d.Reason != "gate: malformed_tool_call" || d.PreflightID != b.PreflightID || d.AuditID != b.AuditID {
		t.Fatalf("%+v, want a malformed_tool_call deny naming %s under %s", d, b.PreflightID, b.AuditID)
	}
}

// TestMCPBatchOutcomes: every tools/call of an allowed batch ran on the
// server, so each gets its outcome frame, also those after the first one
// whose answer breaks a postcondition; that one answers the batch.
func TestMCPBatchOutcomes(t *testing.T) {
	b := postconditionBundle(t, "tool.echo", "result.result.content[0].text != 'bad'")
	e := newEnv(t, b, binding.ModeEnforce, func(o *binding.Options) { o.Protocol, o.Path = binding.ProtocolMCP, "/mcp" })
	echo := func(id string) string { return toolsCall(id, "tool.echo", `{}`, "") }
	req := mcpPost(`[`+echo("1")+`,`+echo("2")+`,`+echo("3")+`]`, map[string]string{binding.HeaderRequestID: "rb"})
	d := e.check(req)
	if !d.Allowed {
		t.Fatalf("batch: %+v, want it allowed", d)
	}
	answer := func(id, text string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[{"type":"text","text":` + mustJSON(text) + `}]}}`
	}
	v := e.gate.Outcome(context.Background(), &binding.Exchange{Request: req, Decision: &d,
		Response: binding.Response{Status: http.StatusOK, Body: []byte(`[` + answer("1", "ok") + `,` + answer("2", "bad") + `,` + answer("3", "ok") + `]`)}})
	if v.Release || v.Status != http.StatusBadGateway {
		t.Fatalf("verdict %+v, want the batch refused with 502", v)
	}
	frames, err := e.db.AuditFramesOf(context.Background(), d.AuditID, []string{wal.KindOutcome})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range frames {
		var rid, outcome string
		f.Attr("request_id", &rid)
		f.Attr("outcome", &outcome)
		got = append(got, rid+"="+outcome)
	}
	if strings.Join(got, " ") != "rb/0=ok rb/1=violated rb/2=ok" {
		t.Fatalf("outcome frames %v, want one per tools/call", got)
	}
}

// TestMCPBatchRefusedWholeSpendsNothing: a batch whose later call would be
// refused is refused before an earlier call consumes its step, and each
// answer says which call was refused.
func TestMCPBatchRefusedWholeSpendsNothing(t *testing.T) {
	e := mcpEnv(t, binding.ModeEnforce)
	one := e.record(preflight.OutcomePass, "", step("s1", "tool.shell", nil))
	call := toolsCall("1", "tool.shell", `{}`, one.PreflightID)
	d := e.check(mcpPost(`[`+call+`,`+toolsCall("2", "tool.shell", `{}`, "")+`]`, map[string]string{binding.HeaderRequestID: "rd"}))
	if d.Reason != preflight.ReasonPreflightRequired {
		t.Fatalf("batch with an unpreflighted second call: %+v", d)
	}
	r := mcpDeny(t, &d, true)
	if len(r) != 2 || !strings.Contains(r[0].Result.Content[0].Text, "its message 1 ") ||
		strings.Contains(r[1].Result.Content[0].Text, "its message") {
		t.Fatalf("batch answers %+v: the first should name message 1 as the refused one, the second be its own refusal", r)
	}
	if frames := e.decisionFrames(one.AuditID); len(frames) != 0 {
		t.Fatalf("the refused batch recorded decisions under the preflight: %+v", frames)
	}
	if d = e.check(mcpPost(call, map[string]string{binding.HeaderRequestID: "re"})); !d.Allowed {
		t.Fatalf("the first call alone after the refused batch: %+v, want its step still free", d)
	}
}

// TestMCPOutcomeOfAnSSEAnswer: a tools/call answered as an SSE stream (the
// SDKs' servers' default) is judged on the event that answers its id, not
// on null: progress notifications before it are other events.
func TestMCPOutcomeOfAnSSEAnswer(t *testing.T) {
	b := postconditionBundle(t, "tool.echo", "result.result.content[0].text != 'bad'")
	e := newEnv(t, b, binding.ModeEnforce, func(o *binding.Options) { o.Protocol, o.Path = binding.ProtocolMCP, "/mcp" })
	stream := func(id, text string) string {
		return ": keep-alive\r\n" +
			"event: message\r\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1}}\r\n\r\n" +
			"event: message\nid: 7\ndata: {\"jsonrpc\":\"2.0\",\"id\":" + id + ",\n" +
			"data: \"result\":{\"content\":[{\"type\":\"text\",\"text\":" + mustJSON(text) + "}]}}\n\n"
	}
	for i, tc := range []struct {
		text, body string
		release    bool
		reason     string
	}{
		{text: "ok", release: true, reason: "outcome: ok"},
		{text: "bad", release: false, reason: "clause: postcondition_violated"},
	} {
		req := mcpPost(toolsCall("1", "tool.echo", `{}`, ""), map[string]string{binding.HeaderRequestID: "sse-" + strconv.Itoa(i)})
		d := e.check(req)
		v := e.gate.Outcome(context.Background(), &binding.Exchange{Request: req, Decision: &d,
			Response: binding.Response{Status: http.StatusOK, Body: []byte(stream("1", tc.text))}})
		if v.Release != tc.release || v.Attrs.Reason != tc.reason || !v.Attrs.ResultJSON {
			t.Errorf("answer %q: release %v, reason %s, result JSON %v; want %v, %s, true", tc.text, v.Release, v.Attrs.Reason, v.Attrs.ResultJSON, tc.release, tc.reason)
		}
	}
	// Another id's answer, or two answers to this id, is no answer: result
	// is null and the postcondition cannot hold. So is a stream the MCP
	// SDKs read otherwise than the gate would: the answer a client takes
	// could then be another than the one judged.
	answerData := func(id, text string) string {
		return "{\"jsonrpc\":\"2.0\",\"id\":" + id + ",\"result\":{\"content\":[{\"type\":\"text\",\"text\":" + mustJSON(text) + "}]}}"
	}
	answer := func(event, id, text string) string { return event + "data: " + answerData(id, text) + "\n\n" }
	for name, body := range map[string]string{
		"another id":     stream("2", "ok"),
		"answered twice": stream("1", "ok") + stream("1", "ok"),
		// The SDK reads id 1.5 as 1: its answer is the bad one.
		"id not an integer": answer("", "1.5", "bad") + answer("", "1", "ok"),
		"id past 2^53":      answer("", "9007199254740993", "bad") + answer("", "1", "ok"),
		// The SDK ends lines at LF only: for it the CRs hide the good
		// answer in a comment and the bad one's line starts an event;
		// a reader that ends lines at CR too sees the reverse.
		"a lone CR": ": a\rdata: x\n" + answer("", "1", "bad") + ": c\rdata: " + answerData("1", "ok") + "\r\r\n",
		// The SDK reads only events named message.
		"another event name": answer("event: other\n", "1", "ok"),
		// The SDK aborts the stream at a line with no colon.
		"a line with no colon": "data\n\n" + answer("", "1", "ok"),
		// JSON-RPC forbids both: the SDK hands its caller the error,
		// the gate would judge the result.
		"result and error": "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-1,\"message\":\"unjudged\"}," +
			"\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}]}}\n\n",
		// The same answered as plain JSON, not as a stream.
		"result and error, not a stream": "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-1,\"message\":\"unjudged\"}," +
			"\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}]}}",
	} {
		req := mcpPost(toolsCall("1", "tool.echo", `{}`, ""), map[string]string{binding.HeaderRequestID: "sse-" + name})
		d := e.check(req)
		v := e.gate.Outcome(context.Background(), &binding.Exchange{Request: req, Decision: &d,
			Response: binding.Response{Status: http.StatusOK, Body: []byte(body)}})
		if v.Release || v.Attrs.ResultJSON {
			t.Errorf("%s: release %v, result JSON %v; want refused on a null result", name, v.Release, v.Attrs.ResultJSON)
		}
	}
}
