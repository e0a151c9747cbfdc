package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/extauthz"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// The service's own API under the gateway (Options.API): the routes the
// shipped Envoy configs send to the service with ext_authz disabled.
const (
	PreflightPath = "/v1/preflight"
	AuditPrefix   = "/v1/audit/"
	ApprovalsPath = "/v1/approvals"
)

var (
	// ErrEscapedSlash rejects a path with %2F, %5C or \ in it: the gate and the
	// upstream could decode it differently, so one of them would judge a
	// different path than the other serves (Envoy's configs reject it too).
	ErrEscapedSlash = errors.New("gateway: escaped slash in path")
)

// Options configures the gateway.
type Options struct {
	Gate extauthz.Checker
	// Judge, when set, judges the response of every gated call the gate
	// let through (docs/API.md): the response is buffered (up to
	// MaxBodyBytes), its outcome recorded, and only then released, or
	// replaced by the 502 of a violation.
	Judge    extauthz.Judge
	Upstream *url.URL
	// API, when set, serves /v1/preflight, /v1/preflight/... and
	// /v1/audit/... without the gate, so that one front URL carries an
	// agent's preflights, its audit reads and its tool calls, as it does
	// behind Envoy. Nil sends every path through the gate to the upstream.
	API http.Handler
	// NewRequestID returns the x-request-id given to each gated request;
	// nil means a random UUID, as Envoy issues.
	NewRequestID func() string
	// MaxBodyBytes bounds the body read for the check.
	MaxBodyBytes int64
	// ActorHeader is gate.actor_header: the gateway faces the client, so a
	// value the client sent is removed before the check, as a proxy in
	// front must remove it (docs/DEPLOY.md, section 4).
	ActorHeader string
	// TrustedProxies are the peers whose ActorHeader is kept: a proxy in
	// front that authenticates the caller and sets the header itself
	// (gateway.trusted_proxies). From any other peer it is removed.
	TrustedProxies []netip.Prefix
	Logger         *slog.Logger
	// OnError, when set, is told the code of each error the gateway
	// answers itself (the service counts them in autonomy_errors_total).
	OnError func(code string)
	// UpstreamTimeout bounds the wait for the upstream's response headers
	// after an allow; past it the client gets 502 upstream-unavailable
	// (the step is spent: the upstream may have run the call). Zero waits
	// as long as the upstream takes. Not applied to Transport.
	UpstreamTimeout time.Duration
	// Transport, when set, replaces the proxy's transport (tests).
	Transport http.RoundTripper
}

// Gateway is an http.Handler.
type Gateway struct {
	o     Options
	proxy *httputil.ReverseProxy
}

// New returns a gateway that forwards allowed requests to o.Upstream.
func New(o Options) *Gateway {
	if o.NewRequestID == nil {
		o.NewRequestID = uuid.NewString
	}
	g := &Gateway{o: o}
	transport := o.Transport
	if transport == nil && o.UpstreamTimeout > 0 {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ResponseHeaderTimeout = o.UpstreamTimeout
		transport = t
	}
	g.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(o.Upstream)
			pr.SetXForwarded()
			pr.Out.Host = o.Upstream.Host
		},
		// The client learns the request id the gate and the upstream saw,
		// to find its call in the runtime's logs and the audit frames.
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode == http.StatusSwitchingProtocols {
				// The gateway refuses every upgrade, so a 101 answers a
				// request that asked for none: no response to judge or
				// release (ErrorHandler records the call's one outcome).
				return errUnaskedUpgrade
			}
			resp.Header.Set(binding.HeaderRequestID, resp.Request.Header.Get(binding.HeaderRequestID))
			// The audit id and the advisory reason are the gate's to state:
			// a runtime's copies would point the client at another call,
			// spelt with underscores too, as on the request.
			for k := range resp.Header {
				if n := readAs(k); n == http.CanonicalHeaderKey(binding.HeaderAuditID) ||
					n == http.CanonicalHeaderKey(binding.HeaderAdvisoryReason) {
					delete(resp.Header, k)
				}
			}
			// Every call the gate recorded names its decision, gated or
			// not (mode disabled), so the client can find it.
			if id, ok := resp.Request.Context().Value(auditKey{}).(string); ok && id != "" {
				resp.Header.Set(binding.HeaderAuditID, id)
			}
			if x, ok := resp.Request.Context().Value(exchangeKey{}).(*binding.Exchange); ok {
				g.judgeResponse(resp, x)
			}
			return nil
		},
		Transport: transport,
		// Stream responses as they come, like Envoy does.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if o.Logger != nil {
				o.Logger.Error("gateway upstream failed", "err", err, "path", r.URL.Path)
			}
			auditID := ""
			if x, ok := r.Context().Value(exchangeKey{}).(*binding.Exchange); ok {
				// No response to judge: the call's outcome says so, under
				// the audit id the caller is told.
				x.Response = binding.Response{Err: fmt.Errorf("upstream: %w", err)}
				auditID = g.o.Judge.Outcome(context.WithoutCancel(r.Context()), x).AuditID
			}
			if auditID != "" {
				w.Header().Set(binding.HeaderAuditID, auditID)
			}
			// The client learns the request id, as on every answer.
			w.Header().Set(binding.HeaderRequestID, r.Header.Get(binding.HeaderRequestID))
			g.writeErrorFor(w, http.StatusBadGateway, preflight.CodeUpstreamUnavailable, preflight.ReasonGatewayUpstreamUnavailable, auditID)
		},
	}
	return g
}

// ServeHTTP checks the request and forwards it when allowed. The body is
// read once for the check (up to MaxBodyBytes) and replayed to the
// upstream; the response streams back.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if err := normalizePath(r.URL); err != nil {
		g.writeError(w, http.StatusBadRequest, preflight.CodePathRejected, preflight.ReasonGatewayEscapedSlash)
		return
	}
	if g.o.API != nil && isAPIPath(r.URL.Path) {
		g.o.API.ServeHTTP(w, r)
		return
	}
	// A protocol upgrade would turn the connection into a tunnel whose
	// later requests reach the upstream unchecked.
	if r.Header.Get("Upgrade") != "" {
		g.writeError(w, http.StatusBadRequest, preflight.CodeUpgradeRefused, preflight.ReasonGatewayUpgradeRefused)
		return
	}
	// The gateway is the proxy: headers only it may set are removed from
	// what the client sent, so they cannot be forged; spelt with
	// underscores too, which some servers read as dashes (Envoy's configs
	// refuse such names outright).
	trusted := g.fromTrustedProxy(r)
	for k := range r.Header {
		if trusted && g.o.ActorHeader != "" && http.CanonicalHeaderKey(k) == http.CanonicalHeaderKey(g.o.ActorHeader) {
			continue // set by the proxy in front, which authenticated the caller
		}
		if g.proxyOnly(readAs(k)) {
			delete(r.Header, k)
		}
	}
	// The headers named in Connection are dropped on the way out, after the
	// check: the client must not name those the gateway sets or the gate
	// read. The body is read whole below, so the client's trailers and its
	// Expect have nothing left to do and are not passed on.
	keepHeaders(r.Header, binding.HeaderAuditID, binding.HeaderAdvisoryReason, binding.HeaderRequestID,
		binding.HeaderPreflightID, g.o.ActorHeader)
	r.Header.Del("Expect")
	// The gate takes a repeated request id for a retry of the request that
	// consumed the preflight and allows it again. Only a proxy may choose
	// the id, so the client's is replaced: the gateway never retries.
	requestID := g.o.NewRequestID()
	r.Header.Set(binding.HeaderRequestID, requestID)

	req := extauthz.RequestFromHTTP(r, g.o.MaxBodyBytes)
	req.Method, req.Path = r.Method, r.URL.RequestURI()
	d := g.o.Gate.Check(r.Context(), req)
	if !d.Allowed {
		w.Header().Set(binding.HeaderRequestID, requestID)
		extauthz.WriteClientDeny(w, &d)
		return
	}
	if req.BodyErr != nil {
		// An ungated request whose body was not read whole (over the
		// limit, or the client stopped sending): what was read is not the
		// request, and the upstream must not be handed it as if it were.
		// A gated one was denied above, as unreadable.
		if errors.Is(req.BodyErr, extauthz.ErrBodyTooLarge) {
			g.writeError(w, http.StatusRequestEntityTooLarge, preflight.CodeRequestTooLarge, preflight.ReasonGatewayRequestTooLarge)
		} else {
			g.writeError(w, http.StatusBadRequest, preflight.CodeBodyUnreadable, preflight.ReasonGatewayBodyUnreadable)
		}
		return
	}
	for k, v := range d.UpstreamHeaders() {
		r.Header.Set(k, v)
	}
	r = r.WithContext(context.WithValue(r.Context(), auditKey{}, d.AuditID))
	r.Body = io.NopCloser(bytes.NewReader(req.Body))
	// Replayed with its length: a chunked client body would otherwise go
	// on chunked, and a runtime that reads only Content-Length would get
	// none of the args the gate judged.
	r.ContentLength, r.TransferEncoding = int64(len(req.Body)), nil
	r.Trailer = nil
	if g.o.Judge != nil && d.Gated {
		x := &binding.Exchange{Request: req, Decision: &d, ReportedBy: wal.ReporterGateway}
		r = r.WithContext(context.WithValue(r.Context(), exchangeKey{}, x))
		if g.o.UpstreamTimeout > 0 {
			r = r.WithContext(context.WithValue(r.Context(), answerByKey{}, start.Add(g.o.UpstreamTimeout)))
		}
		g.proxy.ServeHTTP(finalOnly{w}, r)
		return
	}
	g.proxy.ServeHTTP(streamWriter{finalOnly{w}}, r)
}

// readAs is the header name k is read as by a server that takes
// underscores for dashes, canonical.
func readAs(k string) string { return http.CanonicalHeaderKey(strings.ReplaceAll(k, "_", "-")) }

// finalOnly passes on the upstream's final answer alone. The proxy would
// hand the client each informational (1xx) answer as it comes, with its
// headers: before the response is judged and its outcome frame durable,
// with headers only the gate may set (x-autonomy-*), and past an output
// contract's bound. None is needed: the gateway answers Expect:
// 100-continue itself and refuses every upgrade.
type finalOnly struct{ http.ResponseWriter }

func (f finalOnly) WriteHeader(code int) {
	if code >= 100 && code < 200 {
		return // the proxy clears the 1xx answer's headers after this call
	}
	f.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController (the proxy's flushes) reach the
// connection's writer.
func (f finalOnly) Unwrap() http.ResponseWriter { return f.ResponseWriter }

// exchangeKey is the context key of a gated call's exchange, set for the
// proxy's ModifyResponse and ErrorHandler.
type exchangeKey struct{}

// auditKey is the context key of the audit id of the decision that let a
// call through ("" when the gate recorded none).
type auditKey struct{}

// answerByKey is the context key of the time by which a gated call's
// response must have been read whole to be judged.
type answerByKey struct{}

// streamWriter lifts the write deadline (http.write_timeout) of an event
// stream the gateway passes on unjudged, such as an MCP session's GET
// stream: it stays open for as long as the session, and what the server
// sends on it after the deadline would otherwise be lost with the
// connection.
type streamWriter struct{ http.ResponseWriter }

func (s streamWriter) WriteHeader(code int) {
	if mt, _, _ := mime.ParseMediaType(s.Header().Get("Content-Type")); mt == "text/event-stream" {
		_ = http.NewResponseController(s.ResponseWriter).SetWriteDeadline(time.Time{})
	}
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController (the proxy's flushes) reach the
// connection's writer.
func (s streamWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// errResponseTooLarge is a response body over MaxBodyBytes: it is not
// buffered whole, so it cannot be judged.
var errResponseTooLarge = errors.New("gateway: response body over the limit")

// errAnswerTooSlow is a response whose body did not end within the answer
// window (UpstreamTimeout from the request's arrival; an SSE answer sends
// its headers at once): judged unverified while the client can still be
// answered, rather than cut off by the write deadline.
var errAnswerTooSlow = errors.New("gateway: the response body did not end within the answer window")

// errUnaskedUpgrade is a 101 from the upstream: the gateway refuses every
// upgrade, so no request it forwards asked for one.
var errUnaskedUpgrade = errors.New("gateway: the upstream switched protocols unasked")

// judgeResponse buffers resp's body, has the gate judge it, and leaves
// resp as the client gets it: the tool's response (with the warning header
// when a strict: false postcondition failed), or the 502 of a violation.
// It runs before any byte of the response is written, so the outcome frame
// is durable before the response is released.
func (g *Gateway) judgeResponse(resp *http.Response, x *binding.Exchange) {
	limit := g.o.MaxBodyBytes
	if limit <= 0 {
		limit = 1 << 20
	}
	var late atomic.Bool
	if by, ok := resp.Request.Context().Value(answerByKey{}).(time.Time); ok {
		t := time.AfterFunc(time.Until(by), func() { late.Store(true); resp.Body.Close() })
		defer t.Stop()
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil && late.Load() {
		err = errAnswerTooSlow
	}
	x.Response = binding.Response{Status: resp.StatusCode, Body: body,
		Encoding: strings.Join(resp.Header.Values("Content-Encoding"), ",")}
	switch {
	case err != nil:
		x.Response.Err = fmt.Errorf("read the response body: %w", err)
	case int64(len(body)) > limit:
		x.Response.Err, x.Response.Body = errResponseTooLarge, body[:limit]
	}
	v := g.o.Judge.Outcome(context.WithoutCancel(resp.Request.Context()), x)
	resp.Header.Del(binding.HeaderPostconditionWarning) // only the gate sets it
	if v.Release {
		if v.Warning != "" {
			resp.Header.Set(binding.HeaderPostconditionWarning, v.Warning)
		}
		if v.AuditID != "" {
			resp.Header.Set(binding.HeaderAuditID, v.AuditID)
		}
		rest := resp.Body
		if x.Response.Err == nil {
			resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(body))
			resp.ContentLength = int64(len(body))
			resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
			// Replayed with its length, the body ends where it was read:
			// trailers that followed it are not sent, so none is announced.
			resp.TransferEncoding, resp.Trailer = nil, nil
			resp.Header.Del("Trailer")
		} else {
			// Advisory mode lets an unjudged response through: what was
			// read, then the rest as it comes.
			resp.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(body), rest), rest}
		}
		return
	}
	resp.Body.Close()
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(v.Body)))
	h.Set(binding.HeaderAuditID, v.AuditID)
	h.Set(binding.HeaderRequestID, resp.Header.Get(binding.HeaderRequestID))
	resp.StatusCode, resp.Status = v.Status, strconv.Itoa(v.Status)+" "+http.StatusText(v.Status)
	resp.Header, resp.Trailer, resp.TransferEncoding = h, nil, nil
	resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(v.Body)), int64(len(v.Body))
}

// fromTrustedProxy reports whether r came from one of o.TrustedProxies.
func (g *Gateway) fromTrustedProxy(r *http.Request) bool {
	if len(g.o.TrustedProxies) == 0 {
		return false
	}
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	addr := peer.Addr().Unmap()
	return slices.ContainsFunc(g.o.TrustedProxies, func(p netip.Prefix) bool { return p.Contains(addr) })
}

// proxyOnly reports whether the canonical header name k is one only a
// proxy may set: the client's value is removed (the request id is then
// the gateway's own).
func (g *Gateway) proxyOnly(k string) bool {
	is := func(h string) bool { return h != "" && http.CanonicalHeaderKey(h) == k }
	return slices.ContainsFunc(proxyHeaders, is) || is(binding.HeaderRequestID) || is(g.o.ActorHeader)
}

// proxyHeaders are the fixed names proxyOnly knows beside the request id
// and the configured actor header: the gate's own, the forward-auth
// headers naming the original request, and X-Real-Ip, which goes as
// X-Forwarded-For and Forwarded do (the proxy rewrites and drops those): a
// runtime reading the client's address from it would take the client's
// word for it.
var proxyHeaders = append([]string{binding.HeaderAuditID, binding.HeaderAdvisoryReason, "X-Real-Ip"},
	extauthz.OriginHeaders...)

// keepHeaders removes names from the Connection header's list, so that the
// proxy's removal of the headers it lists spares them.
func keepHeaders(h http.Header, names ...string) {
	conn := h.Values("Connection")
	if len(conn) == 0 {
		return
	}
	var kept []string
	for _, v := range conn {
		for tok := range strings.SplitSeq(v, ",") {
			tok = strings.TrimSpace(tok)
			if tok != "" && !slices.ContainsFunc(names, func(n string) bool { return n != "" && strings.EqualFold(n, tok) }) {
				kept = append(kept, tok)
			}
		}
	}
	h.Del("Connection")
	if len(kept) > 0 {
		h.Set("Connection", strings.Join(kept, ", "))
	}
}

// isAPIPath reports whether p belongs to the service's own API.
func isAPIPath(p string) bool {
	// In any letter case: a mistyped /V1/approvals must reach the API,
	// which answers 404, not the upstream with the approver's token.
	p = strings.ToLower(p)
	return p == PreflightPath || strings.HasPrefix(p, PreflightPath+"/") || strings.HasPrefix(p, AuditPrefix) ||
		p == ApprovalsPath || strings.HasPrefix(p, ApprovalsPath+"/")
}

// normalizePath cleans the path the way Envoy's normalize_path and
// merge_slashes do (dot segments resolved, repeated slashes merged, a
// trailing slash kept), so that the gate judges the path the upstream
// serves: otherwise POST //v1/tool would pass as ungated and reach a runtime
// that merges slashes. Escaped slashes are refused.
func normalizePath(u *url.URL) error {
	// A decoded backslash came from %5C or was sent bare; %2F shows only in
	// RawPath, since it decodes to a plain slash.
	if strings.Contains(strings.ToLower(u.RawPath), "%2f") || strings.Contains(u.Path, `\`) {
		return ErrEscapedSlash
	}
	p := u.Path
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	u.Path, u.RawPath = clean, ""
	return nil
}

func (g *Gateway) writeError(w http.ResponseWriter, status int, code, reason string) {
	g.writeErrorFor(w, status, code, reason, "")
}

// writeErrorFor is writeError naming the audit id of the call, when there
// is one.
func (g *Gateway) writeErrorFor(w http.ResponseWriter, status int, code, reason, auditID string) {
	if g.o.OnError != nil {
		g.o.OnError(code)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	body := `{"error":{"code":"` + code + `","reason":"` + reason + `"`
	if auditID != "" {
		body += `,"audit_id":` + strconv.Quote(auditID)
	}
	w.Write([]byte(body + `}}`))
}
