// Package gateway is the built-in gateway: a reverse proxy in front of the
// tool runtime that runs the gate in-process before forwarding, for a
// drop-in deployment with no Envoy. It shares the one decision path with the
// ext_authz servers (binding.Gate.Check).
package gateway

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/extauthz"
)

// Options configures the gateway.
type Options struct {
	Gate     extauthz.Checker
	Upstream *url.URL
	// MaxBodyBytes bounds the body read for the check.
	MaxBodyBytes int64
	Logger       *slog.Logger
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
	g := &Gateway{o: o}
	g.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(o.Upstream)
			pr.SetXForwarded()
			pr.Out.Host = o.Upstream.Host
		},
		Transport: o.Transport,
		// Stream responses as they come, like Envoy does.
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if o.Logger != nil {
				o.Logger.Error("gateway upstream failed", "err", err, "path", r.URL.Path)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadGateway)
			w.Write([]byte(`{"error":{"code":"upstream-unavailable","reason":"gateway: upstream_unavailable"}}`))
		},
	}
	return g
}

// ServeHTTP checks the request and forwards it when allowed. The body is
// read once for the check (up to MaxBodyBytes) and replayed to the
// upstream; the response streams back.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The gateway is the proxy: headers only it may set are removed from
	// what the client sent, so they cannot be forged.
	r.Header.Del(binding.HeaderAuditID)
	r.Header.Del(binding.HeaderAdvisoryReason)
	for _, h := range []string{"X-Forwarded-Method", "X-Forwarded-Uri", "X-Original-Method", "X-Original-Uri"} {
		r.Header.Del(h)
	}
	req := extauthz.RequestFromHTTP(r, g.o.MaxBodyBytes)
	req.Method, req.Path = r.Method, r.URL.RequestURI()
	d := g.o.Gate.Check(r.Context(), req)
	if !d.Allowed {
		extauthz.WriteDecision(w, &d)
		return
	}
	for k, v := range d.UpstreamHeaders() {
		r.Header.Set(k, v)
	}
	r.Body = io.NopCloser(bytes.NewReader(req.Body))
	r.ContentLength = int64(len(req.Body))
	g.proxy.ServeHTTP(w, r)
}
