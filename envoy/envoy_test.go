package envoy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/binding"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	earlymutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/early_header_mutation/header_mutation/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"

	// Registered for their typed_config "@type" URLs; the configs name
	// them only inside google.protobuf.Any.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
)

// The headers the check reads; Envoy must pass them all to ext_authz: the
// method-override headers too, or a GET naming POST in one would reach a
// runtime that routes it as a POST ungated.
var checkHeaders = []string{"x-autonomy-preflight-id", "x-request-id", "x-autonomy-actor",
	"x-http-method-override", "x-http-method", "x-method-override"}

const (
	actorHeader      = "x-autonomy-actor"
	extAuthzFilter   = "envoy.filters.http.ext_authz"
	extProcFilter    = "envoy.filters.http.ext_proc"
	routerFilter     = "envoy.filters.http.router"
	maxCheckBodySize = 1 << 20
)

// parseBootstrap decodes an Envoy YAML config the way Envoy does (YAML to
// JSON to proto, unknown fields rejected), then runs the generated
// validation on the Bootstrap and on every typed_config inside it.
func parseBootstrap(yamlText []byte) (*bootstrapv3.Bootstrap, error) {
	var doc any
	if err := yaml.Unmarshal(yamlText, &doc); err != nil {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	jsonText, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("yaml to json: %w", err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(jsonText, &b); err != nil {
		return nil, fmt.Errorf("protojson: %w", err)
	}
	if err := validateDeep(&b); err != nil {
		return nil, err
	}
	return &b, nil
}

type validator interface{ ValidateAll() error }

// validateDeep runs ValidateAll on m and on every message packed in an Any
// below it. The generated ValidateAll checks an Any's type URL but not its
// contents, so without this walk a bad HttpConnectionManager or ExtAuthz
// would pass.
func validateDeep(m proto.Message) error {
	if v, ok := m.(validator); ok {
		if err := v.ValidateAll(); err != nil {
			return fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().FullName(), err)
		}
	}
	if err := deprecatedUse(m.ProtoReflect()); err != nil {
		return fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	return forEachAny(m.ProtoReflect(), func(a *anypb.Any) error {
		inner, err := a.UnmarshalNew()
		if err != nil {
			return fmt.Errorf("unpack %s: %w", a.GetTypeUrl(), err)
		}
		return validateDeep(inner)
	})
}

// deprecatedUse reports the first deprecated field or enum value set in
// msg or below it, outside Anys (validateDeep unpacks those). Envoy warns
// about deprecated fields, refuses some of them by default and drops them
// in a later release, so a shipped config must not lean on one.
func deprecatedUse(msg protoreflect.Message) error {
	deprecated := func(o proto.Message) bool {
		switch o := o.(type) {
		case *descriptorpb.FieldOptions:
			return o.GetDeprecated()
		case *descriptorpb.EnumValueOptions:
			return o.GetDeprecated()
		}
		return false
	}
	check := func(fd protoreflect.FieldDescriptor, v protoreflect.Value) error {
		switch {
		case fd.Enum() != nil:
			if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil && deprecated(ev.Options()) {
				return fmt.Errorf("field %s is set to deprecated value %s", fd.FullName(), ev.Name())
			}
		case fd.Message() != nil:
			if _, isAny := v.Message().Interface().(*anypb.Any); !isAny {
				return deprecatedUse(v.Message())
			}
		}
		return nil
	}
	// An enum left unset reads as its zero value, which Envoy warns about
	// when that value is deprecated (AUTO for transport_api_version); Range
	// visits only the fields that are set.
	fields := msg.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.Enum() != nil && fd.Cardinality() != protoreflect.Repeated && fd.ContainingOneof() == nil && !msg.Has(fd) {
			if err := check(fd, fd.Default()); err != nil {
				return fmt.Errorf("%w (unset: it reads as that value)", err)
			}
		}
	}
	var err error
	msg.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if deprecated(fd.Options()) {
			err = fmt.Errorf("field %s is deprecated", fd.FullName())
			return false
		}
		switch {
		case fd.IsMap():
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				err = check(fd.MapValue(), mv)
				return err == nil
			})
		case fd.IsList():
			for i := 0; i < v.List().Len() && err == nil; i++ {
				err = check(fd, v.List().Get(i))
			}
		default:
			err = check(fd, v)
		}
		return err == nil
	})
	return err
}

// forEachAny calls f on every Any set anywhere below msg, stopping at the
// first error. It does not look inside the Anys: f does that.
func forEachAny(msg protoreflect.Message, f func(*anypb.Any) error) error {
	visit := func(child protoreflect.Message) error {
		if a, ok := child.Interface().(*anypb.Any); ok {
			return f(a)
		}
		return forEachAny(child, f)
	}
	var err error
	msg.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() == nil {
				return true
			}
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				err = visit(mv.Message())
				return err == nil
			})
		case fd.IsList():
			if fd.Message() == nil {
				return true
			}
			for i := range v.List().Len() {
				if err = visit(v.List().Get(i).Message()); err != nil {
					break
				}
			}
		case fd.Message() != nil:
			err = visit(v.Message())
		}
		return err == nil
	})
	return err
}

// envoyConfig is a validated config with the parts the tests read unpacked.
type envoyConfig struct {
	raw       []byte
	bootstrap *bootstrapv3.Bootstrap
	listener  *corev3.SocketAddress
	hcm       *hcmv3.HttpConnectionManager
	filters   []string // HTTP filter names, in chain order
	authz     *extauthzv3.ExtAuthz
	proc      *extprocv3.ExternalProcessor
	routes    []*routev3.Route
	clusters  map[string]*clusterv3.Cluster
}

// loadEnvoyConfig parses and validates text and unpacks its one listener.
func loadEnvoyConfig(t *testing.T, text []byte) envoyConfig {
	t.Helper()
	b, err := parseBootstrap(text)
	if err != nil {
		t.Fatalf("config does not load: %v", err)
	}
	c := envoyConfig{raw: text, bootstrap: b, clusters: map[string]*clusterv3.Cluster{}}
	for _, cl := range b.GetStaticResources().GetClusters() {
		c.clusters[cl.GetName()] = cl
	}
	listeners := b.GetStaticResources().GetListeners()
	if len(listeners) != 1 {
		t.Fatalf("got %d listeners, want 1", len(listeners))
	}
	c.listener = listeners[0].GetAddress().GetSocketAddress()
	chains := listeners[0].GetFilterChains()
	if len(chains) != 1 || len(chains[0].GetFilters()) != 1 {
		t.Fatalf("want one filter chain with one network filter (the HTTP connection manager)")
	}
	c.hcm = &hcmv3.HttpConnectionManager{}
	mustUnpack(t, chains[0].GetFilters()[0].GetTypedConfig(), c.hcm)
	for _, f := range c.hcm.GetHttpFilters() {
		c.filters = append(c.filters, f.GetName())
		switch f.GetName() {
		case extAuthzFilter:
			c.authz = &extauthzv3.ExtAuthz{}
			mustUnpack(t, f.GetTypedConfig(), c.authz)
		case extProcFilter:
			c.proc = &extprocv3.ExternalProcessor{}
			mustUnpack(t, f.GetTypedConfig(), c.proc)
		}
	}
	for _, vh := range c.hcm.GetRouteConfig().GetVirtualHosts() {
		c.routes = append(c.routes, vh.GetRoutes()...)
	}
	return c
}

func mustUnpack(t *testing.T, a *anypb.Any, m proto.Message) {
	t.Helper()
	if err := a.UnmarshalTo(m); err != nil {
		t.Fatalf("typed_config %s is not a %s: %v", a.GetTypeUrl(), m.ProtoReflect().Descriptor().FullName(), err)
	}
}

// endpoint returns the cluster's single endpoint as "host:port" or
// "unix:/path", or "" when the cluster is missing or has another shape.
func (c envoyConfig) endpoint(cluster string) string {
	eps := c.clusters[cluster].GetLoadAssignment().GetEndpoints()
	if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 {
		return ""
	}
	addr := eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress()
	if p := addr.GetPipe(); p != nil {
		return "unix:" + p.GetPath()
	}
	sa := addr.GetSocketAddress()
	return fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue())
}

// routeTo finds the route whose path or prefix match is exactly match.
func (c envoyConfig) routeTo(match string) *routev3.Route {
	for _, r := range c.routes {
		if r.GetMatch().GetPath() == match || r.GetMatch().GetPrefix() == match {
			return r
		}
	}
	return nil
}

// authzDisabled reports whether the route turns ext_authz off.
func authzDisabled(t *testing.T, r *routev3.Route) bool {
	t.Helper()
	a, ok := r.GetTypedPerFilterConfig()[extAuthzFilter]
	if !ok {
		return false
	}
	var per extauthzv3.ExtAuthzPerRoute
	mustUnpack(t, a, &per)
	return per.GetDisabled()
}

// exactPatterns lists the exact strings of a header matcher list.
func exactPatterns(l *matcherv3.ListStringMatcher) []string {
	var out []string
	for _, p := range l.GetPatterns() {
		out = append(out, p.GetExact())
	}
	return out
}

// sidecarFromPod returns the Envoy config embedded in envoy/k8s/pod.yaml's
// ConfigMap.
func sidecarFromPod(t *testing.T) []byte {
	t.Helper()
	for _, doc := range k8sDocs(t) {
		if doc.Kind != "ConfigMap" {
			continue
		}
		if text, ok := doc.Data["envoy.yaml"]; ok {
			return []byte(text)
		}
	}
	t.Fatal("k8s/pod.yaml has no ConfigMap with an envoy.yaml key")
	return nil
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestEnvoyConfigs(t *testing.T) {
	type want struct {
		listener    string            // listener host:port
		admin       string            // admin host:port
		httpService bool              // ext_authz in http_service mode, else gRPC
		endpoints   map[string]string // cluster → host:port or unix:/path
		// gated and upstream are the checked route's path and cluster:
		// "" means /v1/tool and toolruntime.
		gated, upstream string
	}
	frontProxy := map[string]string{
		"toolruntime":   "toolruntime:8080",
		"autonomy_grpc": "autonomy:9191",
		"autonomy_http": "autonomy:8181",
	}
	sidecar := want{
		listener: "0.0.0.0:15001",
		admin:    "127.0.0.1:9901",
		endpoints: map[string]string{
			"toolruntime":   "127.0.0.1:8080",
			"autonomy_grpc": "unix:/var/run/autonomy/authz.sock",
			"autonomy_http": "127.0.0.1:8181",
		},
	}
	tests := map[string]struct {
		load func(t *testing.T) []byte
		want want
	}{
		"envoy.yaml": {
			load: func(t *testing.T) []byte { return readFile(t, "envoy.yaml") },
			want: want{listener: "0.0.0.0:10000", admin: "127.0.0.1:9901", endpoints: frontProxy},
		},
		"envoy-http-service.yaml": {
			load: func(t *testing.T) []byte { return readFile(t, "envoy-http-service.yaml") },
			want: want{listener: "0.0.0.0:10000", admin: "127.0.0.1:9901", httpService: true, endpoints: map[string]string{
				"toolruntime":   "toolruntime:8080",
				"autonomy_http": "autonomy:8181",
			}},
		},
		"envoy-mcp.yaml": {
			load: func(t *testing.T) []byte { return readFile(t, "envoy-mcp.yaml") },
			want: want{listener: "0.0.0.0:10000", admin: "127.0.0.1:9901", gated: "/mcp", upstream: "mcpserver",
				endpoints: map[string]string{
					"mcpserver":     "mcpserver:3000",
					"autonomy_grpc": "autonomy:9191",
					"autonomy_http": "autonomy:8181",
				}},
		},
		"envoy-sidecar.yaml": {
			load: func(t *testing.T) []byte { return readFile(t, "envoy-sidecar.yaml") },
			want: sidecar,
		},
		"k8s/pod.yaml ConfigMap envoy.yaml": {
			load: sidecarFromPod,
			want: sidecar,
		},
	}

	// Every Envoy config shipped in this directory must be in the table.
	files, err := filepath.Glob("envoy*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, ok := tests[f]; !ok {
			t.Errorf("%s is not covered by TestEnvoyConfigs", f)
		}
	}

	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := loadEnvoyConfig(t, tc.load(t))
			w := tc.want

			if got := fmt.Sprintf("%s:%d", c.listener.GetAddress(), c.listener.GetPortValue()); got != w.listener {
				t.Errorf("listener = %s, want %s", got, w.listener)
			}
			admin := c.bootstrap.GetAdmin().GetAddress().GetSocketAddress()
			if got := fmt.Sprintf("%s:%d", admin.GetAddress(), admin.GetPortValue()); got != w.admin {
				t.Errorf("admin = %s, want %s", got, w.admin)
			}
			for cluster, ep := range w.endpoints {
				if got := c.endpoint(cluster); got != ep {
					t.Errorf("cluster %s endpoint = %q, want %q", cluster, got, ep)
				}
			}
			if len(c.clusters) != len(w.endpoints) {
				t.Errorf("clusters = %v, want exactly %v", slices.Sorted(maps.Keys(c.clusters)), slices.Sorted(maps.Keys(w.endpoints)))
			}
			// The front proxy of the replicas profile resolves several
			// replicas: one that cannot decide must leave the rotation.
			if name == "envoy.yaml" {
				hcs := c.clusters["autonomy_grpc"].GetHealthChecks()
				if len(hcs) != 1 || hcs[0].GetGrpcHealthCheck() == nil {
					t.Errorf("cluster autonomy_grpc health checks %v, want one grpc_health_check (the service's grpc.health.v1 mirrors /readyz)", hcs)
				}
			}

			// The http_service example has no gRPC, so no ext_proc.
			gated, upstream := w.gated, w.upstream
			if gated == "" {
				gated, upstream = "/v1/tool", "toolruntime"
			}
			checkAuthzFilter(t, c, w.httpService, !w.httpService, gated)
			checkRoutes(t, c, gated, upstream)
			checkIdentityAndRequestID(t, c)
		})
	}
}

func checkAuthzFilter(t *testing.T, c envoyConfig, httpService, outcomes bool, gated string) {
	t.Helper()
	want := []string{extAuthzFilter, extProcFilter, routerFilter}
	if !outcomes {
		// ext_proc speaks gRPC only: the http_service deployment has no
		// gRPC cluster, and cannot judge responses (docs/DEPLOY.md).
		want = []string{extAuthzFilter, routerFilter}
	}
	if !slices.Equal(c.filters, want) {
		t.Fatalf("HTTP filters = %v, want %v", c.filters, want)
	}
	if outcomes {
		checkExtProc(t, c, gated)
	}
	a := c.authz
	// failure_mode_allow defaults to false; the file must still say so, so
	// that no one reads its absence as an oversight.
	if a.GetFailureModeAllow() || !bytes.Contains(c.raw, []byte("failure_mode_allow: false")) {
		t.Error("failure_mode_allow must be set, explicitly, to false")
	}
	if a.GetTransportApiVersion() != corev3.ApiVersion_V3 {
		t.Errorf("transport_api_version = %v, want V3", a.GetTransportApiVersion())
	}
	if got := a.GetStatusOnError().GetCode(); got != 503 {
		t.Errorf("status_on_error = %v, want 503", got)
	}
	body := a.GetWithRequestBody()
	if body == nil || body.GetMaxRequestBytes() != maxCheckBodySize || body.GetAllowPartialMessage() || !body.GetPackAsBytes() {
		t.Errorf("with_request_body = %v, want max_request_bytes %d, allow_partial_message false, pack_as_bytes true", body, maxCheckBodySize)
	}
	allowed := exactPatterns(a.GetAllowedHeaders())
	for _, h := range checkHeaders {
		if !slices.Contains(allowed, h) {
			t.Errorf("allowed_headers %v lacks %s", allowed, h)
		}
	}

	if !httpService {
		g := a.GetGrpcService()
		if g.GetEnvoyGrpc().GetClusterName() != "autonomy_grpc" {
			t.Errorf("grpc_service cluster = %q, want autonomy_grpc", g.GetEnvoyGrpc().GetClusterName())
		}
		if d := g.GetTimeout().AsDuration(); !checkTimeoutOK(d) {
			t.Errorf("grpc_service timeout = %v, want between 1s and 5s", d)
		}
		var opts upstreamhttpv3.HttpProtocolOptions
		mustUnpack(t, c.clusters["autonomy_grpc"].GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"], &opts)
		if opts.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
			t.Error("cluster autonomy_grpc must speak HTTP/2 (explicit_http_config.http2_protocol_options)")
		}
		return
	}
	h := a.GetHttpService()
	if h.GetServerUri().GetCluster() != "autonomy_http" || h.GetPathPrefix() != "/v1/authz" {
		t.Errorf("http_service = cluster %q path_prefix %q, want autonomy_http and /v1/authz", h.GetServerUri().GetCluster(), h.GetPathPrefix())
	}
	if d := h.GetServerUri().GetTimeout().AsDuration(); !checkTimeoutOK(d) {
		t.Errorf("http_service timeout = %v, want between 1s and 5s", d)
	}
	upstream := exactPatterns(h.GetAuthorizationResponse().GetAllowedUpstreamHeaders())
	for _, want := range []string{"x-autonomy-audit-id", "x-autonomy-advisory-reason"} {
		if !slices.Contains(upstream, want) {
			t.Errorf("allowed_upstream_headers %v lacks %s", upstream, want)
		}
	}
}

// checkExtProc: the response of every allowed call goes to the service
// whole, and nothing passes when the service cannot be asked (docs/API.md).
// checkExtProc: the ext_proc filter judges the answers of the gated
// route (the first route of the gated path: POST) and of no other route.
// Another route of the gated path (the MCP server's GET event stream, its
// DELETE) streams its answers: buffering a stream that never ends would
// hold it forever.
func checkExtProc(t *testing.T, c envoyConfig, gatedPath string) {
	t.Helper()
	p := c.proc
	if p.GetFailureModeAllow() || bytes.Count(c.raw, []byte("failure_mode_allow: false")) < 2 {
		t.Error("ext_proc failure_mode_allow must be set, explicitly, to false")
	}
	if p.GetGrpcService().GetEnvoyGrpc().GetClusterName() != "autonomy_grpc" {
		t.Errorf("ext_proc cluster = %q, want autonomy_grpc", p.GetGrpcService().GetEnvoyGrpc().GetClusterName())
	}
	if d := p.GetMessageTimeout().AsDuration(); !checkTimeoutOK(d) {
		t.Errorf("ext_proc message_timeout = %v, want between 1s and 5s", d)
	}
	// A stream that fails answers what the service answers a response it
	// could not judge, 502, not Envoy's default 500 (docs/DEPLOY.md).
	if got := p.GetStatusOnError().GetCode(); got != 502 {
		t.Errorf("ext_proc status_on_error = %v, want 502", got)
	}
	m := p.GetProcessingMode()
	if m.GetRequestHeaderMode() != extprocv3.ProcessingMode_SEND || m.GetResponseHeaderMode() != extprocv3.ProcessingMode_SEND ||
		m.GetRequestBodyMode() != extprocv3.ProcessingMode_BUFFERED || m.GetResponseBodyMode() != extprocv3.ProcessingMode_BUFFERED {
		t.Errorf("ext_proc processing_mode = %v, want headers sent and both bodies buffered", m)
	}
	if p.GetObservabilityMode() {
		t.Error("ext_proc in observability_mode cannot replace a violating response")
	}
	kept := exactPatterns(p.GetForwardRules().GetDisallowedHeaders())
	for _, h := range []string{"authorization", "proxy-authorization", "cookie", "set-cookie"} {
		if !slices.Contains(kept, h) {
			t.Errorf("ext_proc forward_rules.disallowed_headers %v lacks %s: credentials reach the stream", kept, h)
		}
	}
	for _, r := range c.routes {
		a, ok := r.GetTypedPerFilterConfig()[extProcFilter]
		var per extprocv3.ExtProcPerRoute
		if ok {
			mustUnpack(t, a, &per)
		}
		gated := r == c.routeTo(gatedPath)
		if gated == per.GetDisabled() {
			t.Errorf("route %v: ext_proc disabled = %v, want it on the gated route only", r.GetMatch(), per.GetDisabled())
		}
	}
}

func checkRoutes(t *testing.T, c envoyConfig, gated, upstream string) {
	t.Helper()
	tool := c.routeTo(gated)
	if tool == nil {
		t.Fatalf("no route for path %s", gated)
	}
	if tool.GetMatch().GetPath() != gated {
		t.Errorf("%s must be an exact path match, so no longer path reaches the upstream", gated)
	}
	if tool.GetRoute().GetCluster() != upstream {
		t.Errorf("%s goes to %q, want %s", gated, tool.GetRoute().GetCluster(), upstream)
	}
	if authzDisabled(t, tool) {
		t.Errorf("ext_authz is disabled on %s: tool calls would not be checked", gated)
	}
	// The API, approvals included (an approver's token must never reach the
	// tool runtime), goes to the service without ext_authz.
	for _, prefix := range []string{"/v1/preflight", "/v1/audit/", "/v1/approvals"} {
		r := c.routeTo(prefix)
		if r == nil || r.GetMatch().GetPrefix() != prefix {
			t.Errorf("no prefix route %s", prefix)
			continue
		}
		if r.GetRoute().GetCluster() != "autonomy_http" {
			t.Errorf("%s goes to %q, want autonomy_http", prefix, r.GetRoute().GetCluster())
		}
		// Where Envoy connects from loopback (the sidecar), a client-chosen
		// Host of localhost would make a proxied read look like a local
		// client's, which the service serves without a token.
		if h := r.GetRoute().GetHostRewriteLiteral(); h == "" || h == "localhost" || net.ParseIP(h) != nil {
			t.Errorf("%s keeps the client's Host (host_rewrite_literal %q), want a fixed non-loopback name", prefix, h)
		}
		if !authzDisabled(t, r) {
			t.Errorf("%s must disable ext_authz per route", prefix)
		}
	}
	// Routes to the upstream all go through ext_authz: only the gated
	// path may name its cluster (on several routes: POST, and the MCP
	// server's other methods), each with ext_authz on.
	for _, r := range c.routes {
		if r.GetRoute().GetCluster() == upstream && (r.GetMatch().GetPath() != gated || authzDisabled(t, r)) {
			t.Errorf("route %v also reaches %s", r.GetMatch(), upstream)
		}
	}
}

// checkTimeoutOK: Envoy must wait out the service's worst ordinary answer
// (policy.timeout, 250ms, plus a synced WAL commit under load), or a Check
// cut off after its consume was queued spends the step while the client
// sees 503; and not much longer, since every tool call waits on it.
func checkTimeoutOK(d time.Duration) bool { return d >= time.Second && d <= 5*time.Second }

func checkIdentityAndRequestID(t *testing.T, c envoyConfig) {
	t.Helper()
	var removed []string
	for _, ext := range c.hcm.GetEarlyHeaderMutationExtensions() {
		var m earlymutationv3.HeaderMutation
		mustUnpack(t, ext.GetTypedConfig(), &m)
		for _, mu := range m.GetMutations() {
			removed = append(removed, mu.GetRemove())
		}
	}
	// The runtime trusts these because only Envoy or the service sets them.
	for _, h := range []string{actorHeader, binding.HeaderAuditID, binding.HeaderAdvisoryReason} {
		if !slices.Contains(removed, h) {
			t.Errorf("a client-sent %s is not stripped before the filters run (early header mutations remove %v)", h, removed)
		}
	}
	if !c.hcm.GetUseRemoteAddress().GetValue() || c.hcm.GetPreserveExternalRequestId() {
		t.Error("x-request-id must be Envoy's own: use_remote_address true, preserve_external_request_id false")
	}
	if !c.hcm.GetNormalizePath().GetValue() || !c.hcm.GetMergeSlashes() {
		t.Error("paths must be normalised (normalize_path, merge_slashes) before routing")
	}
}

// TestEnvoyConfigRejects shows that the loader is strict: each case breaks
// envoy.yaml in one place and must fail to load.
func TestEnvoyConfigRejects(t *testing.T) {
	good := readFile(t, "envoy.yaml")
	tests := map[string]struct {
		old, new string
		wantErr  string
	}{
		"typo in a field name": {
			old: "denies.\n              failure_mode_allow: false", new: "denies.\n              failure_mode_alow: false",
			wantErr: `unknown field "failure_mode_alow"`,
		},
		"typo in a top-level field name": {
			old: "static_resources:", new: "static_resource:",
			wantErr: `unknown field "static_resource"`,
		},
		"string for a number": {
			old: "port_value: 10000", new: `port_value: "ten thousand"`,
			wantErr: "invalid value for uint32",
		},
		"number for a duration": {
			old: "\n                timeout: 2s", new: "\n                timeout: 500",
			wantErr: "unexpected token 500",
		},
		"object for a bool": {
			old: "pack_as_bytes: true", new: "pack_as_bytes: {on: true}",
			wantErr: "invalid value for bool",
		},
		"unknown typed_config type": {
			old: "ext_authz.v3.ExtAuthz\n", new: "ext_authz.v3.ExtAuth\n",
			wantErr: "ExtAuth",
		},
		"port out of range": {
			old: "port_value: 10000", new: "port_value: 70000",
			wantErr: "PortValue",
		},
		"rule broken inside a typed_config": {
			old: "envoy_grpc: { cluster_name: autonomy_grpc }\n                # Above", new: "envoy_grpc: { cluster_name: \"\" }\n                # Above",
			wantErr: "ClusterName",
		},
		"deprecated field": {
			old: "              - remove: x-autonomy-actor\n", new: "              - append: {header: {key: x-a, value: b}, append: true}\n              - remove: x-autonomy-actor\n",
			wantErr: "field envoy.config.core.v3.HeaderValueOption.append is deprecated",
		},
		"deprecated enum value": {
			old: "transport_api_version: V3", new: "transport_api_version: V2",
			wantErr: "transport_api_version is set to deprecated value V2",
		},
		// An ApiConfigSource without api_type reads as its deprecated zero.
		"enum left at a deprecated zero value": {
			old: "static_resources:\n", new: "dynamic_resources: { ads_config: { transport_api_version: V3 } }\nstatic_resources:\n",
			wantErr: "api_type is set to deprecated value DEPRECATED_AND_UNAVAILABLE_DO_NOT_USE (unset",
		},
		"unknown enum value": {
			old: "transport_api_version: V3", new: "transport_api_version: V4",
			wantErr: "V4",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if n := bytes.Count(good, []byte(tc.old)); n != 1 {
				t.Fatalf("envoy.yaml has %q %d times, want once", tc.old, n)
			}
			bad := bytes.Replace(good, []byte(tc.old), []byte(tc.new), 1)
			_, err := parseBootstrap(bad)
			if err == nil {
				t.Fatal("broken config loaded")
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q does not mention %q", err, tc.wantErr)
			}
		})
	}
	if _, err := parseBootstrap(good); err != nil {
		t.Fatalf("the unbroken config does not load: %v", err)
	}
}
