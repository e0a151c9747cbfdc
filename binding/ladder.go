package binding

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// ladder runs rungs 1 to 6. It sets c.contract to the first failure, c.bound
// when the header resolved, and c.status to 503 when it could not decide.
func (g *Gate) ladder(ctx context.Context, c *call, gov *preflight.Governance, now time.Time) {
	if !c.idRead { // readMCP took it from the header or params._meta
		c.headerID, c.hasHeader = c.req.Headers[HeaderPreflightID]
	}
	if !c.hasHeader {
		if gov.RequiresPreflight(c.kind) {
			c.contract = preflight.ReasonPreflightRequired
		}
		return
	}
	if !idShape.MatchString(c.headerID) {
		c.contract = preflight.ReasonPreflightRequired
		return
	}
	e, err := g.lookup(ctx, c.headerID, now)
	if errors.Is(err, wal.ErrNotFound) {
		c.contract = preflight.ReasonPreflightRequired
		return
	}
	if err != nil {
		c.status, c.errDetail = http.StatusServiceUnavailable, err
		return
	}
	if err := e.binding(&c.b, c.step[:0]); err != nil {
		c.status, c.errDetail = http.StatusServiceUnavailable, err
		return
	}
	c.bound = e
	b := &c.b
	if !b.Admits(c.kind) || (c.identity != "" && c.identity != b.ActorID) {
		c.contract = preflight.ReasonBindingMismatch
		return
	}
	capability, _ := gov.Capability(c.kind)
	// Every consume records the call's digest (a repeat must match it), so
	// args without one bind nothing.
	d, err := c.argsDigest()
	if err != nil || (capability.BindArguments && c.noBody) { // no body: the args are unknown, not {}
		c.contract = preflight.ReasonBindingMismatch
		return
	}
	if capability.BindArguments {
		c.digest = d
	}
	r := g.consumeRequest(c, now)
	// Arguments that no step of the kind was preflighted with are a
	// mismatch (rung 4), found before the expiry of rung 5: a property of
	// the binding, which the entry answers without the store.
	status, known := c.bound.knownPlan(&r)
	if known && status == wal.Mismatch {
		c.contract = preflight.ReasonBindingMismatch
		return
	}
	if !now.Before(b.ExpiresAt) {
		c.contract = preflight.ReasonExpired
		return
	}
	if b.NeedsApproval() {
		reason, err := g.approvalRung(ctx, c, &r, d)
		if err != nil {
			c.status, c.errDetail = http.StatusServiceUnavailable, err
			return
		}
		if reason != "" {
			c.contract = reason
			return
		}
		status, known = c.bound.knownPlan(&r)
	}
	if known {
		c.contract = c.planContract(status)
		return
	}
	if g.o.Mode == ModeEnforce && g.o.PeekInConsume {
		// Enforced, a call that reaches the consume learns what the peek
		// would say from the consume's own transaction, which answers a
		// replay exactly as the peek would: on a shared store that is one
		// request instead of two. A call that ends before it peeks then
		// (settle). Advisory calls peek now: the policy sees the preflight
		// only when the ladder passed. A local store peeks now too: its
		// read is cheap, and a failing read denies before the policy runs.
		c.peek = &r
		return
	}
	g.peekStore(ctx, c, &r)
}

// peekStore sets c.contract from what consuming r would do now.
func (g *Gate) peekStore(ctx context.Context, c *call, r *wal.ConsumeRequest) {
	res, err := g.o.Store.Peek(ctx, *r)
	if err != nil {
		c.status, c.errDetail = http.StatusServiceUnavailable, err
		return
	}
	// A peek's Consumed is a free step: only the markers it read are spent.
	c.bound.markAll(len(c.b.Steps), res.Spent)
	c.contract = c.planContract(res.Status)
}

// settle runs the peek the ladder left to the consume, for a call that ends
// without one: its answer outranks the clauses and the policy, as when the
// ladder peeks itself.
func (g *Gate) settle(ctx context.Context, c *call) {
	if r := c.peek; r != nil {
		c.peek = nil
		g.peekStore(ctx, c, r)
	}
}

// approvalRung is the approval layer of the ladder, after the expiry and
// before the replay (docs/API.md). It holds back each step of the call's kind
// and args that waits for an approval not given, and refuses the call when
// no step it could consume is left: approval: pending while one of them
// may still be approved, approval: rejected when all were rejected. A step
// that needs an approval is held back from a call with other args (digest)
// than it was preflighted with, whether or not its capability binds
// arguments: an approval allows the step with those args only; a call
// whose args no step it could consume has is a mismatch. The states are
// read from the store: an approval given on another replica counts at
// once.
func (g *Gate) approvalRung(ctx context.Context, c *call, r *wal.ConsumeRequest, digest string) (string, error) {
	steps := c.b.Steps
	free, pending, rejected, argsMatched := false, false, false, false
	hold := func(i int) {
		if c.held == nil {
			c.held = make([]bool, len(steps))
		}
		c.held[i] = true
	}
	for i := range steps {
		s := &steps[i]
		if !r.Matches(s) {
			continue
		}
		if s.Approval == nil {
			free = true
			continue
		}
		if c.noBody || s.ArgsDigest != digest { // no body: the args are unknown
			hold(i)
			continue
		}
		argsMatched = true
		a, err := g.o.Store.Approval(ctx, c.b.PreflightID, s.ID)
		if errors.Is(err, wal.ErrNotFound) {
			// The binding says the step waits for one: a missing record
			// (removed with an expired binding) gives nothing.
			a.State = wal.ApprovalPending
		} else if err != nil {
			return "", err
		}
		switch {
		case a.State == wal.ApprovalApproved && a.ArgsDigest == s.ArgsDigest:
			free = true
			continue
		case a.State == wal.ApprovalRejected:
			rejected = true
		default:
			pending = true
		}
		hold(i)
	}
	r.Held = c.held
	switch {
	case pending:
		c.heldReason = preflight.ReasonApprovalPending
	case rejected:
		c.heldReason = preflight.ReasonApprovalRejected
	}
	switch {
	case free:
		return "", nil
	case !argsMatched:
		return preflight.ReasonBindingMismatch, nil
	}
	return c.heldReason, nil
}

// planContract is planContract for the call: a replay of the steps it may
// consume while others of its kind still wait for an approval is the
// approval's reason, not a replay.
func (c *call) planContract(s wal.ConsumeStatus) string {
	if s == wal.Replay && c.heldReason != "" {
		return c.heldReason
	}
	return planContract(s)
}

// planContract is the ladder's reason for what a consume would do: none
// when it would consume or repeat an allow.
func planContract(s wal.ConsumeStatus) string {
	switch s {
	case wal.Mismatch:
		return preflight.ReasonBindingMismatch
	case wal.Replay:
		return preflight.ReasonReplay
	case wal.Gone:
		return preflight.ReasonExpired
	}
	return ""
}

// lookup finds a binding in the cache, then in the store. A cache entry is
// served until min(TTL ceiling, the binding's expiry); evicting it changes
// no answer: consumption is checked in the store unless the entry knows
// the step spent, which it learns only from a durable consume (spent.go),
// and an entry rebuilt after an eviction knows nothing and asks the store
// again. An entry rebuilt because its TTL ran out keeps what the old one
// knew spent: a durable marker stays while the binding can be used, so
// a replay after the TTL is still answered without the store.
// The store reads no decision JSON until the policy needs it (decisionDoc).
func (g *Gate) lookup(ctx context.Context, id string, now time.Time) (*entry, error) {
	var stale *entry
	if e, ok := g.cache.Get(id); ok {
		if now.UnixNano() < e.until {
			g.observeCache(true)
			return e, nil
		}
		g.cache.Remove(id)
		stale = e
	}
	g.observeCache(false)
	b, err := g.o.Store.Binding(ctx, id)
	if err != nil {
		return nil, err
	}
	e := g.remember(&b, now)
	if stale != nil {
		e.inherit(stale, len(b.Steps))
	}
	return e, nil
}

// remember caches binding b, read or recorded at now, until the TTL
// ceiling or its expiry, whichever is first.
func (g *Gate) remember(b *preflight.Binding, now time.Time) *entry {
	until := now.Add(g.o.CacheTTL)
	if b.ExpiresAt.Before(until) {
		until = b.ExpiresAt
	}
	e := &entry{packed: wal.PackBinding(b), until: until.UnixNano()}
	if now.Before(until) {
		g.cache.Add(e.id(), e) // the key is the entry's own id: the request's string is not kept
	}
	return e
}

// id is the preflight id of e's binding, a substring of e.packed.
func (e *entry) id() string { return wal.PackedID(e.packed) }

// binding fills b with e's binding, its steps in steps' memory when they
// fit: the values a read of the store returns.
func (e *entry) binding(b *preflight.Binding, steps []preflight.BoundStep) error {
	return wal.UnpackBinding(e.packed, b, steps)
}

// Recorded caches binding b, which the caller has just recorded durably in
// the gate's store, so the first Check of its id needs no read of the store
// (on a WAL, the read of the preflight frame and its comparison with the
// record: half of a consuming Check's CPU). The cache keeps it packed, as
// a read of the compact record would: a hit sees what a miss would read,
// and the entry holds no part of the request it was derived from.
func (g *Gate) Recorded(b *preflight.Binding) {
	g.remember(b, g.o.Now())
}

func (g *Gate) observeCache(hit bool) {
	if g.o.Observer != nil {
		g.o.Observer.CacheLookup(hit)
	}
}

func (g *Gate) consumeRequest(c *call, now time.Time) wal.ConsumeRequest {
	// The ladder refused args without a digest; computing it here also
	// keeps it out of the WAL's commit loop, where the frame is built.
	digest, _ := c.argsDigest()
	if c.noBody {
		digest = "" // the args are unknown (frame)
	}
	return wal.ConsumeRequest{Binding: &c.b, Kind: c.kind, ArgsDigest: c.digest,
		RequestID: c.requestID, CallDigest: digest, Time: now, Held: c.held}
}

// frame builds the autonomy.decision frame for d, its attrs in canonical
// JSON (wal.DecisionAttrs). The strings taken from the request (headers,
// method, path) are recorded with each byte that is not UTF-8 as U+FFFD
// (text): every gated request gets its frame, whatever it carries. Raw
// args that cannot be written go to the log as the error, which refuses
// it: the write fails, and so the answer (503).
func (g *Gate) frame(c *call, d *Decision, now time.Time) wal.FrameInput {
	outcome, reason, enforced := d.Recorded()
	a := wal.DecisionAttrs{Enforced: enforced, Method: text(c.req.Method), Mode: string(g.o.Mode), Outcome: outcome,
		Path: text(pathOnly(c.req.Path)), PreflightID: text(d.PreflightID), Reason: reason, RequestID: text(c.requestID),
		Status: d.Status, StepID: d.StepID, ToolKind: text(c.kind)}
	if c.identity != "" {
		a.Actor = text(c.identity)
	}
	if !d.Allowed {
		a.AdvisoryReason = d.AdvisoryReason
	}
	if v := c.clause; v != nil {
		a.Clause = &wal.DecisionClause{Kind: v.Clause, Index: v.Index, Expression: text(v.Expression)}
	}
	// A call without a body (its kind from gate.kind_header) is judged on
	// args {}, but its real args are unknown: no digest is recorded for
	// them.
	if c.gated && c.argsMap != nil && !c.noBody {
		if g.o.StoreRawRequests {
			a.Args = c.argsMap
		}
		if digest, err := c.argsDigest(); err == nil {
			a.ArgsDigest = digest
		}
	}
	// The revision of the bundle that decided, not of whatever is loaded by
	// now: a reload may land between the decision and this frame.
	if c.policy != nil {
		c.revision = c.policy.Revision() // kept in the call: no string of its own on the heap
		a.BundleRevision = &c.revision
	}
	in := wal.FrameInput{Kind: wal.KindDecision, AuditID: d.AuditID, Time: now}
	if b, err := a.Canonical(); err != nil {
		in.Attrs = err
	} else {
		in.Attrs = b
	}
	return in
}

// text is s with every byte that is not UTF-8 as U+FFFD; s itself when it
// is valid, as it nearly always is.
func text(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// record writes the decision frame and returns d once the frame is durable:
// an allow, and a deny too, whose audit id the caller may look up at once
// and which a crash must not lose (wal/doc.go, "Durable before answered").
// Concurrent decisions share commits. A write failure turns any decision
// into a 503 deny.
func (g *Gate) record(ctx context.Context, c *call, d Decision, now time.Time) Decision {
	// Every gated request's decision is recorded, also when its client
	// has gone meanwhile: a caller that hangs up must not keep its
	// attempt out of the audit.
	refusal := d.Status == http.StatusServiceUnavailable && d.Reason == reasonVerifierMissing
	if _, err := g.appendDecision(ctx, g.frame(c, &d, now), refusal); err != nil {
		g.o.Logger.ErrorContext(ctx, "cannot write decision frame; denying", "audit_id", d.AuditID, "err", err)
		if refusal {
			return d // the frame, if the log took it, says what the caller gets
		}
		return g.recordRefusal(ctx, c, d, now)
	}
	return d
}

// appendDecision appends a decision frame, also when the caller has gone
// meanwhile; a refusal's through RefusalLog when the log is one.
func (g *Gate) appendDecision(ctx context.Context, in wal.FrameInput, refusal bool) (wal.Frame, error) {
	ctx = context.WithoutCancel(ctx)
	if rl, ok := g.o.Log.(RefusalLog); ok && refusal {
		return rl.AppendRefusal(ctx, in)
	}
	return g.o.Log.AppendDecision(ctx, in)
}

// recordRefusal turns d, whose write failed, into the 503 refusal and
// records that on its own, in case the log takes the write: a write can
// fail after the log took its frame (on etcd, when only the frame's copy
// failed), and the last decision frame of a request must be what its
// caller got. When the log refuses this write too, the error already
// logged is the cause: one line is enough.
func (g *Gate) recordRefusal(ctx context.Context, c *call, d Decision, now time.Time) Decision {
	d = g.unavailable(d)
	if _, err := g.appendDecision(ctx, g.frame(c, &d, now), true); err != nil {
		g.o.Logger.DebugContext(ctx, "cannot write the refusal's decision frame either", "audit_id", d.AuditID, "err", err)
	}
	return d
}

// consume marks one step consumed and writes the decision frame in the same
// durable commit; the allow is returned only after both are on disk.
func (g *Gate) consume(ctx context.Context, c *call, d Decision, now time.Time) Decision {
	r := g.consumeRequest(c, now)
	var final Decision
	r.Decision = func(res wal.ConsumeResult) wal.FrameInput {
		final = g.afterConsume(c, d, res)
		return g.frame(c, &final, now)
	}
	res, err := g.o.Store.Consume(ctx, r)
	if err == nil {
		c.bound.learn(res, c.requestID, len(c.b.Steps))
	}
	if err != nil {
		g.o.Logger.ErrorContext(ctx, "cannot consume preflight step; denying", "audit_id", d.AuditID, "err", err)
		return g.recordRefusal(ctx, c, d, now)
	}
	return final
}

// afterConsume is the answer once the atomic consume has spoken: a step
// consumed (or already consumed by this same request id) allows; a replay or
// mismatch found at this point is a contract failure, enforced or advisory.
func (g *Gate) afterConsume(c *call, d Decision, res wal.ConsumeResult) Decision {
	switch res.Status {
	case wal.Consumed, wal.Repeated:
		d.StepID = res.StepID
		return d
	}
	reason := c.planContract(res.Status)
	if g.o.Mode == ModeEnforce {
		d.Allowed, d.Status, d.Reason = false, http.StatusForbidden, reason
		return d
	}
	d.AdvisoryReason, d.Reason = reason, preflight.ReasonPolicyAllowed
	return d
}
