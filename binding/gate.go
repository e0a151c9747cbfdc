package binding

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/contractrefine/autonomy/internal/canon"
	"github.com/contractrefine/autonomy/internal/observe"
	"github.com/contractrefine/autonomy/internal/state"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// Mode is contract_refine.mode, the catalog's type (preflight.Mode).
type Mode = preflight.Mode

// The three modes.
const (
	ModeDisabled = preflight.ModeDisabled
	ModeAdvisory = preflight.ModeAdvisory
	ModeEnforce  = preflight.ModeEnforce
)

// Header names of docs/API.md.
const (
	HeaderPreflightID    = "x-autonomy-preflight-id"
	HeaderRequestID      = "x-request-id"
	HeaderAuditID        = "x-autonomy-audit-id"
	HeaderAdvisoryReason = "x-autonomy-advisory-reason"
	DefaultCacheTTL      = 60 * time.Second
	DefaultCacheSize     = 100000
	defaultGatePath      = "/v1/tool"
	// headerPartialBody is what Envoy sets on a check whose buffered body
	// was cut at with_request_body.max_request_bytes
	// (allow_partial_message: true).
	headerPartialBody     = "x-envoy-auth-partial-body"
	reasonVerifierMissing = preflight.ReasonVerifierUnavailable
)

var idShape = regexp.MustCompile(`^[A-Za-z0-9_-]{16,128}$`)

// Policy is the loaded bundle as the gate sees it.
type Policy interface {
	Governance() *preflight.Governance
	Clauses() preflight.ClauseChecker
	// Allow evaluates the operator's policy; reason is set on a deny.
	Allow(ctx context.Context, input map[string]any) (allowed bool, reason string, err error)
	Revision() string
}

// Log is where the gate appends the decision frames of calls that consume
// no step (a consume writes its frames through the state.Store).
type Log interface {
	AppendDecision(ctx context.Context, in wal.FrameInput) (wal.Frame, error)
	// Approval is read only for bindings with a step that waits for one.
	Approval(ctx context.Context, preflightID, stepID string) (wal.Approval, error)
}

// RefusalLog is a Log that can append the frame of a 503 refusal without
// waiting for what that answer does not depend on (the frame's copy to a
// shared store, which may be what failed): the refusal is not held
// another request timeout.
type RefusalLog interface {
	AppendRefusal(ctx context.Context, in wal.FrameInput) (wal.Frame, error)
}

var _ Log = (*wal.DB)(nil)

// Observer is told what the gate did; metrics implement it. Methods must be
// cheap and safe for concurrent use.
type Observer interface {
	CacheLookup(hit bool)
	CacheEvicted()
	GateDecision(d *Decision, took time.Duration)
}

// CheckObserver is told where each Check begins and how it ended (once for
// a JSON-RPC batch), in terms that name no type of this package; tracing
// implements it with a span around the check. The check runs in the
// context StartCheck returns, and EndCheck gets that context back.
type CheckObserver interface {
	StartCheck(ctx context.Context) context.Context
	EndCheck(ctx context.Context, c observe.Check)
}

// Options configures a Gate. Zero values mean the defaults.
type Options struct {
	// Store holds the bindings and their consumed markers (internal/state).
	Store state.Store
	// PeekInConsume, enforced, leaves the ladder's peek at the consumed
	// markers to the consume's own transaction (ladder.go): for a store
	// whose every read is a network round trip (etcd). A call that ends
	// before its consume still peeks.
	PeekInConsume bool
	// Log takes the decision frames of calls that consume nothing.
	Log Log
	// Policy returns the current bundle; it is called once per check.
	Policy func() Policy
	Mode   Mode
	// Protocol is what the gated path carries (default tool). With mcp,
	// KindPointer, ArgsPointer and KindHeader are not used (mcp.go).
	Protocol Protocol
	// Path is the gated path (default /v1/tool); KindPointer and ArgsPointer
	// locate the tool kind and args in the JSON body (default /kind, /args).
	Path        string
	KindPointer string
	ArgsPointer string
	// KindHeader, when set, names the header carrying the tool kind of a
	// gated request that has no body.
	KindHeader string
	// ActorHeader, when set, names the header carrying the caller identity.
	ActorHeader string
	// MaxBodyBytes, when positive, is http.max_body_bytes: a gated body
	// longer than it is refused as gate: malformed_tool_call, whichever
	// adapter it came through, so a call the HTTP check would refuse is
	// refused by the gRPC Check too.
	MaxBodyBytes int64
	// CacheTTL is the binding-cache TTL ceiling (at most 60 s).
	CacheTTL  time.Duration
	CacheSize int
	// StoreRawRequests keeps the raw args in decision frames.
	StoreRawRequests bool
	Now              func() time.Time
	// NewID returns a fresh audit id for calls not bound to a preflight.
	NewID  func() string
	Logger *slog.Logger
	// NoDecisionLog drops the info line each decision gets (log.decisions
	// false); errors are still logged. The decision frame is written either
	// way.
	NoDecisionLog bool
	Observer      Observer
	// Spans, when set, is told where each check begins and ends.
	Spans CheckObserver
	// Outcomes is the store tool outcomes are judged with (outcome.go);
	// nil means Store, when it is one.
	Outcomes OutcomeStore
}

// Gate runs the decision for gated requests. It is safe for concurrent use.
type Gate struct {
	o Options
	// routedPath is o.Path as gatesPath compares paths: cleaned.
	routedPath string
	cache      *lru.Cache[string, *entry]
	// decisions holds preflight decisions as OPA values, for policies that
	// read input.preflight.
	decisions *lru.Cache[string, timedValue]
	outcomes  outcomes
}

// entry is a cached binding. until is when the entry stops being served,
// in Unix nanoseconds: min(TTL ceiling, the binding's expiry).
// The binding holds no decision JSON (see decisionCacheSize).
// The cache holds up to Options.CacheSize of these, so the fields are kept
// small: BenchmarkCacheFootprint measures one.
type entry struct {
	// packed is the binding packed (wal.PackBinding): its fields in one
	// string, read out into each call's memory (entry.binding).
	packed string
	until  int64
	// spent has one element per step, nil until a step is known consumed.
	// It is replaced, never changed in place (spent.go).
	spent atomic.Pointer[[]spentStep]
}

// New returns a Gate.
func New(o Options) *Gate {
	if o.Path == "" {
		o.Path = defaultGatePath
	}
	if o.KindPointer == "" {
		o.KindPointer = "/kind"
	}
	if o.ArgsPointer == "" {
		o.ArgsPointer = "/args"
	}
	if o.CacheTTL <= 0 || o.CacheTTL > DefaultCacheTTL {
		o.CacheTTL = DefaultCacheTTL
	}
	if o.CacheSize <= 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.Mode == "" {
		o.Mode = ModeAdvisory
	}
	if o.Protocol == "" {
		o.Protocol = ProtocolTool
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		// A handler that is never enabled, so the per-decision log line is
		// not even formatted when nobody reads it.
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.KindHeader = strings.ToLower(o.KindHeader)
	o.ActorHeader = strings.ToLower(o.ActorHeader)
	g := &Gate{o: o, routedPath: path.Clean("/" + o.Path)}
	var onEvict func(string, *entry)
	if o.Observer != nil {
		onEvict = func(string, *entry) { o.Observer.CacheEvicted() }
	}
	g.cache, _ = lru.NewWithEvict[string, *entry](o.CacheSize, onEvict)
	g.decisions, _ = lru.New[string, timedValue](min(o.CacheSize, decisionCacheSize))
	g.outcomes = newOutcomes(&o)
	return g
}

// timedValue is a cached decision and when it stops being served, in Unix
// nanoseconds of Options.Now.
type timedValue struct {
	v     ast.Value
	until int64
}

// Close empties the gate's caches. The gate runs no goroutine of its own,
// so a gate dropped without Close leaks nothing either; Close is for
// owners that want the memory back at once. The gate is not used after.
func (g *Gate) Close() {
	g.cache.Purge()
	g.decisions.Purge()
}

// Mode returns the gate's mode.
func (g *Gate) Mode() Mode { return g.o.Mode }

// Request is one request as the proxy saw it.
type Request struct {
	Method string
	// Path is the request path, with any query string.
	Path string
	// Headers has lower-case names.
	Headers map[string]string
	Body    []byte
	// BodyErr, when set, says the body could not be read whole; the gate
	// denies a gated call it cannot read.
	BodyErr error
	// OriginErr, when set, says the original method and path could not be
	// told for certain (a forward-auth check whose headers disagree); the
	// gate denies the request, whatever method and path it names, as
	// gate: malformed_tool_call.
	OriginErr error
	// LineMethod and LinePath are the HTTP check's own method and path
	// (after its /v1/authz prefix) when forwarded headers supplied Method
	// and Path instead. Envoy's http_service puts the original request in
	// that line, so a line that is a gated call while the headers name
	// another request is refused like OriginErr: the headers may be the
	// client's, sent to make a tool call look like something else.
	LineMethod, LinePath string
	// Principal is the mTLS peer principal, when there is one.
	Principal string
	// batchItem marks one message of an MCP batch, decided on its own.
	batchItem bool
	// auditID, for a batch's message, is the batch's own audit id: the
	// decision frame of a message that presents no known preflight goes
	// under it (checkBatch).
	auditID string
}

// undescribed returns why the gate cannot tell which request r is, or nil:
// the proxy described it two ways (OriginErr), it names no method or path,
// or its own line is a gated call that its forwarded headers describe as
// another request.
func (g *Gate) undescribed(r *Request) error {
	switch {
	case r.OriginErr != nil:
		return r.OriginErr
	case r.Method == "" || r.Path == "":
		return errNoRequestLine
	case r.LinePath != "" && (r.LineMethod != r.Method || r.LinePath != r.Path) &&
		isPost(r.LineMethod, r.Headers) && g.gatesPath(r.LinePath):
		return errLineConflict
	}
	return nil
}

// Decision is the gate's answer.
type Decision struct {
	Allowed bool
	// Status is 200 for an allow, 403 for a deny, 503 when the gate could
	// not decide.
	Status int
	// Reason is "<layer>: <subreason>".
	Reason  string
	AuditID string
	Mode    Mode
	// AdvisoryReason is the contract failure recorded but not enforced.
	AdvisoryReason string
	Gated          bool
	PreflightID    string
	ToolKind       string
	StepID         string
	RequestID      string
	// Pointer is the JSON Pointer, into the tool call's body, of the value
	// that made it unreadable (a number in args that does not round-trip
	// through a double); "" otherwise.
	Pointer string
	// rpc are the JSON-RPC messages answered (gate.protocol: mcp), several
	// when rpcBatch; they shape the deny (MCPDenyBody).
	rpc      []rpcMessage
	rpcBatch bool
	// rpcRefused is the index in rpc of the batch's message that was
	// refused.
	rpcRefused int
	// batch are the decisions of an allowed batch's messages, in its
	// order: the gateway judges each tools/call's answer with its own.
	batch []Decision
	// argsDigest is the args digest a stored decision frame recorded
	// (Gate.Report compares a runtime's report with it).
	argsDigest string
}

// Code returns the subreason, the stable error code of a deny.
func (d *Decision) Code() string {
	_, sub, _ := strings.Cut(d.Reason, ": ")
	return sub
}

// DenyBody is the JSON body of a deny (docs/API.md), its members in the
// spec's order: the bytes encoding/json writes for that shape (frame_test.go
// compares them), without the reflection on every deny.
func (d *Decision) DenyBody() []byte {
	b := make([]byte, 0, 48+len(d.AuditID)+2*len(d.Reason)+len(d.Pointer))
	b = append(b, `{"error":`...)
	b = d.appendDenyData(b)
	return append(b, '}')
}

// appendDenyData appends the deny's {"code","reason","audit_id"} (and
// "path" when it has a Pointer): DenyBody's error, and an MCP deny's
// structuredContent.
func (d *Decision) appendDenyData(b []byte) []byte {
	b = append(b, `{"code":`...)
	b = appendJSONString(b, d.Code())
	b = append(b, `,"reason":`...)
	b = appendJSONString(b, d.Reason)
	b = append(b, `,"audit_id":`...)
	b = appendJSONString(b, d.AuditID)
	if d.Pointer != "" {
		b = append(b, `,"path":`...)
		b = appendJSONString(b, d.Pointer)
	}
	return append(b, '}')
}

// appendJSONString appends s as encoding/json writes it. Printable ASCII
// other than the quote, the backslash and the HTML-escaped <, > and & is
// written as it is, which is all an audit id or a reason holds; anything
// else goes through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			enc, _ := json.Marshal(s) // a string always encodes
			return append(b, enc...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// UpstreamHeaders are the headers added to an allowed request.
func (d *Decision) UpstreamHeaders() map[string]string {
	h := map[string]string{HeaderAuditID: d.AuditID}
	if d.AdvisoryReason != "" {
		h[HeaderAdvisoryReason] = d.AdvisoryReason
	}
	return h
}

// Recorded returns the outcome, reason and enforced flag as the decision
// frame records them: a contract failure let through in advisory mode is a
// deny that was not enforced, with the failure as its reason. Logs and
// metrics use it too, so all three tell the same story.
func (d *Decision) Recorded() (outcome, reason string, enforced bool) {
	if d.Allowed && d.AdvisoryReason != "" {
		return "deny", d.AdvisoryReason, false
	}
	if d.Allowed {
		return "allow", d.Reason, true
	}
	return "deny", d.Reason, true
}

// observed is d as observers outside this package see it.
func (d *Decision) observed() observe.Check {
	outcome, reason, enforced := d.Recorded()
	return observe.Check{AuditID: d.AuditID, PreflightID: d.PreflightID, ToolKind: d.ToolKind,
		Mode: string(d.Mode), Outcome: outcome, Reason: reason, Enforced: enforced, Status: d.Status}
}

// call is what the gate works out about one request.
type call struct {
	req       *Request
	gated     bool
	kind      string
	args      any
	argsMap   map[string]any
	noBody    bool // the kind came from gate.kind_header: the args are unknown
	identity  string
	requestID string
	headerID  string
	hasHeader bool
	// bound is the cache entry of the binding the header names, and b
	// that binding, read out of it (entry.binding) into step's memory.
	bound    *entry
	b        preflight.Binding
	step     [1]preflight.BoundStep
	policy   Policy // the bundle this call is decided under, for its revision
	revision string // policy's revision once a frame records it (frame)
	contract string // first contract failure reason
	// clause is the clause whose failure contract names, when one does.
	clause    *preflight.ClauseViolation
	status    int // 503 when the ladder could not decide
	errDetail error
	digest    string
	// held marks the steps waiting for an approval not given; heldReason
	// is approval: pending or approval: rejected when any is.
	held       []bool
	heldReason string
	// peek is the consume the ladder did not peek at (ladder.go, settle).
	peek *wal.ConsumeRequest
	// rpc is the JSON-RPC message read (rpcRead) under gate.protocol mcp;
	// idRead says readMCP set headerID and hasHeader (header or _meta).
	rpc     rpcMessage
	rpcRead bool
	idRead  bool
	// ladderPassed is set when the binding ladder passed (the clauses may
	// still fail after it).
	ladderPassed bool
	// argsDigest's memo.
	digested        bool
	argsDigestValue string
	argsDigestErr   error
}

// Check decides one request. It never returns an allow when something went
// wrong: errors and panics become a 503 deny.
func (g *Gate) Check(ctx context.Context, r *Request) Decision {
	if g.o.Spans == nil || r.batchItem {
		return g.check(ctx, r)
	}
	ctx = g.o.Spans.StartCheck(ctx)
	d := g.check(ctx, r)
	g.o.Spans.EndCheck(ctx, d.observed())
	return d
}

func (g *Gate) check(ctx context.Context, r *Request) (d Decision) {
	if msgs := g.batchOf(r); msgs != nil {
		return g.checkBatch(ctx, r, msgs)
	}
	start := time.Now()
	now := g.o.Now()
	d = Decision{Mode: g.o.Mode, RequestID: r.Headers[HeaderRequestID]}
	defer func() {
		if p := recover(); p != nil {
			g.o.Logger.ErrorContext(ctx, "gate check panicked; denying", "panic", fmt.Sprint(p))
			d = g.unavailable(d)
		}
		g.logDecision(ctx, &d)
		if g.o.Observer != nil {
			g.o.Observer.GateDecision(&d, time.Since(start))
		}
	}()
	pol := g.o.Policy()
	if pol == nil {
		return g.unavailable(d)
	}
	c := g.readRequest(r, pol, &d)
	if c.gated && g.o.Mode != ModeDisabled && c.contract == "" {
		if !g.checkContracts(ctx, c, pol, now) {
			return g.unreadable(ctx, c, d, now)
		}
	}
	if c.gated && g.o.Mode != ModeDisabled && (c.contract == preflight.ReasonMalformedToolCall || c.contract == preflight.ReasonPartialBody) {
		g.presented(ctx, c, now)
	}
	d.PreflightID = c.presentedID()
	d.AuditID = g.auditID(c)

	// A call the gate cannot read whole is refused in every mode: it cannot
	// be put to the policy faithfully.
	unreadable := c.contract == preflight.ReasonMalformedToolCall || c.contract == preflight.ReasonPartialBody
	enforceContract := c.contract != "" && (g.o.Mode == ModeEnforce || unreadable)
	if enforceContract {
		d.Status, d.Reason = http.StatusForbidden, c.contract
		return g.record(ctx, c, d, now)
	}
	if c.contract != "" {
		d.AdvisoryReason = c.contract
	}
	return g.decidePolicy(ctx, c, d, pol, now)
}

// readRequest works out the call r is: whether it is gated, and for a
// gated one its kind and args, or why it cannot be read (c.contract). It
// fills in what d reports of that.
func (g *Gate) readRequest(r *Request, pol Policy, d *Decision) *call {
	c := &call{req: r, requestID: d.RequestID, policy: pol}
	c.identity = g.identity(r)
	c.gated = isPost(r.Method, r.Headers) && g.gatesPath(r.Path)
	if err := g.undescribed(r); err != nil {
		// The request is described two ways, or not at all: check it as
		// the tool call it may be, and refuse it as unreadable.
		c.gated = true
		c.contract, c.errDetail = preflight.ReasonMalformedToolCall, err
	}
	if c.gated && c.contract == "" {
		if err := g.readCall(c); err != nil {
			c.contract = preflight.ReasonMalformedToolCall
			if errors.Is(err, ErrPartialBody) {
				c.contract = preflight.ReasonPartialBody
			}
			c.errDetail = err
			var ne *numberError
			if errors.As(err, &ne) {
				d.Pointer = ne.pointer
			}
		}
	}
	// An MCP message other than tools/call is not gated (readMCP): its
	// answer is not judged either.
	d.Gated = c.gated
	d.ToolKind = c.kind
	if c.rpcRead {
		d.rpc = []rpcMessage{c.rpc}
	}
	return c
}

// checkContracts runs the binding ladder, then the capability's clauses,
// leaving the first failure in c.contract. It returns false when the
// bindings could not be read (c.status 503).
func (g *Gate) checkContracts(ctx context.Context, c *call, pol Policy, now time.Time) bool {
	g.ladder(ctx, c, pol.Governance(), now)
	if c.status == http.StatusServiceUnavailable {
		return false
	}
	if c.contract != "" {
		return true
	}
	c.ladderPassed = true
	if vs := clauseViolations(pol.Clauses(), c); len(vs) > 0 {
		if g.settle(ctx, c); c.status == http.StatusServiceUnavailable {
			return false
		}
		if c.contract != "" {
			c.ladderPassed = false // the peek left to the consume failed the ladder
		} else {
			c.contract, c.clause = vs[0].Reason, &vs[0]
		}
	}
	return true
}

// presented reads the preflight id a call the gate cannot read presents,
// for which the ladder did not run: its refusal names the id and, when
// the preflight is known, joins the preflight's audit, so the attempts
// made with an id show with it. A lookup that fails only leaves that out:
// the call is refused either way.
func (g *Gate) presented(ctx context.Context, c *call, now time.Time) {
	if !c.idRead {
		c.headerID, c.hasHeader = c.req.Headers[HeaderPreflightID]
	}
	if !c.hasHeader && g.o.Protocol == ProtocolMCP {
		// A tools/call refused before readToolCall read its _meta id.
		if doc, err := parseBody(c.req.Body); err == nil {
			if id, ok, _ := resolveExact(doc, metaPreflightPointer); ok {
				c.headerID, c.hasHeader = id.(string)
			}
		}
	}
	if !c.hasHeader || !idShape.MatchString(c.headerID) {
		return
	}
	if e, err := g.lookup(ctx, c.headerID, now); err == nil && e.binding(&c.b, c.step[:0]) == nil {
		c.bound = e
	}
}

// presentedID is the preflight id the decision frame names: the bound
// one, or an id-shaped one the log does not know, so the audit shows which
// id was tried.
func (c *call) presentedID() string {
	if c.bound != nil {
		return c.b.PreflightID
	}
	if c.hasHeader && idShape.MatchString(c.headerID) {
		return c.headerID
	}
	return ""
}

// decidePolicy puts the call to the operator's policy and answers: the
// consume of a bound call it allows, the deny of one it refuses.
func (g *Gate) decidePolicy(ctx context.Context, c *call, d Decision, pol Policy, now time.Time) Decision {
	allowed, reason, err := g.allow(ctx, pol, c)
	if (err != nil || !allowed) && c.peek != nil {
		// Only a consume answers the peek the ladder left to it (enforced).
		if g.settle(ctx, c); c.status == http.StatusServiceUnavailable {
			return g.unreadable(ctx, c, d, now)
		}
		if c.contract != "" {
			d.Status, d.Reason = http.StatusForbidden, c.contract
			return g.record(ctx, c, d, now)
		}
	}
	if err != nil {
		g.o.Logger.ErrorContext(ctx, "policy evaluation failed; denying", "audit_id", d.AuditID, "err", err)
		return g.record(ctx, c, g.unavailable(d), now)
	}
	if !allowed {
		d.Status, d.Reason = http.StatusForbidden, reason
		return g.record(ctx, c, d, now)
	}
	d.Allowed, d.Status = true, http.StatusOK
	d.Reason = preflight.ReasonPolicyAllowed
	if c.bound != nil && c.contract == "" {
		d.Reason = preflight.ReasonPassed
		return g.consume(ctx, c, d, now)
	}
	return g.record(ctx, c, d, now)
}

// unreadable is the 503 deny of a call whose binding could not be read.
func (g *Gate) unreadable(ctx context.Context, c *call, d Decision, now time.Time) Decision {
	g.o.Logger.ErrorContext(ctx, "gate cannot read bindings; denying", "err", c.errDetail)
	d.AuditID = g.auditID(c)
	if c.bound != nil {
		d.PreflightID = c.b.PreflightID
	}
	// A failed read (a corrupt record) need not mean failed writes: the
	// refusal is recorded when the log still takes it.
	return g.record(ctx, c, g.unavailable(d), now)
}

// clauseViolations are the clauses c's real args break. A check without a
// body (the kind from gate.kind_header) has no args to judge: every clause
// of its kind is a violation, never a pass on {}.
func clauseViolations(cc preflight.ClauseChecker, c *call) []preflight.ClauseViolation {
	if c.noBody {
		return cc.Unseen(c.kind)
	}
	return cc.Check(c.kind, c.argsMap)
}

// logDecision writes the one info line every decision gets. It names the
// verdict and the ids that join it to the audit trail, never headers, args
// or the body: those may carry credentials or personal data, and the WAL
// keeps their digest. ctx carries the trace, so the line joins the span.
func (g *Gate) logDecision(ctx context.Context, d *Decision) {
	if g.o.NoDecisionLog || !g.o.Logger.Enabled(ctx, slog.LevelInfo) {
		return
	}
	outcome, reason, enforced := d.Recorded()
	g.o.Logger.LogAttrs(ctx, slog.LevelInfo, "decision",
		slog.String("audit_id", d.AuditID),
		slog.String("outcome", outcome),
		slog.String("reason", reason),
		slog.Bool("enforced", enforced),
		slog.Int("status", d.Status),
		slog.String("mode", string(d.Mode)),
		slog.String("preflight_id", d.PreflightID),
		slog.String("tool_kind", d.ToolKind),
		slog.String("request_id", d.RequestID))
}

// unavailable turns d into the fail-closed answer.
func (g *Gate) unavailable(d Decision) Decision {
	d.Allowed, d.Status, d.Reason = false, http.StatusServiceUnavailable, reasonVerifierMissing
	return d
}

func (g *Gate) identity(r *Request) string {
	if g.o.ActorHeader != "" {
		if v := r.Headers[g.o.ActorHeader]; v != "" {
			return v
		}
	}
	return r.Principal
}

func (g *Gate) auditID(c *call) string {
	if c.bound != nil {
		return c.b.AuditID
	}
	if c.req.auditID != "" {
		return c.req.auditID
	}
	if g.o.NewID != nil {
		return g.o.NewID()
	}
	return ""
}

// gatesPath reports whether the request path p names the gate path. It
// compares what some tool runtime's router would route: the path without
// its query, percent-decoded, with empty and dot segments resolved and no
// trailing slash, in any letter case; and also cut at a NUL (C strings) or
// at a decoded ? or # (a runtime that splits the path again: a proxy that
// re-escapes /v1/tool#x sends /v1/tool%23x), without each segment's
// ;parameters (servlet containers route /v1/tool;a=b as /v1/tool) or the
// last segment's .suffix (suffix pattern matching routes /v1/tool.json
// there), and the path of an absolute or scheme-relative target
// (http://x/v1/tool, http:/v1/tool, //x/v1/tool: targetPaths). Also compared: the path decoded again,
// leniently, while that changes it (a runtime that unescapes what its
// proxy already unescaped: /v1/%2574ool), with backslashes read as slashes
// (Windows hosts and some routers: /v1\tool), and the cleaned path without
// trailing white space and dots (routers and file systems that trim them:
// /v1/tool%20). A path that does not decode is checked too.
func (g *Gate) gatesPath(p string) bool {
	p = pathOnly(p)
	if p == g.o.Path {
		return true
	}
	for _, f := range targetPaths(p) {
		decoded, err := url.PathUnescape(f)
		if err != nil {
			return true
		}
		for range maxDecodes {
			if g.routesDecoded(decoded) {
				return true
			}
			again := unescapeLenient(decoded)
			if again == decoded {
				break
			}
			decoded = again
		}
	}
	return false
}

// targetPaths are the paths a runtime could route the request target p
// to: p itself and, for an absolute-form target (any scheme, with or
// without an authority: http://x/v1/tool, http:/v1/tool, x:v1/tool) or a
// scheme-relative one (//x/v1/tool), what follows the scheme and the
// authority. Go's net/http parses any "scheme:" target with
// url.ParseRequestURI and routes its path, so "http:/v1/tool" reaches
// /v1/tool there. The scheme and authority are cut by hand, not by
// url.Parse, so a target that does not parse is read the same way.
func targetPaths(p string) []string {
	forms := []string{p}
	rest := p
	if i := strings.IndexByte(rest, ':'); i > 0 && isScheme(rest[:i]) {
		rest = rest[i+1:]
		forms = append(forms, rest)
	}
	if after, ok := strings.CutPrefix(rest, "//"); ok {
		if i := strings.IndexAny(after, `/\`); i >= 0 {
			forms = append(forms, after[i:])
		}
	}
	return forms
}

// isScheme reports whether s is a URI scheme (RFC 3986 §3.1).
func isScheme(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return s != ""
}

// maxDecodes bounds how many times gatesPath unescapes a path: once for
// the proxy in front of the gate and twice more for what is behind it.
const maxDecodes = 3

// routesDecoded reports whether the unescaped path decoded is the gate
// path in one of the readings gatesPath lists.
func (g *Gate) routesDecoded(decoded string) bool {
	if i := strings.IndexAny(decoded, "\x00?#"); i >= 0 {
		decoded = decoded[:i]
	}
	decoded = strings.ReplaceAll(decoded, `\`, "/")
	clean := path.Clean("/" + withoutParams(decoded))
	for _, p := range [...]string{path.Clean("/" + decoded), clean, withoutSuffix(clean),
		path.Clean("/" + strings.TrimRight(clean, " \t\r\n\v\f."))} {
		if strings.EqualFold(p, g.routedPath) {
			return true
		}
	}
	return false
}

// unescapeLenient decodes each valid %XX escape in s and keeps any other
// %, as lenient decoders do: a runtime that unescapes a path again need
// not refuse what url.PathUnescape refuses (/v1/%2574ool;%25zz).
func unescapeLenient(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b = append(b, byte(v))
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}

// withoutSuffix drops the .suffix of p's last segment.
func withoutSuffix(p string) string {
	dir, last := path.Split(p)
	if i := strings.LastIndexByte(last, '.'); i > 0 {
		return dir + last[:i]
	}
	return p
}

// withoutParams drops the ;parameters of every segment of p.
func withoutParams(p string) string {
	if !strings.Contains(p, ";") {
		return p
	}
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i], _, _ = strings.Cut(s, ";")
	}
	return strings.Join(segs, "/")
}

// methodOverrides are the headers through which some frameworks let a
// request name another method than its own.
var methodOverrides = []string{"x-http-method-override", "x-http-method", "x-method-override"}

// isPost reports whether some tool runtime would route a request with this
// method and these headers as a POST.
// Methods are case-sensitive (RFC 9110 §9.1), but some frameworks
// upper-case them (Werkzeug does), and some take the method from an
// override header, so "post" and a GET overridden to POST are POSTs here.
// An override naming several methods (a repeated header, joined) is a
// POST when any of them is: frameworks differ on which one they take. An
// override spelt with underscores counts too: CGI and WSGI servers fold
// "_" and "-" into one variable (HTTP_X_HTTP_METHOD_OVERRIDE).
func isPost(method string, headers map[string]string) bool {
	if strings.EqualFold(strings.TrimSpace(method), http.MethodPost) {
		return true
	}
	for name, v := range headers {
		if !slices.Contains(methodOverrides, strings.ReplaceAll(name, "_", "-")) {
			continue
		}
		for m := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(m), http.MethodPost) {
				return true
			}
		}
	}
	return false
}

func pathOnly(p string) string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		return p[:i]
	}
	return p
}

// readCall takes the tool kind and args from the JSON body, or the kind from
// the configured header when the request has no body.
func (g *Gate) readCall(c *call) error {
	if c.req.BodyErr != nil {
		return c.req.BodyErr
	}
	if strings.EqualFold(strings.TrimSpace(c.req.Headers[headerPartialBody]), "true") {
		return ErrPartialBody
	}
	body := c.req.Body
	if g.o.MaxBodyBytes > 0 && int64(len(body)) > g.o.MaxBodyBytes {
		return errBodyTooLarge
	}
	if g.o.Protocol == ProtocolMCP {
		return g.readMCP(c)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if g.o.KindHeader == "" {
			return errNoKind
		}
		kind := c.req.Headers[g.o.KindHeader]
		if kind == "" {
			return errNoKind
		}
		if strings.Contains(kind, ",") {
			return errKindList
		}
		c.kind = kind
		c.argsMap = map[string]any{}
		c.args = c.argsMap
		c.noBody = true
		return nil
	}
	// Bytes that are not UTF-8 and \u escapes of lone surrogates all read
	// as U+FFFD: two different bodies would match a preflighted step's args
	// digest as the same args.
	if err := canon.CheckText(body); err != nil {
		return fmt.Errorf("body: %w", err)
	}
	doc, err := parseBody(body)
	if err != nil {
		return err
	}
	if err := checkValues(doc); err != nil {
		return fmt.Errorf("body is ambiguous: %w", err)
	}
	// A runtime in Go finds "ARGS" for its args field; the gate, reading
	// the pointer exactly, would judge {} while the runtime runs them.
	kind, kindOK, err := resolveExact(doc, g.o.KindPointer)
	if err != nil {
		return fmt.Errorf("body is ambiguous: %w", err)
	}
	args, argsOK, err := resolveExact(doc, g.o.ArgsPointer)
	if err != nil {
		return fmt.Errorf("body is ambiguous: %w", err)
	}
	if s, isString := kind.(string); kindOK && isString && s != "" {
		c.kind = s
	} else {
		return errNoKind
	}
	if !argsOK || args == nil {
		args = map[string]any{}
	}
	m, isMap := args.(map[string]any)
	if !isMap {
		return errors.New("args is not a JSON object")
	}
	if err := exactNumbers(m, g.o.ArgsPointer); err != nil {
		return err
	}
	c.args, c.argsMap = args, m
	return nil
}
