package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/internal/mcpexample"
	"github.com/contractrefine/autonomy/preflight"
)

// mcpPlan is the MCP story's one-step plan: tool.shell, a side-effecting
// capability that requires a preflight.
func mcpPlan(session, cmd string) map[string]any {
	return map[string]any{
		"intent": map[string]any{"summary": "Notify the on-call engineer about case 882", "plan_hash": "demo-mcp-plan-v1"},
		"plan": map[string]any{"steps": []any{
			map[string]any{"id": "s1", "kind": "tool.shell", "zone": "ops",
				"args": map[string]any{"cmd": cmd}, "provenance": map[string]string{"cmd": "literal"}},
		}},
		"context": map[string]any{
			"actor":       map[string]any{"id": "user:demo", "session_id": session},
			"attestation": map[string]any{"node_id": "edge-7", "issued_at": time.Now().UTC().Format(time.RFC3339)},
		},
	}
}

// mcpStory walks the story as an MCP client does, through the gate at
// /mcp: connect and list tools, a call without a preflight refused with a
// result the model can read, the preflight, the call allowed once with
// the id in params._meta, its replay refused, and the audit join.
func (w *walk) mcpStory(ctx context.Context) {
	client := mcp.NewClient(&mcp.Implementation{Name: "autonomy-demo-agent", Version: "1.0.0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: w.tool + mcpexample.Path,
		HTTPClient: w.client, DisableStandaloneSSE: true}, nil)
	var names []string
	if err == nil {
		defer cs.Close()
		var tools *mcp.ListToolsResult
		if tools, err = cs.ListTools(ctx, nil); err == nil {
			for _, t := range tools.Tools {
				names = append(names, t.Name)
			}
		}
	}
	if !w.step("Connect over MCP and list the tools (initialize and tools/list pass the gate)", err,
		fmt.Sprintf("tools %v", names)) {
		return
	}

	cmd := "notify on-call case:882"
	call := &mcp.CallToolParams{Name: "tool.shell", Arguments: map[string]any{"cmd": cmd}}
	r, err := cs.CallTool(ctx, call)
	text, err := mcpDenied(r, err, preflight.ReasonPreflightRequired)
	w.step("Call tool.shell without a preflight", err, "refused with a tool result the model reads:\n      "+text)

	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	var d decision
	err = w.postJSON(ctx, w.api+"/v1/preflight", mcpPlan("demo-mcp-"+hex.EncodeToString(rnd[:]), cmd), &d)
	if err == nil && (d.Outcome != "pass" || d.PreflightID == "") {
		err = fmt.Errorf("want outcome pass with a preflight id, got %s (%s)", d.Outcome, d.Reason)
	}
	w.step("Preflight the plan", err, fmt.Sprintf("outcome pass, preflight_id %s binds %v", d.PreflightID, d.Eligibility.BoundToolKinds))

	call.Meta = mcp.Meta{binding.MetaPreflightID: d.PreflightID}
	r, err = cs.CallTool(ctx, call)
	got := ""
	if err == nil && (r.IsError || len(r.Content) != 1) {
		err = fmt.Errorf("want the tool's result, got isError %v with %d content items", r.IsError, len(r.Content))
	} else if err == nil {
		if tc, ok := r.Content[0].(*mcp.TextContent); ok {
			got = tc.Text
		}
	}
	w.step(`Call it with params._meta["autonomy/preflight_id"]`, err, "allowed, the MCP server answered: "+got)

	r, err = cs.CallTool(ctx, call)
	text, err = mcpDenied(r, err, preflight.ReasonReplay)
	w.step("Call it again with the same preflight id (a replay)", err, "refused:\n      "+text)

	var join struct {
		Frames []struct {
			Kind  string         `json:"kind"`
			Attrs map[string]any `json:"attrs"`
		} `json:"frames"`
	}
	err = w.getJSON(ctx, w.api+"/v1/audit/"+d.AuditID, &join)
	var kinds []string
	for _, f := range join.Frames {
		kinds = append(kinds, fmt.Sprintf("%s (%v)", f.Kind, f.Attrs["reason"]))
	}
	if err == nil && len(join.Frames) != 3 {
		err = fmt.Errorf("want the preflight and two decisions, got %v", kinds)
	}
	w.step("Read the audit join for "+d.AuditID, err, strings.Join(kinds, ", "))
}

// mcpDenied checks that a call came back as the gate's refusal: a tool
// result with isError, a text item naming reason and structuredContent
// with the reason's code. It returns the text.
func mcpDenied(r *mcp.CallToolResult, err error, reason string) (string, error) {
	if err != nil {
		return "", err
	}
	text := ""
	if len(r.Content) == 1 {
		if tc, ok := r.Content[0].(*mcp.TextContent); ok {
			text = tc.Text
		}
	}
	raw, _ := json.Marshal(r.StructuredContent)
	var sc struct {
		Code   string `json:"code"`
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(raw, &sc)
	if !r.IsError || !strings.Contains(text, reason) || sc.Reason != reason {
		return text, errors.New("want an error result naming " + reason + ", got " + string(raw) + " " + text)
	}
	return text, nil
}
