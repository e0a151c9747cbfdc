package extauthz

import (
	"context"
	"fmt"
	"net/http"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"

	"github.com/contractrefine/autonomy/binding"
)

// mcpCheckRequest is the CheckRequest of an MCP tools/call of kind with
// the same args as benchCheckRequest's, the preflight id in params._meta.
func mcpCheckRequest(kind, preflightID string, i int) *authv3.CheckRequest {
	h := map[string]string{"content-type": "application/json", "accept": "application/json, text/event-stream",
		"mcp-session-id": "bench-session", "x-request-id": fmt.Sprintf("req-%d", i)}
	meta := ""
	if preflightID != "" {
		meta = `,"_meta":{"autonomy/preflight_id":"` + preflightID + `"}`
	}
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s","arguments":{"msg":"hi"}%s}}`, i, kind, meta)
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: http.MethodPost, Path: "/mcp", Headers: h, Body: body}}}}
}

// BenchmarkMCPCheck measures an MCP tools/call Check against a /v1/tool
// Check of the same call, in one run, over gRPC on loopback by one caller:
// a preflighted call that consumes its step, and a call without a
// preflight that is denied. cpu-ns/op is the process's user and system
// CPU per call (client and server both): the goal is MCP within 1.1 × of
// /v1/tool.
func BenchmarkMCPCheck(b *testing.B) {
	mcp := func(o *binding.Options) { o.Protocol, o.Path = binding.ProtocolMCP, "/mcp" }
	for _, c := range []struct {
		name    string
		preflit bool
		code    codes.Code
	}{{"consume", true, codes.OK}, {"no_header", false, codes.PermissionDenied}} {
		for _, proto := range []string{"tool", "mcp"} {
			b.Run(c.name+"/"+proto, func(b *testing.B) {
				mk, kind := benchCheckRequest, "tool.echo"
				var opts []func(*binding.Options)
				if proto == "mcp" {
					mk, opts = mcpCheckRequest, append(opts, mcp)
				}
				n := 0
				if c.preflit {
					n = b.N
				} else {
					kind = "tool.shell"
				}
				gate, idList := benchGate(b, n, opts...)
				client := benchServe(b, gate)
				reqs := make([]*authv3.CheckRequest, b.N)
				for i := range reqs {
					id := ""
					if c.preflit {
						id = idList[i]
					}
					reqs[i] = mk(kind, id, i)
				}
				ctx := context.Background()
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := processCPU()
				for i := range b.N {
					resp, err := client.Check(ctx, reqs[i])
					if err != nil || codes.Code(resp.GetStatus().GetCode()) != c.code {
						b.Fatalf("call %d: %v %v", i, resp.GetStatus(), err)
					}
				}
				b.ReportMetric(float64((processCPU()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// processCPU is the user and system CPU the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
