package binding

import (
	"net/http"
	"testing"
)

// BenchmarkReadCall measures reading a call's kind, args and preflight id
// from its body: a /v1/tool body against the MCP tools/call of the same
// call, the part of a Check the protocol changes (BenchmarkMCPCheck in
// extauthz measures whole Checks).
func BenchmarkReadCall(b *testing.B) {
	for name, tc := range map[string]struct {
		protocol Protocol
		path     string
		body     string
	}{
		"tool": {ProtocolTool, "/v1/tool", `{"kind":"tool.echo","args":{"msg":"hi"}}`},
		"mcp": {ProtocolMCP, "/mcp", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"tool.echo","arguments":{"msg":"hi"},` +
			`"_meta":{"autonomy/preflight_id":"pf_0123456789abcdefghij"}}}`},
	} {
		b.Run(name, func(b *testing.B) {
			g := New(Options{Protocol: tc.protocol, Path: tc.path})
			r := &Request{Method: http.MethodPost, Path: tc.path, Body: []byte(tc.body),
				Headers: map[string]string{HeaderPreflightID: "pf_0123456789abcdefghij"}}
			b.ReportAllocs()
			for b.Loop() {
				c := &call{req: r, gated: true}
				if err := g.readCall(c); err != nil || c.kind != "tool.echo" {
					b.Fatal(err, c.kind)
				}
			}
		})
	}
}

// BenchmarkDenyBody measures the deny body of each protocol.
func BenchmarkDenyBody(b *testing.B) {
	d := Decision{Status: 403, Reason: "contract: preflight_replay", AuditID: "au_0123456789abcdefghij"}
	b.Run("tool", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, body := d.ClientDeny(); len(body) == 0 {
				b.Fatal("empty")
			}
		}
	})
	d.rpc = []rpcMessage{{id: "7", method: MCPToolsCall}}
	b.Run("mcp", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, body := d.ClientDeny(); len(body) == 0 {
				b.Fatal("empty")
			}
		}
	})
}
