package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/contractrefine/autonomy/internal/mcpexample"
)

// This file proves docs/MCP.md against the real binary: an MCP server built
// with the official Go SDK behind the built-in gateway (gate.protocol:
// mcp), and the SDK's own client in front of it. Its helpers carry the mcp
// prefix.

// mcpHeaderTransport adds X-Autonomy-Preflight-Id to every request while
// id holds one, as an agent framework that sets headers per call would.
type mcpHeaderTransport struct{ id atomic.Value }

func (h *mcpHeaderTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if id, _ := h.id.Load().(string); id != "" {
		r = r.Clone(r.Context())
		r.Header.Set("X-Autonomy-Preflight-Id", id)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// mcpServe starts the example MCP server and `autonomy serve` in enforce
// mode with gate.protocol mcp and the gateway in front of it.
func mcpServe(t *testing.T, jsonResponse bool) (*Server, *mcpexample.Server) {
	t.Helper()
	upstream := mcpexample.New(mcpexample.Options{JSONResponse: jsonResponse})
	up := httptest.NewServer(upstream)
	t.Cleanup(up.Close)
	cfg := filepath.Join(t.TempDir(), "autonomy.yaml")
	if err := os.WriteFile(cfg, []byte("gate:\n  protocol: mcp\n  path: /mcp\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := StartServer(t, ServeOptions{Mode: "enforce", Config: cfg,
		Args: []string{"--upstream", up.URL, "--gateway-addr", "127.0.0.1:0"}})
	return s, upstream
}

// mcpPreflight preflights a one-step plan calling tool.shell with cmd and
// returns the preflight and audit ids.
func mcpPreflight(t *testing.T, s *Server, session, cmd string) (string, string) {
	t.Helper()
	status, body, _ := PostJSON(t, s.URL("/v1/preflight"), map[string]any{
		"intent": map[string]any{"summary": "notify on-call", "plan_hash": "mcp-plan-" + session},
		"plan": map[string]any{"steps": []any{map[string]any{"id": "s1", "kind": "tool.shell", "zone": "ops",
			"args": map[string]any{"cmd": cmd}, "provenance": map[string]string{"cmd": "literal"}}}},
		"context": map[string]any{"actor": map[string]any{"id": "user:agent", "session_id": session},
			"attestation": map[string]any{"node_id": "edge-7", "issued_at": time.Now().UTC().Format(time.RFC3339)}},
	})
	var d struct {
		PreflightID string `json:"preflight_id"`
		AuditID     string `json:"audit_id"`
		Outcome     string `json:"outcome"`
	}
	if err := json.Unmarshal(body, &d); status != http.StatusOK || err != nil || d.Outcome != "pass" {
		t.Fatalf("preflight: %d %s", status, body)
	}
	return d.PreflightID, d.AuditID
}

// mcpText is the text of a tool result's one text item.
func mcpText(t *testing.T, r *mcp.CallToolResult) string {
	t.Helper()
	if len(r.Content) != 1 {
		t.Fatalf("result content %v", r.Content)
	}
	tc, ok := r.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("result content %T", r.Content[0])
	}
	return tc.Text
}

// mcpWantDeny checks a deny the client hands its model: an error result
// that says the reason and carries {code, reason, audit_id}.
func mcpWantDeny(t *testing.T, r *mcp.CallToolResult, reason, advice string) string {
	t.Helper()
	text := mcpText(t, r)
	sc, _ := json.Marshal(r.StructuredContent)
	var data struct {
		Code    string `json:"code"`
		Reason  string `json:"reason"`
		AuditID string `json:"audit_id"`
	}
	_ = json.Unmarshal(sc, &data)
	if !r.IsError || !strings.Contains(text, reason) || !strings.Contains(text, advice) ||
		data.Reason != reason || !strings.HasSuffix(reason, ": "+data.Code) || data.AuditID == "" {
		t.Fatalf("want a deny result naming %q and %q, got isError %v, text %q, structuredContent %s", reason, advice, r.IsError, text, sc)
	}
	return data.AuditID
}

func TestMCPThroughTheGateway(t *testing.T) {
	for _, jsonResponse := range []bool{true, false} {
		t.Run(map[bool]string{true: "JSON answers", false: "SSE answers"}[jsonResponse], func(t *testing.T) {
			s, upstream := mcpServe(t, jsonResponse)
			for _, via := range []string{"_meta", "header"} {
				t.Run("preflight id in "+via, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
					defer cancel()
					ht := &mcpHeaderTransport{}
					client := mcp.NewClient(&mcp.Implementation{Name: "e2e-agent", Version: "1.0.0"}, nil)
					// initialize and its notification pass the gate untouched.
					cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + s.GatewayAddr + mcpexample.Path,
						HTTPClient: &http.Client{Transport: ht}, DisableStandaloneSSE: jsonResponse}, nil)
					if err != nil {
						t.Fatalf("connect through the gateway: %v", err)
					}
					defer cs.Close()
					tools, err := cs.ListTools(ctx, nil)
					if err != nil || len(tools.Tools) != 2 {
						t.Fatalf("tools/list through the gateway: %v %v", tools, err)
					}
					cmd := "notify on-call " + via
					args := map[string]any{"cmd": cmd}
					before := upstream.Calls()

					r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "tool.shell", Arguments: args})
					if err != nil {
						t.Fatalf("unpreflighted call: %v (a deny must reach the client as a tool result)", err)
					}
					mcpWantDeny(t, r, "contract: preflight_required", "/v1/preflight")

					id, auditID := mcpPreflight(t, s, "mcp-"+via+fmt.Sprint(jsonResponse), cmd)
					call := &mcp.CallToolParams{Name: "tool.shell", Arguments: args}
					if via == "header" {
						ht.id.Store(id)
					} else {
						call.Meta = mcp.Meta{"autonomy/preflight_id": id}
					}
					r, err = cs.CallTool(ctx, call)
					if err != nil || r.IsError || mcpText(t, r) != "would run: "+cmd {
						t.Fatalf("preflighted call: %v %+v", err, r)
					}
					r, err = cs.CallTool(ctx, call)
					if err != nil {
						t.Fatalf("replay: %v", err)
					}
					if got := mcpWantDeny(t, r, "contract: preflight_replay", "preflight again"); got != auditID {
						t.Fatalf("replay deny names audit id %s, want the preflight's %s", got, auditID)
					}
					if n := upstream.Calls() - before; n != 1 {
						t.Fatalf("%d calls reached the MCP server, want the one allowed", n)
					}
					// initialize, tools/list and the rest still work on the session.
					if _, err := cs.ListTools(ctx, nil); err != nil {
						t.Fatalf("tools/list after the denies: %v", err)
					}
				})
			}
		})
	}
}

// TestDemoMCP runs `autonomy demo contract-refine --mcp`: the story over
// MCP, in-process, against the example MCP server.
func TestDemoMCP(t *testing.T) {
	t.Parallel()
	res := RunAutonomy(t, "demo", "contract-refine", "--mcp")
	if res.Code != 0 || !strings.Contains(res.Stdout, "All 6 steps behaved.") ||
		!strings.Contains(res.Stdout, "gate.protocol mcp") || !strings.Contains(res.Stdout, "contract: preflight_replay") {
		t.Fatalf("demo --mcp exited %d:\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
}

// TestMCPBatchThroughTheGateway: a JSON-RPC batch the gate allows reaches
// the MCP server and its answer the client; of its messages only the
// tools/call is judged, under its own decision (its preflight's audit id).
func TestMCPBatchThroughTheGateway(t *testing.T) {
	s, upstream := mcpServe(t, true)
	post := func(body string, header map[string]string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "http://"+s.GatewayAddr+mcpexample.Path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := post(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`, nil)
	session := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || session == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	h := map[string]string{"Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-03-26"}
	if resp, body = post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, h); resp.StatusCode >= 300 {
		t.Fatalf("initialized: %d %s", resp.StatusCode, body)
	}
	id, auditID := mcpPreflight(t, s, "mcp-batch", "page the on-call")
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"tool.shell","arguments":{"cmd":"page the on-call"},"_meta":{"autonomy/preflight_id":"` + id + `"}}}`
	before := upstream.Calls()
	resp, body = post(`[{"jsonrpc":"2.0","id":1,"method":"tools/list"},`+call+`]`, h)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"would run: page the on-call"`) || !strings.HasPrefix(body, "[") {
		t.Fatalf("an allowed batch: %d %s, want the server's answers", resp.StatusCode, body)
	}
	if n := upstream.Calls() - before; n != 1 {
		t.Fatalf("%d tool calls reached the server, want 1", n)
	}
	status, joined := getBody(t, s.URL("/v1/audit/"+auditID+"?include=outcome"))
	var join struct {
		Frames []struct {
			Kind  string         `json:"kind"`
			Attrs map[string]any `json:"attrs"`
		} `json:"frames"`
	}
	if err := json.Unmarshal(joined, &join); status != http.StatusOK || err != nil {
		t.Fatalf("audit join: %d %s", status, joined)
	}
	var outcomes []map[string]any
	for _, f := range join.Frames {
		if f.Kind == "autonomy.outcome" {
			outcomes = append(outcomes, f.Attrs)
		}
	}
	if len(outcomes) != 1 || !strings.HasSuffix(fmt.Sprint(outcomes[0]["request_id"]), "/1") || outcomes[0]["tool_kind"] != "tool.shell" {
		t.Fatalf("outcome frames in the preflight's join: %v, want the batch's tools/call (request id …/1)", outcomes)
	}
}
