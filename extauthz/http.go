package extauthz

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/contractrefine/autonomy/binding"
)

// HTTPPrefix is the path under which the HTTP check is served.
const HTTPPrefix = "/v1/authz"

// HTTPHandler serves the HTTP check of docs/API.md: 200 allows (with the
// upstream headers on the response), 403 and 503 deny with the JSON body.
type HTTPHandler struct {
	gate    Checker
	maxBody int64
}

// NewHTTPHandler returns the HTTP check. Bodies above maxBody are denied.
func NewHTTPHandler(gate Checker, maxBody int64) *HTTPHandler {
	return &HTTPHandler{gate: gate, maxBody: maxBody}
}

// ServeHTTP answers one check.
func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req := RequestFromHTTP(r, h.maxBody)
	d := h.gate.Check(r.Context(), req)
	WriteDecision(w, &d)
}

// WriteDecision writes d as the HTTP check's answer: the upstream headers
// and 200 on an allow, the status and JSON deny body otherwise. An MCP deny
// keeps its 403 or 503 here, with the JSON-RPC answer as its body: the
// proxies that call the HTTP check read any 200 as an allow.
func WriteDecision(w http.ResponseWriter, d *binding.Decision) {
	if d.Allowed {
		for k, v := range d.UpstreamHeaders() {
			w.Header().Set(k, v)
		}
		w.WriteHeader(http.StatusOK)
		return
	}
	body := d.MCPDenyBody()
	if body == nil {
		body = d.DenyBody()
	}
	writeDeny(w, d, d.Status, body)
}

// WriteClientDeny writes the deny d to the client itself (the built-in
// gateway): an MCP deny is then 200 with the JSON-RPC answer
// (binding.Decision.ClientDeny).
func WriteClientDeny(w http.ResponseWriter, d *binding.Decision) {
	status, body := d.ClientDeny()
	writeDeny(w, d, status, body)
}

func writeDeny(w http.ResponseWriter, d *binding.Decision, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(binding.HeaderAuditID, d.AuditID)
	w.WriteHeader(status)
	w.Write(body)
}

var (
	// ErrBodyTooLarge is the BodyErr of a request whose body is over the
	// limit RequestFromHTTP was given.
	ErrBodyTooLarge = errors.New("extauthz: request body over the limit")
	// errPseudoConflict: a CheckRequest's method or path field names another
	// value than its :method or :path header. Envoy sets both from the same
	// request; a check that says two things is refused as the tool call it
	// may be rather than judged on one of them.
	errPseudoConflict = errors.New("extauthz: the CheckRequest's method or path differs from its :method or :path header")
	// errOriginConflict: a forward-auth check carries both header pairs
	// and they name different requests.
	errOriginConflict = errors.New("extauthz: X-Forwarded-Method/-Uri and X-Original-Method/-URI name different requests")
	// errOriginRepeated: a forward-auth header naming the original method
	// or URI comes more than once; one of them may be the client's.
	errOriginRepeated = errors.New("extauthz: a forwarded method or URI header is given more than once")
	// errOriginList: a forwarded method is not one method token, or a
	// forwarded URI is not one request target: a list such as "POST, GET"
	// or "/x, /v1/tool" is what a proxy that appends to the client's header
	// sends, and names no request the gate knows.
	errOriginList = errors.New("extauthz: a forwarded method or URI header names more than one request, or none")
	// errTwoBodies: a CheckRequest carries both body and raw_body. Envoy
	// sets one of them; a check carrying two bodies is not judged on one.
	errTwoBodies = errors.New("extauthz: the CheckRequest carries both body and raw_body")
	// errBodyLength: a CheckRequest's Content-Length is not a length, or
	// declares fewer bytes than its body holds, so the body is not the
	// request's.
	errBodyLength = errors.New("extauthz: the CheckRequest's content-length does not fit its body")
)

// OriginHeaders are the headers that name the request a forward-auth check
// is about: only a proxy may set them.
var OriginHeaders = []string{"X-Forwarded-Method", "X-Forwarded-Uri", "X-Original-Method", "X-Original-Uri"}

// oneOrigin reports whether a forwarded method and URI each name one
// request: the method one token (RFC 9110's tchar) or absent, the URI one
// target in origin or absolute form or absent, with no white space or
// control character, and no comma that starts another target
// ("/x, /v1/tool", "/x,/v1/tool", "http://a/,http://b/v1/tool").
func oneOrigin(method, uri string) bool {
	for _, r := range method {
		if !httpguts.IsTokenRune(r) {
			return false
		}
	}
	if uri == "" {
		return true
	}
	if strings.IndexFunc(uri, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 ||
		strings.Contains(uri, ",/") || strings.Count(uri, "://") > 1 {
		return false
	}
	if uri[0] == '/' {
		return true
	}
	u, err := url.ParseRequestURI(uri)
	return err == nil && u.IsAbs()
}

// RequestFromHTTP builds the gate's view of a check arriving over HTTP. The
// original method and URI come from X-Forwarded-Method/X-Forwarded-Uri
// (Caddy, Traefik) or X-Original-Method/X-Original-URI (nginx) when present;
// otherwise from the request itself, with the /v1/authz prefix removed
// (Envoy http_service with path_prefix /v1/authz). A forwarded URI without
// a forwarded method is taken as a POST, so it is checked, never assumed safe;
// a forwarded method without a forwarded URI is refused.
// When both pairs are present and disagree, the gate refuses the request
// (gate: malformed_tool_call): one of them may come from the client. So it
// does when the check's own line is a gated call (Envoy's form) and the
// headers name another request.
//
// A body that cannot be read, or is over maxBody, is recorded in BodyErr and
// the gate denies the call.
func RequestFromHTTP(r *http.Request, maxBody int64) *binding.Request {
	headers := make(map[string]string, len(r.Header))
	for k, vs := range r.Header {
		headers[strings.ToLower(k)] = strings.Join(vs, ",")
	}
	method, uri := r.Method, strings.TrimPrefix(r.URL.RequestURI(), HTTPPrefix)
	fm, fu := headers["x-forwarded-method"], headers["x-forwarded-uri"]
	om, ou := headers["x-original-method"], headers["x-original-uri"]
	forwarded, original := fm != "" || fu != "", om != "" || ou != ""
	var originErr error
	for _, h := range OriginHeaders {
		if len(r.Header.Values(h)) > 1 {
			// Joined, the values would name no request the gate knows
			// (a path "/healthz,/v1/tool" is not the gated one) and the
			// call would pass as ungated.
			originErr = errOriginRepeated
		}
	}
	switch {
	case forwarded:
		method, uri = fm, fu
		// A proxy sets one pair and passes the client's headers on, so a
		// second pair that tells another story may be the client's: the
		// request is refused rather than checked as either.
		if original && (fm != om || fu != ou) && originErr == nil {
			originErr = errOriginConflict
		}
	case original:
		method, uri = om, ou
	}
	if (forwarded || original) && originErr == nil && !oneOrigin(method, uri) {
		originErr = errOriginList
	}
	if method == "" {
		// A forward-auth proxy named the URI but not the method. Its own
		// request says nothing about the original method (nginx's auth
		// subrequest is always a GET), so assume the one the gate checks:
		// a proxy that forgets the method header gets its tool calls
		// checked, not waved through as GETs.
		method = http.MethodPost
	}
	if uri == "" && !forwarded && !original {
		uri = "/"
	}
	// A forwarded method without its URI names no request the gate can
	// judge: the path stays empty and the gate refuses the check
	// (gate: malformed_tool_call), rather than take it for the root.
	if parsed, err := url.ParseRequestURI(uri); err == nil {
		uri = parsed.RequestURI()
	}
	req := &binding.Request{Method: method, Path: uri, Headers: headers, OriginErr: originErr}
	if line := strings.TrimPrefix(r.URL.RequestURI(), HTTPPrefix); (forwarded || original) && line != "" && line != "/" {
		// The check's own line names a request too (Envoy's path_prefix
		// form); the gate refuses it if that one is a gated call.
		req.LineMethod, req.LinePath = r.Method, line
	}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		req.Principal = principalOf(r.TLS.PeerCertificates[0])
	}
	if r.ContentLength > maxBody {
		// Refused before reading: a proxy waiting on Expect: 100-continue
		// gets the deny at once.
		req.BodyErr = ErrBodyTooLarge
		return req
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	switch {
	case err != nil:
		req.BodyErr = err
	case int64(len(body)) > maxBody:
		req.BodyErr = ErrBodyTooLarge
	default:
		req.Body = body
	}
	return req
}
