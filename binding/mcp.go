package binding

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/contractrefine/autonomy/internal/canon"
	"github.com/contractrefine/autonomy/preflight"
)

// Protocol is gate.protocol: what the gated path carries.
type Protocol string

// Protocols of docs/API.md and docs/MCP.md.
const (
	// ProtocolTool: a JSON body with a kind and args (gate.kind_pointer,
	// gate.args_pointer).
	ProtocolTool Protocol = "tool"
	// ProtocolMCP: MCP JSON-RPC over Streamable HTTP. Only tools/call is
	// gated: the kind is params.name, the args params.arguments.
	ProtocolMCP Protocol = "mcp"
)

const (
	// MCPToolsCall is the one MCP method the ladder gates.
	MCPToolsCall = "tools/call"
	// MetaPreflightID is the params._meta key by which a tools/call names
	// its preflight, instead of the X-Autonomy-Preflight-Id header.
	MetaPreflightID = "autonomy/preflight_id"
	// MaxMCPBatch is the most messages a JSON-RPC batch may hold; each is
	// decided, and recorded, on its own.
	MaxMCPBatch = 32
	// RPCCodeDenied is the JSON-RPC error code of a denied request other
	// than tools/call (a tools/call gets a tool result with isError).
	RPCCodeDenied        = -32001
	metaPreflightPointer = "/params/_meta/autonomy~1preflight_id"
)

// rpcMessage is what the gate keeps of one JSON-RPC message to answer it.
type rpcMessage struct {
	// id is the id's JSON text, "" for a notification.
	id string
	// method is "" for a response the client sends to the server.
	method string
}

// readMCP reads one JSON-RPC message from the body, once readCall has
// refused a body it cannot have whole. A tools/call gives the
// kind, the args and the preflight id; any other message leaves the call
// ungated: the ladder passes it untouched and the policy still runs.
func (g *Gate) readMCP(c *call) error {
	c.rpcRead = true
	body := c.req.Body
	if err := canon.CheckText(body); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	doc, err := parseBody(body)
	if err != nil {
		c.rpc = peekRefused(body)
		return err
	}
	if err := checkValues(doc); err != nil {
		c.rpc = peekRefused(body)
		return fmt.Errorf("body is ambiguous: %w", err)
	}
	if c.rpc, err = readRPC(doc); err != nil {
		return err
	}
	if c.rpc.method != MCPToolsCall {
		c.gated = false
		return nil
	}
	return readToolCall(c, doc)
}

// readRPC classifies one decoded JSON-RPC 2.0 message: a request (method
// and id), a notification (method, no id) or a response (id and result or
// error, no method).
func readRPC(doc any) (rpcMessage, error) {
	var m rpcMessage
	obj, ok := doc.(map[string]any)
	if !ok {
		return m, fmt.Errorf("%w: not an object", errNotJSONRPC)
	}
	version, _, err := resolveExact(doc, "/jsonrpc")
	if err != nil {
		return m, err
	}
	if version != "2.0" {
		return m, fmt.Errorf("%w: jsonrpc is not \"2.0\"", errNotJSONRPC)
	}
	method, hasMethod, err := resolveExact(doc, "/method")
	if err != nil {
		return m, err
	}
	id, hasID, err := resolveExact(doc, "/id")
	if err != nil {
		return m, err
	}
	if hasID {
		if m.id, err = rpcID(id, hasMethod); err != nil {
			return m, err
		}
	}
	if hasMethod {
		s, isString := method.(string)
		if !isString || s == "" {
			return m, fmt.Errorf("%w: method is not a name", errNotJSONRPC)
		}
		m.method = s
		return m, nil
	}
	_, hasResult := obj["result"]
	_, hasError := obj["error"]
	if !hasID || hasResult == hasError {
		return m, fmt.Errorf("%w: neither a request nor a response", errNotJSONRPC)
	}
	return m, nil
}

// rpcID is a message id's JSON text. A request's id is a string or a
// number; a response may also answer null (a request it could not read).
func rpcID(v any, request bool) (string, error) {
	switch t := v.(type) {
	case string:
		return string(appendJSONString(nil, t)), nil
	case json.Number:
		return t.String(), nil
	case nil:
		if !request {
			return "null", nil
		}
	}
	return "", fmt.Errorf("%w: id is not a string or a number", errNotJSONRPC)
}

// readToolCall takes the kind, args and preflight id of a tools/call.
func readToolCall(c *call, doc any) error {
	params, _, err := resolveExact(doc, "/params")
	if err != nil {
		return err
	}
	if _, isObj := params.(map[string]any); !isObj {
		return errToolCallParams
	}
	name, _, err := resolveExact(doc, "/params/name")
	if err != nil {
		return err
	}
	kind, _ := name.(string)
	if !preflight.KindRuleMCP.Valid(kind) {
		return fmt.Errorf("%w: %q", errToolName, kind)
	}
	args, argsOK, err := resolveExact(doc, "/params/arguments")
	if err != nil {
		return err
	}
	if !argsOK || args == nil {
		args = map[string]any{}
	}
	argsMap, isObj := args.(map[string]any)
	if !isObj {
		return fmt.Errorf("%w: arguments is not an object", errToolCallParams)
	}
	if err := exactNumbers(argsMap, "/params/arguments"); err != nil {
		return err
	}
	meta, hasMeta, err := resolveExact(doc, "/params/_meta")
	if err != nil {
		return err
	}
	if _, isObj := meta.(map[string]any); hasMeta && !isObj {
		return fmt.Errorf("%w: _meta is not an object", errToolCallParams)
	}
	metaID, hasMetaID, err := resolveExact(doc, metaPreflightPointer)
	if err != nil {
		return err
	}
	id, hasID := c.req.Headers[HeaderPreflightID]
	if hasMetaID {
		s, isString := metaID.(string)
		if !isString {
			return fmt.Errorf("%w: _meta[%q] is not a string", errToolCallParams, MetaPreflightID)
		}
		if hasID && id != s {
			return errTwoPreflightIDs
		}
		id, hasID = s, true
	}
	c.kind, c.args, c.argsMap = kind, args, argsMap
	c.headerID, c.hasHeader, c.idRead = id, hasID, true
	return nil
}

// checkBatch decides a JSON-RPC batch: each message on its own, as one
// request would be (its own decision frame, its own consumed step), and
// the batch is allowed only when every message is. The first deny ends the
// walk and answers for the whole batch, which then reaches no server. In
// enforce mode the messages are first read through without writing
// anything (foreseeRefusal), and a message that would be refused is
// checked first, so that a batch refused whole spends no step of the
// others. A step an earlier call consumed stays consumed when a later one
// is refused only because the state changed between the two walks (the
// same step taken by another call meanwhile): fail-closed never lets a
// batch spend more than it was allowed. Each message gets the request id
// and its index, so that a retry of the batch repeats each call's allow
// while two calls in one batch are two calls, not a retry of one. A message
// that presents no known preflight is decided under the batch's own audit
// id, which the allow hands upstream (x-autonomy-audit-id): the answers
// are judged by it (Outcome).
func (g *Gate) checkBatch(ctx context.Context, r *Request, msgs []json.RawMessage) Decision {
	all := make([]rpcMessage, len(msgs))
	order := make([]int, len(msgs))
	for i, m := range msgs {
		all[i] = peekRPC(m)
		order[i] = i
	}
	batchAudit := ""
	if g.o.NewID != nil {
		batchAudit = g.o.NewID()
	}
	if k := g.foreseeRefusal(ctx, r, msgs); k > 0 {
		copy(order[1:k+1], order[:k])
		order[0] = k
	}
	decisions := make([]Decision, len(msgs))
	for _, i := range order {
		one := batchItem(r, msgs[i], i)
		one.auditID = batchAudit
		d := g.Check(ctx, one)
		d.rpc, d.rpcBatch, d.rpcRefused = all, true, i
		if !d.Allowed {
			return d
		}
		decisions[i] = d
	}
	var first Decision
	for i, d := range decisions {
		if i == 0 || (first.ToolKind == "" && d.ToolKind != "") {
			adv := first.AdvisoryReason
			first = d
			if first.AdvisoryReason == "" {
				first.AdvisoryReason = adv
			}
		} else if first.AdvisoryReason == "" {
			first.AdvisoryReason = d.AdvisoryReason
		}
	}
	first.batch = decisions
	first.Gated = slices.ContainsFunc(decisions, func(d Decision) bool { return d.Gated })
	if batchAudit != "" {
		first.AuditID = batchAudit
	}
	return first
}

// foreseeRefusal returns the index of the first message of the batch that
// the gate would refuse now, or -1: the ladder, the clauses and the policy
// read through, nothing recorded and nothing consumed. Only enforce mode
// consumes steps, so only there is it asked.
func (g *Gate) foreseeRefusal(ctx context.Context, r *Request, msgs []json.RawMessage) int {
	pol := g.o.Policy()
	if pol == nil || g.o.Mode != ModeEnforce {
		return -1
	}
	now := g.o.Now()
	for i, m := range msgs {
		one := batchItem(r, m, i)
		d := Decision{Mode: g.o.Mode, RequestID: one.Headers[HeaderRequestID]}
		c := g.readRequest(one, pol, &d)
		if c.gated && c.contract == "" {
			if !g.checkContracts(ctx, c, pol, now) {
				return i
			}
			if g.settle(ctx, c); c.status == http.StatusServiceUnavailable {
				return i
			}
		}
		if c.contract != "" {
			return i
		}
		if allowed, _, err := g.allow(ctx, pol, c); err != nil || !allowed {
			return i
		}
	}
	return -1
}

// batchItem is message i of the batch r carries, as a request of its own:
// r's headers, its request id followed by /i.
func batchItem(r *Request, m json.RawMessage, i int) *Request {
	one := *r
	one.Body, one.batchItem = m, true
	one.Headers = make(map[string]string, len(r.Headers))
	for k, v := range r.Headers {
		one.Headers[k] = v
	}
	if id := r.Headers[HeaderRequestID]; id != "" {
		one.Headers[HeaderRequestID] = id + "/" + strconv.Itoa(i)
	}
	return &one
}

// batchOf returns the messages of a gated MCP body that is a JSON-RPC
// batch, or nil: for a single message, a request that is not gated, and a
// batch the gate refuses as malformed (empty, too long, not JSON), which
// readMCP then reads as the one message it is not.
func (g *Gate) batchOf(r *Request) []json.RawMessage {
	// A body over the limit is refused whole, as one message; a partial
	// one is refused in each message, which keeps the header.
	if g.o.Protocol != ProtocolMCP || r.batchItem || r.BodyErr != nil ||
		(g.o.MaxBodyBytes > 0 && int64(len(r.Body)) > g.o.MaxBodyBytes) {
		return nil
	}
	b := r.Body
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	if i == len(b) || b[i] != '[' || !isPost(r.Method, r.Headers) || !g.gatesPath(r.Path) || g.undescribed(r) != nil {
		return nil
	}
	var msgs []json.RawMessage
	if err := json.Unmarshal(b, &msgs); err != nil || len(msgs) == 0 || len(msgs) > MaxMCPBatch {
		return nil
	}
	// Two requests with one id cannot be told apart by their answers: the
	// batch is refused whole, as the one message it is not.
	seen := map[string]bool{}
	for _, m := range msgs {
		if r := peekRPC(m); r.method != "" && r.id != "" {
			k, _ := idKey(r.id)
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
	}
	return msgs
}

// idKey is a JSON-RPC id (its JSON text) as the value a peer matches
// answers by: 1 and 1.0, "a" and "\u0061" are one id. ok is false for
// text that is no id.
func idKey(text string) (key string, ok bool) {
	var v any
	if json.Unmarshal([]byte(text), &v) != nil {
		return text, false
	}
	switch t := v.(type) {
	case string:
		return "s" + t, true
	case float64:
		return "n" + strconv.FormatFloat(t, 'g', -1, 64), true
	case nil:
		return "null", true
	}
	return text, false
}

// sseAnswer is the data of the one event of an SSE stream (text/event-stream)
// that is the JSON-RPC answer to the request with id: an object with that
// id and a result or an error. Progress notifications and requests the
// server sent before it are other events. It reports false when body is not
// such a stream, or no single event is that answer for every reader: the
// gate judges what the client reads, and SSE readers differ where a stream
// leaves room (the MCP SDKs end lines at LF alone and abort at a line with
// no colon, read only events named "message", and take ids as integers), so
// a stream with a lone CR or a line with no colon, or an answer in an event
// of another name or under an id that is not an integer a double holds
// exactly, has no answer here: its result is null. So has an answer with
// both a result and an error, which JSON-RPC forbids: the gate would judge
// the result while the MCP Go SDK hands its caller the error.
func sseAnswer(body []byte, id string) ([]byte, bool) {
	want, ok := idKey(id)
	if !ok || len(body) == 0 || body[0] == '{' || body[0] == '[' {
		return nil, false
	}
	var found []byte
	matches := 0
	ambiguous := false
	var data []byte
	hasData, named := false, false
	dispatch := func() {
		if hasData {
			var m map[string]json.RawMessage
			if json.Unmarshal(data, &m) == nil && m["id"] != nil && (m["result"] != nil || m["error"] != nil) {
				if k, ok := idKey(string(m["id"])); ok && k == want {
					found = append([]byte(nil), data...)
					matches++
				}
				if named || !integralID(m["id"]) || bothResultAndError(m) {
					ambiguous = true
				}
			}
		}
		data, hasData, named = data[:0], false, false
	}
	for len(body) > 0 {
		var line []byte
		i := bytes.IndexAny(body, "\r\n")
		switch {
		case i < 0:
			line, body = body, nil
		case body[i] == '\r' && i+1 < len(body) && body[i+1] == '\n':
			line, body = body[:i], body[i+2:]
		case body[i] == '\r':
			return nil, false // a lone CR ends a line for some readers only
		default:
			line, body = body[:i], body[i+1:]
		}
		switch {
		case len(line) == 0:
			dispatch()
		case line[0] == ':':
		default:
			field, value, colon := bytes.Cut(line, []byte(":"))
			switch {
			case !colon:
				return nil, false
			case string(field) == "data":
				value = bytes.TrimPrefix(value, []byte(" "))
				if hasData {
					data = append(data, '\n')
				}
				data, hasData = append(data, value...), true
			case string(field) == "event":
				name := strings.TrimSpace(string(value))
				named = name != "" && name != "message"
			}
		}
	}
	dispatch()
	return found, matches == 1 && !ambiguous
}

// resultAndError reports whether body is a JSON-RPC answer with both a
// result and an error (sseAnswer).
func resultAndError(body []byte) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(body, &m) == nil && bothResultAndError(m)
}

// bothResultAndError reports whether the answer m has both members.
func bothResultAndError(m map[string]json.RawMessage) bool {
	_, r := m["result"]
	_, e := m["error"]
	return r && e
}

// integralID reports whether a JSON-RPC id is a string, null, or a number
// every reader takes as the same integer: whole, and under 2^53 in size.
func integralID(text json.RawMessage) bool {
	if len(text) == 0 || (text[0] != '-' && (text[0] < '0' || text[0] > '9')) {
		return true
	}
	f, err := strconv.ParseFloat(string(text), 64)
	return err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53
}

// peekRefused reads the id and method of a single message the strict read
// refused (a member named twice, a value after the message), so that its
// refusal is answered to its id as MCP asks rather than as a transport
// error. Only a top-level object whose "id" and "method" each appear once,
// also counting spellings that differ in case only (readers that match
// names without regard to case would take either), the id a string or a
// number, has them; anything else has no id, and its refusal is the
// /v1/tool 403.
func peekRefused(body []byte) rpcMessage {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return rpcMessage{}
	}
	var m rpcMessage
	ids, methods := 0, 0
	for dec.More() {
		name, err := dec.Token()
		if err != nil {
			return rpcMessage{}
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return rpcMessage{}
		}
		key, _ := name.(string)
		switch {
		case strings.EqualFold(key, "id"):
			ids++
			if !utf8.Valid(v) || len(v) == 0 || (v[0] != '"' && v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
				return rpcMessage{}
			}
			m.id = string(v)
		case strings.EqualFold(key, "method"):
			methods++
			if json.Unmarshal(v, &m.method) != nil || !utf8.ValidString(m.method) {
				return rpcMessage{}
			}
		}
	}
	if ids != 1 || methods != 1 {
		return rpcMessage{}
	}
	return m
}

// peekRPC reads the id and method of a batch message to answer it, without
// judging it; a message it cannot read has no id, and gets no answer.
func peekRPC(m json.RawMessage) rpcMessage {
	var v struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal(m, &v) != nil || len(v.ID) == 0 {
		return rpcMessage{method: v.Method}
	}
	return rpcMessage{id: string(v.ID), method: v.Method}
}

// mcpInput is input.mcp of the policy (gate.protocol: mcp): the JSON-RPC
// method, "" when the request carries none (a GET of the server's event
// stream, a response the client sends).
func (g *Gate) mcpInput(c *call) (map[string]any, bool) {
	if g.o.Protocol != ProtocolMCP {
		return nil, false
	}
	return map[string]any{"method": c.rpc.method}, true
}

// mcpTerm is mcpInput as an OPA term.
func (g *Gate) mcpTerm(c *call) (*ast.Term, bool) {
	if g.o.Protocol != ProtocolMCP {
		return nil, false
	}
	return ast.ObjectTerm(ast.Item(ast.StringTerm("method"), ast.StringTerm(c.rpc.method))), true
}

// ClientDeny is the status and JSON body a deny is answered with where the
// answer goes to the client (the gRPC Check's denied response, the
// gateway). Under gate.protocol mcp a deny of a message with an id is the
// answer an MCP client hands its model: 200 and MCPDenyBody. Any other
// deny is d.Status with DenyBody.
func (d *Decision) ClientDeny() (status int, body []byte) {
	if b := d.MCPDenyBody(); b != nil {
		return http.StatusOK, b
	}
	return d.Status, d.DenyBody()
}

// MCPDenyBody is the JSON-RPC answer to a denied MCP request, or nil when
// the decision answers no JSON-RPC request (another protocol, a
// notification, a body that is not JSON-RPC). A tools/call gets a tool
// result with isError, a text item saying what happened and what to do,
// and structuredContent {code, reason, audit_id}; any other request a
// JSON-RPC error RPCCodeDenied with the same data. A batch gets an array
// of the answers to the messages in it that have an id.
func (d *Decision) MCPDenyBody() []byte {
	n := 0
	for _, m := range d.rpc {
		if m.id != "" {
			n++
		}
	}
	if d.Allowed || n == 0 {
		return nil
	}
	refusedText := d.mcpText()
	text := refusedText
	if d.rpcBatch {
		text = d.mcpBatchText()
	}
	b := make([]byte, 0, n*(160+len(text)+2*len(d.Reason)+len(d.AuditID))+len(refusedText))
	if d.rpcBatch {
		b = append(b, '[')
	}
	sep := false
	for i, m := range d.rpc {
		if m.id == "" {
			continue
		}
		if sep {
			b = append(b, ',')
		}
		sep = true
		text := text
		if i == d.rpcRefused {
			text = refusedText
		}
		b = append(b, `{"jsonrpc":"2.0","id":`...)
		b = append(b, m.id...)
		if m.method == MCPToolsCall {
			b = append(b, `,"result":{"content":[{"type":"text","text":`...)
			b = appendJSONString(b, text)
			b = append(b, `}],"structuredContent":`...)
			b = d.appendDenyData(b)
			b = append(b, `,"isError":true}}`...)
			continue
		}
		b = append(b, `,"error":{"code":`...)
		b = strconv.AppendInt(b, RPCCodeDenied, 10)
		b = append(b, `,"message":`...)
		b = appendJSONString(b, text)
		b = append(b, `,"data":`...)
		b = d.appendDenyData(b)
		b = append(b, "}}"...)
	}
	if d.rpcBatch {
		b = append(b, ']')
	}
	return b
}

// mcpText says, for the model, why the call was refused and what to do.
func (d *Decision) mcpText() string {
	return "The gate refused this tool call (" + d.Reason + ", audit id " + d.AuditID + "); it did not run. " +
		mcpAdvice(d.Reason)
}

// mcpBatchText says, for the model, why a call of a batch was not run
// when another call in the batch was refused.
func (d *Decision) mcpBatchText() string {
	return "The gate refused this batch because its message " + strconv.Itoa(d.rpcRefused) + " (counting from 0) was refused (" +
		d.Reason + ", audit id " + d.AuditID + "); no call in it ran. " +
		"Send this call again without the refused one."
}

// mcpAdvice is what the agent can do about a deny with this reason.
func mcpAdvice(reason string) string {
	layer, _, _ := strings.Cut(reason, ": ")
	switch reason {
	case preflight.ReasonPreflightRequired:
		return "Declare the plan first: POST it to /v1/preflight, then call the tool again with the returned preflight_id in params._meta[\"" +
			MetaPreflightID + "\"] (or the X-Autonomy-Preflight-Id header)."
	case preflight.ReasonBindingMismatch:
		return "The call differs from the preflighted plan (tool, caller or arguments): call exactly as preflighted, or preflight this call."
	case preflight.ReasonExpired:
		return "The preflight has expired: preflight the plan again and call with the new preflight_id."
	case preflight.ReasonReplay:
		return "Every step of this tool in the preflight has been used: preflight again for another call."
	case preflight.ReasonMalformedToolCall:
		return "The request could not be read as one MCP tools/call: send JSON-RPC 2.0 with params.name, params.arguments as an object and at most one preflight id."
	case reasonVerifierMissing:
		return "The gate could not decide just now: try again later."
	case preflight.ReasonApprovalPending:
		return "The step waits for a person's approval: ask for it, and call again once it is approved. If its approval window has passed, no approval can come: preflight the plan again."
	case preflight.ReasonApprovalRejected:
		return "A person rejected this step: do not call it; change the plan."
	}
	switch layer {
	case "policy":
		return "The operator's policy refuses this call: do not retry it unchanged."
	case "clause":
		return "The arguments break the tool's declared contract: change them, and preflight again."
	case "approval":
		return "The step needs a person's approval: ask for it, then call again."
	}
	return "Do not retry the call unchanged."
}
