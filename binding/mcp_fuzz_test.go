package binding

import (
	"encoding/json"
	"testing"

	"github.com/contractrefine/autonomy/preflight"
)

// FuzzReadMCP feeds the JSON-RPC reader arbitrary bodies. It must never
// panic; a tools/call it accepts must be the call a Go MCP server reads
// from the same bytes (encoding/json matches member names without regard
// to case, and keeps the last of repeated ones), with a valid tool name
// and an arguments object; and every answer the gate would give, for one
// message or a batch, must be JSON.
func FuzzReadMCP(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_weather","arguments":{"city":"Oslo"},"_meta":{"autonomy/preflight_id":"pf_0123456789abcdef"}}}`,
		`{"jsonrpc":"2.0","id":"a","method":"tools/list"}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"x"}}]`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","NAME":"b"}}`,
		`{"jsonrpc":"2.0","id":1e400,"method":"tools/call","params":{"name":"a"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":[]}}`,
		`{"kind":"tool.echo","args":{}}`,
		``, `[]`, `[[]]`, `"\ud800"`,
	} {
		f.Add([]byte(s), "")
		f.Add([]byte(s), "pf_0123456789abcdef")
	}
	g := New(Options{Protocol: ProtocolMCP, Path: "/mcp"})
	f.Fuzz(func(t *testing.T, body []byte, headerID string) {
		headers := map[string]string{}
		if headerID != "" {
			headers[HeaderPreflightID] = headerID
		}
		r := &Request{Method: "POST", Path: "/mcp", Headers: headers, Body: body}
		if msgs := g.batchOf(r); msgs != nil {
			rpc := make([]rpcMessage, len(msgs))
			for i, m := range msgs {
				rpc[i] = peekRPC(m)
			}
			answerIsJSON(t, rpc, true)
			return
		}
		c := &call{req: r, gated: true}
		err := g.readMCP(c)
		answerIsJSON(t, []rpcMessage{c.rpc}, false)
		if err != nil || c.rpc.method != MCPToolsCall {
			return
		}
		if !c.gated || !preflight.KindRuleMCP.Valid(c.kind) || c.argsMap == nil {
			t.Fatalf("accepted tools/call %q: kind %q, args %v", body, c.kind, c.argsMap)
		}
		var goRead struct {
			Method string
			Params struct {
				Name      string
				Arguments map[string]any
			}
		}
		if err := json.Unmarshal(body, &goRead); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", body, err)
		}
		if goRead.Method != MCPToolsCall || goRead.Params.Name != c.kind {
			t.Fatalf("gate read tools/call of %q, a Go server %s of %q: %q", c.kind, goRead.Method, goRead.Params.Name, body)
		}
	})
}

func answerIsJSON(t *testing.T, rpc []rpcMessage, batch bool) {
	d := Decision{Status: 403, Reason: preflight.ReasonMalformedToolCall, AuditID: "au_fuzz", rpc: rpc, rpcBatch: batch}
	if _, body := d.ClientDeny(); !json.Valid(body) {
		t.Fatalf("answer %q is not JSON", body)
	}
}
