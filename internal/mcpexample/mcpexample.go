// Package mcpexample is the example MCP server of the demo and the tests:
// the example tool runtime's tool.echo and tool.shell, served over MCP's
// Streamable HTTP with the official Go SDK. Like the runtime, it runs
// nothing: tool.shell says what it would have run.
package mcpexample

import (
	"context"
	"net/http"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Path is where Handler serves MCP, the gate.path of the demo.
const Path = "/mcp"

// Options configures Handler.
type Options struct {
	// JSONResponse answers each POST with one JSON body instead of an SSE
	// stream; both are Streamable HTTP.
	JSONResponse bool
}

// Server is the example MCP server.
type Server struct {
	handler http.Handler
	calls   atomic.Int64
}

// New returns the example server.
func New(o Options) *Server {
	s := &Server{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "autonomy-example-tools", Version: "1.0.0"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "tool.echo", Description: "Echo a message back."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoArgs) (*mcp.CallToolResult, any, error) {
			s.calls.Add(1)
			return text(in.Message), nil, nil
		})
	mcp.AddTool(srv, &mcp.Tool{Name: "tool.shell", Description: "Run a shell command (the example only says what it would run)."},
		func(_ context.Context, _ *mcp.CallToolRequest, in shellArgs) (*mcp.CallToolResult, any, error) {
			s.calls.Add(1)
			return text("would run: " + in.Cmd), nil, nil
		})
	s.handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{JSONResponse: o.JSONResponse})
	return s
}

// ServeHTTP serves MCP at Path and 404 elsewhere.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path {
		http.NotFound(w, r)
		return
	}
	s.handler.ServeHTTP(w, r)
}

// Calls is how many tool calls reached the server.
func (s *Server) Calls() int64 { return s.calls.Load() }

type echoArgs struct {
	Message string `json:"message" jsonschema:"the text to echo"`
}

type shellArgs struct {
	Cmd string `json:"cmd" jsonschema:"the command line"`
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}
