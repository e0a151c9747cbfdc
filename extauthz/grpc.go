package extauthz

import (
	"context"
	"strings"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/contractrefine/autonomy/binding"
)

// Checker decides one request; *binding.Gate implements it.
type Checker interface {
	Check(ctx context.Context, r *binding.Request) binding.Decision
}

var _ Checker = (*binding.Gate)(nil)

// Server implements envoy.service.auth.v3.Authorization.
type Server struct {
	authv3.UnimplementedAuthorizationServer
	gate Checker
}

// NewServer returns an Authorization server backed by gate.
func NewServer(gate Checker) *Server { return &Server{gate: gate} }

// Register registers s on a gRPC server.
func (s *Server) Register(g *grpc.Server) { authv3.RegisterAuthorizationServer(g, s) }

// Check answers one CheckRequest. A deny is a response, not an error. A
// CheckRequest with no attributes.source at all is a direct client's; over
// mTLS its verified certificate names the caller instead. Envoy always
// fills the source, so its own certificate never stands in for a
// downstream that presented none (that would mismatch every preflight).
func (s *Server) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	r := RequestFromCheck(req)
	if r.Principal == "" && req.GetAttributes().GetSource() == nil {
		r.Principal = peerPrincipal(ctx)
	}
	d := s.gate.Check(ctx, r)
	return ResponseFor(&d), nil
}

// RequestFromCheck builds the gate's view of a CheckRequest: method, path,
// lower-cased headers, the body (raw_body when Envoy packs it as bytes, else
// body) and the mTLS peer principal.
func RequestFromCheck(req *authv3.CheckRequest) *binding.Request {
	attrs := req.GetAttributes()
	h := attrs.GetRequest().GetHttp()
	r := &binding.Request{
		Method:    h.GetMethod(),
		Path:      h.GetPath(),
		Principal: attrs.GetSource().GetPrincipal(),
	}
	n := len(h.GetHeaders()) + len(h.GetHeaderMap().GetHeaders())
	r.Headers = make(map[string]string, n+1)
	for k, v := range h.GetHeaders() {
		r.Headers[strings.ToLower(k)] = v
	}
	for _, hv := range h.GetHeaderMap().GetHeaders() {
		v := hv.GetValue()
		if v == "" && len(hv.GetRawValue()) > 0 {
			v = string(hv.GetRawValue())
		}
		k := strings.ToLower(hv.GetKey())
		if prev, ok := r.Headers[k]; ok && prev != v {
			v = prev + "," + v
		}
		r.Headers[k] = v
	}
	if r.Path == "" {
		r.Path = r.Headers[":path"]
	}
	if r.Method == "" {
		r.Method = r.Headers[":method"]
	}
	if _, ok := r.Headers[binding.HeaderRequestID]; !ok && h.GetId() != "" {
		r.Headers[binding.HeaderRequestID] = h.GetId()
	}
	if raw := h.GetRawBody(); len(raw) > 0 {
		r.Body = raw
	} else if b := h.GetBody(); b != "" {
		r.Body = []byte(b)
	}
	return r
}

// ResponseFor translates a decision into Envoy's CheckResponse (SPEC §5.5).
func ResponseFor(d *binding.Decision) *authv3.CheckResponse {
	meta := dynamicMetadata(d)
	if d.Allowed {
		up := d.UpstreamHeaders()
		headers := make([]*corev3.HeaderValueOption, 0, len(up))
		for _, k := range []string{binding.HeaderAuditID, binding.HeaderAdvisoryReason} {
			if v, ok := up[k]; ok {
				headers = append(headers, overwrite(k, v))
			}
		}
		return &authv3.CheckResponse{
			Status:          &rpcstatus.Status{Code: int32(codes.OK)},
			HttpResponse:    &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{Headers: headers}},
			DynamicMetadata: meta,
		}
	}
	code, httpCode := codes.PermissionDenied, typev3.StatusCode_Forbidden
	if d.Status == 503 {
		code, httpCode = codes.Unavailable, typev3.StatusCode_ServiceUnavailable
	}
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(code), Message: d.Reason},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status: &typev3.HttpStatus{Code: httpCode},
			Headers: []*corev3.HeaderValueOption{
				overwrite("content-type", "application/json"),
				overwrite(binding.HeaderAuditID, d.AuditID),
			},
			Body: string(d.DenyBody()),
		}},
		DynamicMetadata: meta,
	}
}

// dynamicMetadata is {"autonomy":{"audit_id","mode","reason"}}, built
// directly: structpb.NewStruct would convert two Go maps on every answer to
// reach the same message. Like NewStruct, it gives nil when a string is not
// valid UTF-8, which a protobuf string cannot carry.
func dynamicMetadata(d *binding.Decision) *structpb.Struct {
	if !utf8.ValidString(d.AuditID) || !utf8.ValidString(string(d.Mode)) || !utf8.ValidString(d.Reason) {
		return nil
	}
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		"autonomy": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			"audit_id": structpb.NewStringValue(d.AuditID),
			"mode":     structpb.NewStringValue(string(d.Mode)),
			"reason":   structpb.NewStringValue(d.Reason),
		}}),
	}}
}

func overwrite(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: k, Value: v},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}
