package binding

import (
	"errors"

	"github.com/contractrefine/autonomy/internal/strictjson"
)

// ErrPartialBody is the Request.BodyErr of a call whose body arrived cut
// short: Envoy marked it (x-envoy-auth-partial-body: true) or its
// Content-Length is larger than the body received. The gate refuses it as
// gate: partial_body rather than judge args it has only part of.
var ErrPartialBody = errors.New("binding: the request body arrived incomplete")

// The errors a gated call is refused with as gate: malformed_tool_call.
var (
	// errNoRequestLine: the check names no method or no path. It describes
	// no request the gate can judge (Envoy's network-level ext_authz filter
	// sends such checks), so it is not taken for an ungated one.
	errNoRequestLine = errors.New("binding: the check names no method or path")
	// errLineConflict: the check's own line is a gated call that its
	// forwarded headers describe as another request.
	errLineConflict = errors.New("binding: the check's own line is a gated call and its forwarded headers name another request")
	// errBodyTooLarge: the body is over Options.MaxBodyBytes, the limit
	// every adapter applies (http.max_body_bytes).
	errBodyTooLarge = errors.New("binding: request body over http.max_body_bytes")
	// errNoKind: neither the body nor the kind header names a tool kind.
	errNoKind = errors.New("binding: no tool kind in the request")
	// errKindList: the kind header came more than once, or as a list
	// ("tool.echo,tool.shell"): its values joined name no one kind, and a
	// made-up kind would pass the ladder as one no capability requires a
	// preflight for.
	errKindList = errors.New("binding: the tool kind header names more than one kind")
	// errDuplicateKey: one object in the body names a member twice, or two
	// members that differ only in case.
	errDuplicateKey = strictjson.ErrDuplicateName
	// errMisspelt: a member stands where the kind or args pointer names
	// another spelling of it.
	errMisspelt = errors.New("binding: member name spelt otherwise than the gate's pointer")
	// errNULName: a member name holds a NUL, which a runtime reading names
	// as C strings cuts short ("kind\u0000x" read as "kind").
	errNULName = errors.New("binding: member name holds a NUL")
)

// The errors a gated MCP message is refused with as gate: malformed_tool_call
// (gate.protocol: mcp).
var (
	// errNotJSONRPC: the body is not one JSON-RPC 2.0 request, notification
	// or response, nor a batch of them.
	errNotJSONRPC = errors.New("binding: body is not a JSON-RPC 2.0 message")
	// errToolCallParams: a tools/call whose params are not an object with
	// a tool name, an arguments object and, when present, a _meta object.
	errToolCallParams = errors.New("binding: tools/call params are not an object with name, arguments and _meta")
	// errToolName: params.name breaks MCP's tool-name rule.
	errToolName = errors.New("binding: tools/call names no valid MCP tool")
	// errTwoPreflightIDs: the header and params._meta name two preflights.
	errTwoPreflightIDs = errors.New("binding: the X-Autonomy-Preflight-Id header and params._meta name different preflights")
)
