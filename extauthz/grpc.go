package extauthz

import (
	"context"
	"slices"
	"strconv"
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

// Register registers s on a gRPC server. Its Check answers are written
// without building the message (wire.go).
func (s *Server) Register(g *grpc.Server) { g.RegisterService(serviceDesc(), s) }

// Check answers one CheckRequest. A deny is a response, not an error. A
// CheckRequest with no attributes.source at all is a direct client's; over
// mTLS its verified certificate names the caller instead. Envoy always
// fills the source, so its own certificate never stands in for a
// downstream that presented none (that would mismatch every preflight).
func (s *Server) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	d := s.decide(ctx, req)
	return ResponseFor(&d), nil
}

// decide is Check's decision.
func (s *Server) decide(ctx context.Context, req *authv3.CheckRequest) binding.Decision {
	r := RequestFromCheck(req)
	if r.Principal == "" && req.GetAttributes().GetSource() == nil {
		r.Principal = peerPrincipal(ctx)
	}
	return s.gate.Check(ctx, r)
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
	// Envoy sends lower-case names; names that differ only in case get
	// their values joined, as header_map's repeated names are, in sorted
	// order so that the answer does not depend on the map's.
	var folded map[string][]string
	for k, v := range h.GetHeaders() {
		k = strings.ToLower(k)
		if prev, ok := r.Headers[k]; ok {
			if folded == nil {
				folded = map[string][]string{}
			}
			if folded[k] == nil {
				folded[k] = []string{prev}
			}
			folded[k] = append(folded[k], v)
			continue
		}
		r.Headers[k] = v
	}
	for k, vs := range folded {
		slices.Sort(vs)
		r.Headers[k] = strings.Join(vs, ",")
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
	r.Path, r.OriginErr = pseudoHeader(r.Path, r.Headers[":path"], r.OriginErr)
	r.Method, r.OriginErr = pseudoHeader(r.Method, r.Headers[":method"], r.OriginErr)
	if _, ok := r.Headers[binding.HeaderRequestID]; !ok && h.GetId() != "" {
		r.Headers[binding.HeaderRequestID] = h.GetId()
	}
	raw, text := h.GetRawBody(), h.GetBody()
	if len(raw) > 0 {
		r.Body = raw
	} else if text != "" {
		r.Body = []byte(text)
	}
	if len(raw) > 0 && text != "" {
		r.BodyErr = errTwoBodies
	} else {
		// A longer Content-Length: Envoy sent less than the request holds
		// (a body cut at max_request_bytes, or a filter that does not
		// buffer it), so the args the runtime would get are not the args
		// judged.
		r.BodyErr = checkLength(r.Headers["content-length"], len(r.Body))
	}
	return r
}

// checkLength compares a Content-Length value (repeated values joined
// with commas) with the bytes received: ErrPartialBody when it declares
// more, errBodyLength when it is not a length or declares fewer.
func checkLength(contentLength string, received int) error {
	if contentLength == "" {
		return nil
	}
	var declared int64 = -1
	for v := range strings.SplitSeq(contentLength, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 0 || (declared >= 0 && n != declared) {
			return errBodyLength
		}
		declared = n
	}
	switch {
	case declared > int64(received):
		return binding.ErrPartialBody
	case declared < int64(received):
		return errBodyLength
	}
	return nil
}

// pseudoHeader is a request attribute given as both a field and a pseudo
// header: the field, or the header when the field is empty. When both are
// set and differ, err becomes errPseudoConflict (an earlier err stays).
// Envoy writes the fields with what is not UTF-8 replaced by '!', while
// header_map's raw_value keeps the bytes: a header that is not UTF-8 is
// not compared.
func pseudoHeader(field, header string, err error) (string, error) {
	switch {
	case field == "":
		return header, err
	case header != "" && err == nil && header != field && utf8.ValidString(header):
		return field, errPseudoConflict
	}
	return field, err
}

// ResponseFor translates a decision into Envoy's CheckResponse (docs/API.md).
// The messages of one response are fields of one struct (denyResponse,
// allowResponse, metadata), so each answer costs a few allocations, not one
// per message: every Check makes one.
func ResponseFor(d *binding.Decision) *authv3.CheckResponse {
	meta := dynamicMetadata(d)
	hs, n := answerHeaders(d)
	if d.Allowed {
		a := new(allowResponse)
		for i, h := range hs[:n] {
			a.headers[i].set(h)
			a.list[i] = &a.headers[i].opt
		}
		a.ok.Headers = a.list[:n]
		if d.AdvisoryReason == "" {
			// Only the service says why a binding failed: a copy the
			// client sent must not reach the runtime.
			a.ok.HeadersToRemove = advisoryOnly
		}
		a.oneof.OkResponse = &a.ok
		a.resp = authv3.CheckResponse{Status: &a.status, HttpResponse: &a.oneof, DynamicMetadata: meta}
		return &a.resp
	}
	// Every deny is PERMISSION_DENIED (docs/API.md); one that could not be
	// decided says so with its 503 and contract: verifier_unavailable. An
	// MCP deny reaches the client as 200 with a JSON-RPC answer (docs/MCP.md):
	// the gRPC status, not the HTTP one, is what denies it.
	httpCode, body := clientDeny(d)
	r := new(denyResponse)
	r.status = rpcstatus.Status{Code: int32(codes.PermissionDenied), Message: d.Reason}
	r.httpStatus.Code = httpCode
	for i, h := range hs[:n] {
		r.headers[i].set(h)
		r.list[i] = &r.headers[i].opt
	}
	r.denied = authv3.DeniedHttpResponse{Status: &r.httpStatus, Headers: r.list[:n], Body: string(body)}
	r.oneof.DeniedResponse = &r.denied
	r.resp = authv3.CheckResponse{Status: &r.status, HttpResponse: &r.oneof, DynamicMetadata: meta}
	return &r.resp
}

// field is a name and its value: a header an answer sets, or a member of
// its dynamic metadata.
type field struct{ key, value string }

// answerHeaders are the headers d's answer sets, each overwriting any of
// its name: an allow's audit id and, when set, its advisory reason; a
// deny's content type and audit id.
func answerHeaders(d *binding.Decision) (hs [2]field, n int) {
	if !d.Allowed {
		return [2]field{{"content-type", "application/json"}, {binding.HeaderAuditID, d.AuditID}}, 2
	}
	hs[0] = field{binding.HeaderAuditID, d.AuditID}
	if d.AdvisoryReason == "" {
		return hs, 1
	}
	hs[1] = field{binding.HeaderAdvisoryReason, d.AdvisoryReason}
	return hs, 2
}

// clientDeny is the HTTP status and body a deny sends the client.
func clientDeny(d *binding.Decision) (typev3.StatusCode, []byte) {
	status, body := d.ClientDeny()
	switch status {
	case 503:
		return typev3.StatusCode_ServiceUnavailable, body
	case 200:
		return typev3.StatusCode_OK, body
	}
	return typev3.StatusCode_Forbidden, body
}

// advisoryOnly is the allow's headers_to_remove when the service sets no
// advisory reason; the response never changes it.
var advisoryOnly = []string{binding.HeaderAdvisoryReason}

// header is one header to set, overwriting any of the same name.
type header struct {
	opt corev3.HeaderValueOption
	hv  corev3.HeaderValue
}

func (h *header) set(f field) {
	h.hv.Key, h.hv.Value = f.key, f.value
	h.opt.Header = &h.hv
	h.opt.AppendAction = corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
}

// allowResponse holds the messages of an allow's CheckResponse.
type allowResponse struct {
	resp    authv3.CheckResponse
	status  rpcstatus.Status // code 0: OK
	oneof   authv3.CheckResponse_OkResponse
	ok      authv3.OkHttpResponse
	list    [2]*corev3.HeaderValueOption
	headers [2]header
}

// denyResponse holds the messages of a deny's CheckResponse.
type denyResponse struct {
	resp       authv3.CheckResponse
	status     rpcstatus.Status
	oneof      authv3.CheckResponse_DeniedResponse
	denied     authv3.DeniedHttpResponse
	httpStatus typev3.HttpStatus
	list       [2]*corev3.HeaderValueOption
	headers    [2]header
}

// dynamicMetadata is {"autonomy":{"audit_id","mode","reason"}}, the values
// in one block with the two structs that hold them.
func dynamicMetadata(d *binding.Decision) *structpb.Struct {
	ms, ok := metadataMembers(d)
	if !ok {
		return nil
	}
	m := new(metadata)
	m.auditID.Kind, m.mode.Kind, m.reason.Kind = &m.auditIDKind, &m.modeKind, &m.reasonKind
	m.auditIDKind.StringValue, m.modeKind.StringValue, m.reasonKind.StringValue = ms[0].value, ms[1].value, ms[2].value
	m.inner.Fields = map[string]*structpb.Value{ms[0].key: &m.auditID, ms[1].key: &m.mode, ms[2].key: &m.reason}
	m.innerKind.StructValue = &m.inner
	m.autonomy.Kind = &m.innerKind
	m.outer.Fields = map[string]*structpb.Value{metadataKey: &m.autonomy}
	return &m.outer
}

// metadataKey names the dynamic metadata's one struct.
const metadataKey = "autonomy"

// metadataMembers are the members of the dynamic metadata's struct, in
// key order. It reports false when one is not UTF-8: the metadata is then
// left out.
func metadataMembers(d *binding.Decision) ([3]field, bool) {
	// The reason the decision frame records under the same audit id: in
	// advisory mode, the binding failure that was let through.
	_, reason, _ := d.Recorded()
	if !utf8.ValidString(d.AuditID) || !utf8.ValidString(string(d.Mode)) || !utf8.ValidString(reason) {
		return [3]field{}, false
	}
	return [3]field{{"audit_id", d.AuditID}, {"mode", string(d.Mode)}, {"reason", reason}}, true
}

// metadata holds the messages of dynamicMetadata's answer.
type metadata struct {
	outer, inner                      structpb.Struct
	autonomy, auditID, mode, reason   structpb.Value
	innerKind                         structpb.Value_StructValue
	auditIDKind, modeKind, reasonKind structpb.Value_StringValue
}
