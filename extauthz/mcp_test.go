package extauthz_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/extauthz"
	"github.com/contractrefine/autonomy/preflight"
)

// mcpCheck is a CheckRequest as Envoy's ext_authz filter sends it for an MCP
// client's POST /mcp over Streamable HTTP with with_request_body: the body
// as a string, or as raw_body with pack_as_bytes.
func mcpCheck(body, preflightID, requestID string, raw bool) *authv3.CheckRequest {
	req := envoyCheck("", nil, preflightID, requestID)
	h := req.Attributes.Request.Http
	h.Path, h.Headers[":path"] = "/mcp", "/mcp"
	h.Headers["accept"] = "application/json, text/event-stream"
	h.Headers["mcp-session-id"] = "8f1c3a"
	h.Headers["mcp-protocol-version"] = "2025-06-18"
	h.Headers["content-length"] = fmt.Sprint(len(body))
	h.RawBody, h.Body, h.Size = nil, "", int64(len(body))
	if raw {
		h.RawBody = []byte(body)
	} else {
		h.Body = body
	}
	return req
}

func mcpCall(id, name, meta string) string {
	m := ""
	if meta != "" {
		m = `,"_meta":{"autonomy/preflight_id":"` + meta + `"}`
	}
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"` + name + `","arguments":{"cmd":"uptime"}` + m + `}}`
}

// mcpAnswer decodes a denied response's body as JSON-RPC answers.
type mcpAnswer struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  *struct {
		Content []struct {
			Type, Text string
		} `json:"content"`
		StructuredContent struct {
			Code    string `json:"code"`
			Reason  string `json:"reason"`
			AuditID string `json:"audit_id"`
		} `json:"structuredContent"`
		IsError bool `json:"isError"`
	} `json:"result"`
	Error *struct {
		Code int `json:"code"`
	} `json:"error"`
}

// wantMCPDeny checks a denied CheckResponse that Envoy hands the MCP
// client: PERMISSION_DENIED, HTTP 200, JSON, and the JSON-RPC answers.
func wantMCPDeny(t *testing.T, resp *authv3.CheckResponse, reason string, batch bool) []mcpAnswer {
	t.Helper()
	dr := resp.GetDeniedResponse()
	if codes.Code(resp.GetStatus().GetCode()) != codes.PermissionDenied || dr == nil || dr.GetStatus().GetCode() != typev3.StatusCode_OK {
		t.Fatalf("want PERMISSION_DENIED with HTTP 200, got %v", resp)
	}
	if h := headerValues(dr.GetHeaders()); h["content-type"] != "application/json" {
		t.Fatalf("deny headers %v", h)
	}
	body := []byte(dr.GetBody())
	var out []mcpAnswer
	var err error
	if batch {
		err = json.Unmarshal(body, &out)
	} else {
		out = make([]mcpAnswer, 1)
		err = json.Unmarshal(body, &out[0])
	}
	if err != nil {
		t.Fatalf("deny body %s: %v", body, err)
	}
	for _, a := range out {
		if a.Result == nil {
			continue
		}
		sc := a.Result.StructuredContent
		if !a.Result.IsError || len(a.Result.Content) != 1 || !strings.Contains(a.Result.Content[0].Text, reason) ||
			sc.Reason != reason || sc.AuditID == "" || !strings.HasSuffix(reason, ": "+sc.Code) {
			t.Fatalf("tool result %s, want isError naming %q", body, reason)
		}
		if md := metadata(resp); md["audit_id"] != sc.AuditID || md["reason"] != reason {
			t.Fatalf("dynamic metadata %v", md)
		}
	}
	return out
}

// TestGRPCCheckMCP feeds the Check the MCP messages Envoy forwards, with the
// body both ways Envoy packs it.
func TestGRPCCheckMCP(t *testing.T) {
	for _, raw := range []bool{false, true} {
		t.Run(fmt.Sprintf("raw_body %v", raw), func(t *testing.T) {
			e := newEnv(t, binding.ModeEnforce, func(o *binding.Options) { o.Protocol, o.Path = binding.ProtocolMCP, "/mcp" })
			c := serveGRPC(t, e.gate)
			b := e.record("tool.shell", map[string]any{"cmd": "uptime"})

			for name, body := range map[string]string{
				"initialize":  `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"agent","version":"1"}}}`,
				"initialized": `{"jsonrpc":"2.0","method":"notifications/initialized"}`,
				"tools/list":  `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`,
				"list batch":  `[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}]`,
				"ping answer": `{"jsonrpc":"2.0","id":"s-1","result":{}}`,
			} {
				resp := check(t, c, mcpCheck(body, "", "r-"+name, raw))
				if codes.Code(resp.GetStatus().GetCode()) != codes.OK {
					t.Fatalf("%s: %v", name, resp)
				}
			}

			a := wantMCPDeny(t, check(t, c, mcpCheck(mcpCall("2", "tool.shell", ""), "", "r1", raw)), preflight.ReasonPreflightRequired, false)
			if string(a[0].ID) != "2" || a[0].Result == nil {
				t.Fatalf("answer %+v", a[0])
			}
			resp := check(t, c, mcpCheck(mcpCall("3", "tool.shell", b.PreflightID), "", "r2", raw))
			wantAllowed(t, resp, b.AuditID, "enforce", preflight.ReasonPassed, "")
			a = wantMCPDeny(t, check(t, c, mcpCheck(mcpCall(`"x"`, "tool.shell", ""), b.PreflightID, "r3", raw)), preflight.ReasonReplay, false)
			if string(a[0].ID) != `"x"` {
				t.Fatalf("replay answers id %s", a[0].ID)
			}

			batch := `[{"jsonrpc":"2.0","id":4,"method":"tools/list"},` + mcpCall("5", "tool.shell", "") + `,{"jsonrpc":"2.0","method":"notifications/cancelled"}]`
			a = wantMCPDeny(t, check(t, c, mcpCheck(batch, "", "r4", raw)), preflight.ReasonPreflightRequired, true)
			if len(a) != 2 || string(a[0].ID) != "4" || a[0].Error == nil || a[0].Error.Code != binding.RPCCodeDenied || string(a[1].ID) != "5" || a[1].Result == nil {
				t.Fatalf("batch answers %+v", a)
			}

			// Not JSON-RPC: no id to answer, so the §5.5 deny.
			for _, body := range []string{`{"kind":"tool.shell","args":{}}`, `not json`, `[]`, `{"jsonrpc":"2.0"}`} {
				wantDenied(t, check(t, c, mcpCheck(body, "", "r5", raw)), codes.PermissionDenied, typev3.StatusCode_Forbidden, "gate: malformed_tool_call")
			}
		})
	}
}

// TestHTTPCheckMCP: the HTTP check answers an MCP deny with the JSON-RPC
// body, but keeps 403: Envoy's http_service and forward-auth proxies read
// a 200 as an allow.
func TestHTTPCheckMCP(t *testing.T) {
	e := newEnv(t, binding.ModeEnforce, func(o *binding.Options) { o.Protocol, o.Path = binding.ProtocolMCP, "/mcp" })
	srv := httptest.NewServer(extauthz.NewHTTPHandler(e.gate, 1<<20))
	t.Cleanup(srv.Close)
	post := func(body string) (*http.Response, []byte) {
		resp, err := http.Post(srv.URL+extauthz.HTTPPrefix+"/mcp", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	resp, body := post(mcpCall("9", "tool.shell", ""))
	var a mcpAnswer
	if err := json.Unmarshal(body, &a); err != nil || resp.StatusCode != http.StatusForbidden || a.Result == nil || !a.Result.IsError ||
		a.Result.StructuredContent.Code != "preflight_required" || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("HTTP check: %d %s (%v)", resp.StatusCode, body, err)
	}
	if resp, body = post(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("tools/list: %d %s", resp.StatusCode, body)
	}
}
