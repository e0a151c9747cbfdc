package binding

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/contractrefine/autonomy/internal/canon"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// HeaderPostconditionWarning is set on a response that passed although a
// strict: false postcondition failed on it (docs/API.md).
const HeaderPostconditionWarning = "x-autonomy-postcondition-warning"

// OutcomeStore is the durable state the outcome of a call needs: the
// decision that let it through (found again when the caller does not hold
// it: Envoy's ext_proc stream, a restart between the Check and the
// response), the preflight's output contract, and the frame it writes.
type OutcomeStore interface {
	CallDecision(ctx context.Context, auditID, requestID string) (wal.Frame, error)
	OutputMaxBytes(ctx context.Context, preflightID string) (int64, error)
	AppendOutcome(ctx context.Context, rec wal.OutcomeRecord) (wal.Frame, error)
	HasOutcome(ctx context.Context, auditID, requestID string) (bool, error)
}

var _ OutcomeStore = (*wal.DB)(nil)

// OutcomeObserver is told about each recorded outcome; metrics implement
// it.
type OutcomeObserver interface {
	Outcome(v *Verdict, took time.Duration)
}

// Response is a tool's response as the proxy saw it.
type Response struct {
	Status int
	Body   []byte
	// Err, when set, says the response could not be processed whole (a body
	// over the limit, a broken stream, a timeout, a message out of order):
	// it is judged unverified, never as passing.
	Err error
	// Encoding is the response's Content-Encoding ("" or identity: none).
	// A gzip body is judged decoded; any other encoding cannot be judged
	// and is unverified.
	Encoding string
}

// decoded is r with its body as the tool produced it: a gzip body
// inflated (up to limit bytes), any other encoding an Err.
func (r Response) decoded(limit int64) Response {
	enc := strings.ToLower(strings.TrimSpace(r.Encoding))
	if r.Err != nil || enc == "" || enc == "identity" {
		return r
	}
	r.Encoding = ""
	if enc != "gzip" && enc != "x-gzip" {
		r.Err = fmt.Errorf("content-encoding %q cannot be judged", enc)
		return r
	}
	zr, err := gzip.NewReader(bytes.NewReader(r.Body))
	if err != nil {
		r.Err = fmt.Errorf("gzip body: %w", err)
		return r
	}
	out, err := io.ReadAll(io.LimitReader(zr, limit+1))
	if err == nil && int64(len(out)) > limit {
		err = fmt.Errorf("over %d bytes once inflated", limit)
	}
	if err != nil {
		r.Err = fmt.Errorf("gzip body: %w", err)
		return r
	}
	r.Body = out
	return r
}

// Exchange is one gated request and its response.
type Exchange struct {
	// Request is the request as the gate's Check saw it.
	Request *Request
	// Decision is the gate's decision on Request when the caller holds it
	// (the built-in gateway). Nil makes Outcome find it from the request's
	// x-autonomy-audit-id and x-request-id in the store.
	Decision *Decision
	Response Response
	// ReportedBy names who saw the response (wal.ReporterEnvoy, …);
	// Reporter names the token of a runtime's own report.
	ReportedBy, Reporter string
	// Observed is true when the proxy releases the response whatever the
	// verdict (Envoy's ext_proc observability mode): the outcome is
	// recorded, never enforced.
	Observed bool
}

// Verdict is what the proxy does with a response.
type Verdict struct {
	// Judged is false when the request is not a gated call that the gate
	// let through: nothing was recorded and the response passes as it is.
	Judged bool
	// Release is true when the tool's response may pass; otherwise the
	// caller gets Status and Body instead.
	Release bool
	Status  int
	Body    []byte
	// Warning, when set, is the value of HeaderPostconditionWarning.
	Warning string
	AuditID string
	// Attrs are the recorded frame's attrs.
	Attrs wal.OutcomeAttrs
	// Violation is the clause that decided a violated outcome, if any.
	Violation *wal.OutcomeClause
	// Unrecorded is true when no frame was written for this verdict (the
	// log failed, or judging panicked): the response is refused, and a
	// runtime's report is answered as not recorded.
	Unrecorded bool
}

// outputLimitCacheSize bounds the cache of the output contracts of
// preflights. A recorded limit never changes, so an entry needs no expiry
// (and the cache no sweeper goroutine).
const outputLimitCacheSize = 4096

// outcomes is the gate's state for judging responses.
type outcomes struct {
	store  OutcomeStore
	limits *lru.Cache[string, int64]
	// reports are the calls whose runtime report is being judged, by
	// audit id and request id, so that two reports at once record one
	// outcome.
	reportsMu sync.Mutex
	reports   map[string]bool
}

func newOutcomes(o *Options) outcomes {
	s := o.Outcomes
	if s == nil {
		s, _ = o.Store.(OutcomeStore)
	}
	limits, _ := lru.New[string, int64](outputLimitCacheSize) // the size is positive
	return outcomes{store: s, limits: limits, reports: map[string]bool{}}
}

// errNoDecision is a response whose request no allowed decision is known
// for.
var errNoDecision = errors.New("no decision let this request through")

// Outcome judges a gated call's response (docs/API.md): it evaluates the
// capability's postconditions and invariants and the preflight's output
// contract on it, writes one autonomy.outcome frame under the call's audit
// id, and returns the verdict once the frame is durable. Envoy's ext_proc
// adapter, the built-in gateway and POST /v1/outcome all come here. A
// response it cannot judge is never released as passing in enforce mode.
func (g *Gate) Outcome(ctx context.Context, x *Exchange) (v Verdict) {
	start := time.Now()
	now := g.o.Now()
	if g.o.Mode == ModeDisabled || x.Request == nil {
		return Verdict{Release: true}
	}
	r := x.Request
	if x.Response.Encoding != "" {
		dx := *x
		limit := g.o.MaxBodyBytes
		if limit <= 0 {
			limit = 1 << 20 // the gateway's default bound on what it buffers
		}
		dx.Response = x.Response.decoded(limit)
		x = &dx
	}
	if msgs := g.batchOf(r); msgs != nil {
		return g.outcomeBatch(ctx, x, msgs)
	}
	c := g.gatedCall(r)
	if c == nil {
		return Verdict{Release: true}
	}
	defer func() {
		if p := recover(); p != nil {
			g.o.Logger.ErrorContext(ctx, "outcome panicked; refusing the response", "panic", fmt.Sprint(p))
			v = g.refuse(v)
		}
		if g.o.Observer != nil {
			if ob, ok := g.o.Observer.(OutcomeObserver); ok && v.Judged {
				ob.Outcome(&v, time.Since(start))
			}
		}
	}()
	pol := g.o.Policy()
	attrs := g.responseAttrs(c, x, pol)
	d, err := g.decisionFor(ctx, x, c)
	auditID := r.Headers[HeaderAuditID]
	if d != nil {
		auditID = d.AuditID
		attrs.StepID, attrs.ToolKind, attrs.PreflightID = d.StepID, text(d.ToolKind), d.PreflightID
	}
	if auditID == "" && g.o.NewID != nil {
		auditID = g.o.NewID()
	}
	v = Verdict{Judged: true, AuditID: auditID}
	if err == nil {
		err = g.judgeable(c, d, x, pol)
	}
	var clauses []wal.OutcomeClause
	if err == nil {
		clauses, err = g.afterClauses(ctx, c, d, x, pol, &attrs)
	}
	if clauses == nil {
		clauses = []wal.OutcomeClause{}
	}
	attrs.Clauses = clauses
	if err != nil {
		attrs.Outcome, attrs.Reason, attrs.Detail = wal.OutcomeViolated, preflight.ReasonOutcomeUnverified, err.Error()
		attrs.Enforced = g.enforces(x)
		g.o.Logger.WarnContext(ctx, "tool response could not be judged", "audit_id", auditID, "request_id", c.requestID, "err", err)
	} else {
		g.judge(&attrs, &v, g.enforces(x))
	}
	v.Attrs = attrs
	v.Release = !attrs.Enforced
	if !v.Release {
		v.Status, v.Body = http.StatusBadGateway, violationBody(&attrs, auditID, v.Violation)
	}
	return g.recordOutcome(ctx, now, v)
}

// gatedCall is the call of a response's request when the request is one
// the gate judges, else nil.
func (g *Gate) gatedCall(r *Request) *call {
	c := &call{req: r, requestID: r.Headers[HeaderRequestID]}
	c.gated = isPost(r.Method, r.Headers) && g.gatesPath(r.Path)
	if g.undescribed(r) != nil {
		c.gated = true
	}
	if !c.gated {
		return nil
	}
	// An MCP message other than tools/call passed the ladder ungated
	// (readMCP): its answer is not judged. One the gate cannot read stays
	// gated, and is refused as unverified.
	if g.o.Protocol == ProtocolMCP && g.readCall(c) == nil && !c.gated {
		return nil
	}
	return c
}

// outcomeBatch judges the answer to an MCP batch the gate allowed: each
// tools/call in it as a call of its own (its decision, its outcome frame),
// whose response is the answer's message with its id, or the whole answer
// when none has it (an answer that is not a JSON array: an SSE stream,
// say). The first answer refused refuses the whole batch; a batch with no
// tools/call is not judged.
func (g *Gate) outcomeBatch(ctx context.Context, x *Exchange, msgs []json.RawMessage) Verdict {
	// The answers by id; an id answered twice matches no call, which is
	// then judged on the whole answer.
	answers := map[string]json.RawMessage{}
	twice := map[string]bool{}
	var all []json.RawMessage
	if json.Unmarshal(x.Response.Body, &all) == nil {
		for _, m := range all {
			if k, ok := idKey(peekRPC(m).id); ok {
				if _, dup := answers[k]; dup {
					twice[k] = true
				}
				answers[k] = m
			}
		}
	}
	for k := range twice {
		delete(answers, k)
	}
	// Every call is judged and recorded (each ran on the server); the
	// first refused verdict answers the batch.
	out := Verdict{Release: true}
	var refused *Verdict
	for i, m := range msgs {
		sub := *x
		sub.Request = batchItem(x.Request, m, i)
		if k, ok := idKey(peekRPC(m).id); ok {
			if b, ok := answers[k]; ok {
				sub.Response.Body = b
			}
		}
		if x.Decision != nil {
			sub.Decision = &Decision{} // no decision allowed it: unverified
			if i < len(x.Decision.batch) {
				sub.Decision = &x.Decision.batch[i]
			}
		}
		v := g.Outcome(ctx, &sub)
		switch {
		case !v.Judged:
		case !v.Release:
			if refused == nil {
				refused = &v
			}
		case !out.Judged:
			out = v
		case out.Warning == "":
			out.Warning = v.Warning
		}
	}
	if refused != nil {
		return *refused
	}
	return out
}

// responseAttrs starts the outcome frame's attrs from the response itself.
func (g *Gate) responseAttrs(c *call, x *Exchange, pol Policy) wal.OutcomeAttrs {
	attrs := wal.OutcomeAttrs{Mode: string(g.o.Mode), RequestID: text(c.requestID), ReportedBy: x.ReportedBy,
		Reporter: x.Reporter, Status: x.Response.Status}
	attrs.ResponseBytes = int64(len(x.Response.Body))
	sum := sha256.Sum256(x.Response.Body)
	attrs.ResponseDigest = "sha256:" + hex.EncodeToString(sum[:])
	if pol != nil {
		attrs.BundleRevision = pol.Revision()
	}
	return attrs
}

// judgeable returns why the response cannot be judged, or nil: it arrived
// whole, a bundle is loaded, and the request reads as the call its
// decision allowed. It reads the call into c.
func (g *Gate) judgeable(c *call, d *Decision, x *Exchange, pol Policy) error {
	if x.Response.Err != nil {
		return x.Response.Err
	}
	if pol == nil {
		return errors.New("no policy bundle loaded")
	}
	if rerr := g.readCall(c); rerr != nil {
		return fmt.Errorf("request: %w", rerr)
	}
	if d.ToolKind != "" && c.kind != d.ToolKind {
		return fmt.Errorf("the request names tool kind %q, its decision %q", c.kind, d.ToolKind)
	}
	if !c.argsAllowed(d) {
		return errors.New("the request's args are not the args its decision allowed")
	}
	return nil
}

// argsAllowed reports whether c's args are the ones d allowed, by the
// digest d's frame recorded: a body changed between the check and the
// response (a report, or a filter between ext_authz and ext_proc) is not
// the call that was allowed. A decision held in memory (the gateway's)
// judges the very body it was decided on.
func (c *call) argsAllowed(d *Decision) bool {
	if d.argsDigest == "" {
		return true
	}
	digest, err := c.argsDigest()
	return err == nil && digest == d.argsDigest
}

// afterClauses evaluates the capability's after-call clauses and the
// preflight's output contract on the response, in that order.
func (g *Gate) afterClauses(ctx context.Context, c *call, d *Decision, x *Exchange, pol Policy, attrs *wal.OutcomeAttrs) ([]wal.OutcomeClause, error) {
	var clauses []wal.OutcomeClause
	body := x.Response.Body
	if g.o.Protocol == ProtocolMCP && c.rpc.id != "" {
		// The SDKs' servers answer a tools/call as an SSE stream by default.
		if m, ok := sseAnswer(body, c.rpc.id); ok {
			body = m
		} else if resultAndError(body) {
			body = nil // no answer every reader takes alike (sseAnswer)
		}
	}
	result, isJSON := DecodeResult(body)
	attrs.ResultJSON = isJSON
	if oc, ok := pol.Clauses().(preflight.OutcomeClauses); ok {
		for _, cr := range oc.After(c.kind, preflight.AfterCall{Args: c.argsMap, Result: result, Status: x.Response.Status}) {
			clauses = append(clauses, wal.OutcomeClause{Kind: cr.Clause, Index: cr.Index, Expression: cr.Expression,
				Bindings: cr.Bindings, Held: cr.Held, Strict: cr.Strict, Message: cr.Message, Reason: reasonIfFailed(cr.Held, cr.Reason)})
		}
	}
	if d.PreflightID != "" {
		limit, err := g.outputLimit(ctx, d.PreflightID)
		if errors.Is(err, wal.ErrNotFound) && d.Mode == ModeAdvisory {
			// Advisory mode lets through ids that were never recorded:
			// such a call has no envelope, so no output contract.
			limit, err = wal.NoOutputLimit, nil
		}
		if err != nil {
			return clauses, fmt.Errorf("read the output contract: %w", err)
		}
		if limit != wal.NoOutputLimit {
			clauses = append(clauses, outputContractClause(limit, attrs.ResponseBytes))
		}
	}
	return clauses, nil
}

// recordOutcome writes v's outcome frame and returns v once it is durable,
// or the refusal of the response when it cannot be written.
func (g *Gate) recordOutcome(ctx context.Context, now time.Time, v Verdict) Verdict {
	attrs := &v.Attrs
	// The tool has run: its outcome is recorded also when the client has
	// gone meanwhile.
	if _, werr := g.outcomes.store.AppendOutcome(context.WithoutCancel(ctx), wal.OutcomeRecord{AuditID: v.AuditID, Time: now, Attrs: *attrs}); werr != nil {
		g.o.Logger.ErrorContext(ctx, "cannot write outcome frame; refusing the response", "audit_id", v.AuditID, "err", werr)
		return g.refuse(v)
	}
	g.o.Logger.InfoContext(ctx, "outcome", "audit_id", v.AuditID, "outcome", attrs.Outcome, "reason", attrs.Reason,
		"enforced", attrs.Enforced, "status", attrs.Status, "tool_kind", attrs.ToolKind, "request_id", attrs.RequestID,
		"reported_by", attrs.ReportedBy)
	return v
}

// enforces reports whether a violated outcome of x refuses its response:
// in enforce mode, when the proxy can refuse it.
func (g *Gate) enforces(x *Exchange) bool { return g.o.Mode == ModeEnforce && !x.Observed }

// judge sets the outcome from the clause results: the first strict
// failure decides (enforced when enforce is set); failures of strict:
// false postconditions alone pass with a warning.
func (g *Gate) judge(attrs *wal.OutcomeAttrs, v *Verdict, enforce bool) {
	attrs.Outcome, attrs.Reason = wal.OutcomeOK, preflight.ReasonOutcomeOK
	var warning *wal.OutcomeClause
	for i := range attrs.Clauses {
		cl := &attrs.Clauses[i]
		if cl.Held {
			continue
		}
		if !cl.Strict {
			if warning == nil {
				warning = cl
			}
			continue
		}
		attrs.Outcome, attrs.Reason = wal.OutcomeViolated, cl.Reason
		attrs.Enforced = enforce
		v.Violation = cl
		return
	}
	if warning != nil {
		attrs.Outcome, attrs.Reason = wal.OutcomeViolated, warning.Reason
		v.Violation = warning
		if enforce {
			attrs.Warning = true
			v.Warning = warning.Reason
		}
	}
}

// refuse turns v into a 502 that names no clause: the response could not
// be judged or its judgement not recorded.
func (g *Gate) refuse(v Verdict) Verdict {
	v.Judged, v.Release, v.Warning, v.Violation, v.Unrecorded = true, false, "", nil, true
	v.Attrs.Outcome, v.Attrs.Reason, v.Attrs.Enforced = wal.OutcomeViolated, preflight.ReasonOutcomeUnverified, true
	v.Status, v.Body = http.StatusBadGateway, violationBody(&v.Attrs, v.AuditID, nil)
	return v
}

// decisionFor is the decision that let x's request through: the one the
// caller holds, or the decision frame the store has for its audit id and
// request id.
func (g *Gate) decisionFor(ctx context.Context, x *Exchange, c *call) (*Decision, error) {
	if x.Decision != nil {
		if !x.Decision.Allowed || !x.Decision.Gated {
			return nil, errNoDecision
		}
		return x.Decision, nil
	}
	auditID := c.req.Headers[HeaderAuditID]
	if auditID == "" || c.requestID == "" {
		return nil, fmt.Errorf("%w: the request carries no %s or no %s", errNoDecision, HeaderAuditID, HeaderRequestID)
	}
	if g.outcomes.store == nil {
		return nil, errors.New("no store for outcomes")
	}
	f, err := g.outcomes.store.CallDecision(ctx, auditID, c.requestID)
	if errors.Is(err, wal.ErrNotFound) && c.req.batchItem {
		// A batch's message that presented a known preflight was decided
		// under the preflight's audit id, the others under the batch's.
		if id := g.preflightAuditID(ctx, c); id != "" {
			auditID = id
			f, err = g.outcomes.store.CallDecision(ctx, auditID, c.requestID)
		}
	}
	if errors.Is(err, wal.ErrNotFound) {
		return nil, fmt.Errorf("%w: none under audit id %q for request id %q", errNoDecision, auditID, c.requestID)
	}
	if err != nil {
		return nil, err
	}
	a, err := f.Decision()
	if err != nil {
		return nil, err
	}
	return &Decision{Allowed: true, Gated: true, AuditID: auditID, Mode: Mode(a.Mode), PreflightID: a.PreflightID,
		StepID: a.StepID, ToolKind: a.ToolKind, RequestID: c.requestID, argsDigest: a.ArgsDigest}, nil
}

// preflightAuditID is the audit id of the known preflight c's request
// presents, or "".
func (g *Gate) preflightAuditID(ctx context.Context, c *call) string {
	if g.readCall(c) != nil {
		return ""
	}
	if g.presented(ctx, c, g.o.Now()); c.bound == nil {
		return ""
	}
	return c.b.AuditID
}

// outputLimit is the outputContract.maxBytes of a preflight, cached: it
// never changes once recorded.
func (g *Gate) outputLimit(ctx context.Context, preflightID string) (int64, error) {
	if n, ok := g.outcomes.limits.Get(preflightID); ok {
		return n, nil
	}
	if g.outcomes.store == nil {
		return 0, errors.New("no store for outcomes")
	}
	n, err := g.outcomes.store.OutputMaxBytes(ctx, preflightID)
	if err != nil {
		return 0, err
	}
	g.outcomes.limits.Add(preflightID, n)
	return n, nil
}

// outputContractClause is the output contract's row: the response body
// against the envelope's outputContract.maxBytes.
func outputContractClause(limit, size int64) wal.OutcomeClause {
	cl := wal.OutcomeClause{Kind: preflight.ClauseOutputContract, Expression: "size(response) <= outputContract.maxBytes",
		Bindings: map[string]any{"outputContract.maxBytes": limit, "size(response)": size}, Held: size <= limit, Strict: true}
	if !cl.Held {
		cl.Reason = preflight.ReasonOutputContractViolated
		cl.Message = "output contract violated: the response body is " + strconv.FormatInt(size, 10) +
			" bytes, over the envelope's outputContract.maxBytes of " + strconv.FormatInt(limit, 10)
	}
	return cl
}

func reasonIfFailed(held bool, reason string) string {
	if held {
		return ""
	}
	return reason
}

// DecodeResult reads a response body as the JSON value postconditions see
// as result. It reports false, and result is nil (CEL's null), when the
// body is not one JSON text in UTF-8, or holds what readers read apart (a
// member named twice, names that differ only in case, a number beyond the
// double's range or one whose text names another value than its double,
// such as 75.000000000000001 or -1e-400): a result the caller's parser may
// read otherwise is not judged in one reading.
func DecodeResult(body []byte) (result any, isJSON bool) {
	if len(body) == 0 || canon.CheckText(body) != nil {
		return nil, false
	}
	doc, err := parseBody(body)
	if err != nil || checkExactValues(doc) != nil {
		return nil, false
	}
	return doc, true
}

// violationBody is the 502 body of docs/API.md:
// {"error":{"code","reason","audit_id","clause":{"kind","expression","bindings","message"}}};
// without a clause for a response that could not be judged.
func violationBody(a *wal.OutcomeAttrs, auditID string, cl *wal.OutcomeClause) []byte {
	type clauseBody struct {
		Kind       string         `json:"kind"`
		Expression string         `json:"expression"`
		Bindings   map[string]any `json:"bindings"`
		Message    string         `json:"message"`
	}
	type errBody struct {
		Code    string      `json:"code"`
		Reason  string      `json:"reason"`
		AuditID string      `json:"audit_id"`
		Clause  *clauseBody `json:"clause,omitempty"`
	}
	d := Decision{Reason: a.Reason}
	e := errBody{Code: d.Code(), Reason: a.Reason, AuditID: auditID}
	if cl != nil {
		b := cl.Bindings
		if b == nil {
			b = map[string]any{}
		}
		e.Clause = &clauseBody{Kind: cl.Kind, Expression: cl.Expression, Bindings: b, Message: cl.Message}
	}
	out, err := marshalBody(e)
	if err != nil {
		// Bindings hold decoded JSON values, which always encode; keep a
		// body the caller can read anyway.
		e.Clause.Bindings = map[string]any{}
		out, _ = marshalBody(e)
	}
	return out
}

// marshalBody writes {"error": e} without HTML escaping, so an expression
// such as args.n < 5 reads as written.
func marshalBody(e any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(map[string]any{"error": e}); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
