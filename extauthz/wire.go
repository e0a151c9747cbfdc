package extauthz

import (
	"context"
	"slices"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/contractrefine/autonomy/binding"
)

// serviceDesc is the generated Authorization service with its Check
// handler answering through wireResponse.
func serviceDesc() *grpc.ServiceDesc {
	desc := authv3.Authorization_ServiceDesc
	desc.Methods = slices.Clone(desc.Methods)
	for i := range desc.Methods {
		if desc.Methods[i].MethodName == "Check" {
			desc.Methods[i].Handler = checkHandler
		}
	}
	return &desc
}

// checkHandler is the generated Check handler (the request decoded, the
// interceptors run), with the answer of wireResponse instead of
// ResponseFor's: the same bytes on the wire.
func checkHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(authv3.CheckRequest)
	if err := dec(in); err != nil {
		return nil, err
	}
	s := srv.(*Server)
	if interceptor == nil {
		return wireResponse(s.decide(ctx, in)), nil
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: authv3.Authorization_Check_FullMethodName}
	return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
		return wireResponse(s.decide(ctx, req.(*authv3.CheckRequest))), nil
	})
}

// wireResponse is ResponseFor(d) as a CheckResponse whose fields are all
// in its unknown fields, already encoded: every protobuf codec writes
// those bytes as they are, so the client reads the message ResponseFor
// builds (TestWireResponseIsResponseFor in codec_test.go), without the
// service building it and walking it by reflection for each answer. A
// decision with a string that is not UTF-8 gets ResponseFor's message,
// which the codec refuses as before.
func wireResponse(d binding.Decision) *authv3.CheckResponse {
	b, ok := appendResponse(nil, &d)
	if !ok {
		return ResponseFor(&d)
	}
	r := new(authv3.CheckResponse)
	r.ProtoReflect().SetUnknown(b)
	return r
}

// Field numbers of the messages ResponseFor builds.
const (
	fieldResponseStatus   = 1 // CheckResponse.status
	fieldResponseDenied   = 2 // CheckResponse.denied_response
	fieldResponseOK       = 3 // CheckResponse.ok_response
	fieldResponseMetadata = 4 // CheckResponse.dynamic_metadata
	fieldStatusCode       = 1 // google.rpc.Status.code
	fieldStatusMessage    = 2 // google.rpc.Status.message
	fieldDeniedStatus     = 1 // DeniedHttpResponse.status
	fieldDeniedHeaders    = 2 // DeniedHttpResponse.headers
	fieldDeniedBody       = 3 // DeniedHttpResponse.body
	fieldHTTPStatusCode   = 1 // envoy.type.v3.HttpStatus.code
	fieldOKHeaders        = 2 // OkHttpResponse.headers
	fieldOKRemove         = 5 // OkHttpResponse.headers_to_remove
	fieldOptionHeader     = 1 // HeaderValueOption.header
	fieldOptionAction     = 3 // HeaderValueOption.append_action
	fieldHeaderKey        = 1 // HeaderValue.key
	fieldHeaderValue      = 2 // HeaderValue.value
	fieldStructFields     = 1 // google.protobuf.Struct.fields (map entries)
	fieldEntryKey         = 1 // a map entry's key
	fieldEntryValue       = 2 // a map entry's value
	fieldValueString      = 3 // google.protobuf.Value.string_value
	fieldValueStruct      = 5 // google.protobuf.Value.struct_value
)

// appendResponse appends ResponseFor(d)'s encoding, fields and map entries
// in the order deterministic marshalling writes them.
// It reports false when a string field would not be UTF-8.
func appendResponse(b []byte, d *binding.Decision) ([]byte, bool) {
	meta, metaOK := newWireMeta(d)
	headers, n := answerHeaders(d)
	for _, h := range headers[:n] {
		if !utf8.ValidString(h.value) {
			return nil, false
		}
	}
	var reason, remove string
	var body []byte
	var code uint64
	headersField := protowire.Number(fieldOKHeaders)
	if !d.Allowed {
		httpCode, bb := clientDeny(d)
		code, reason, body, headersField = uint64(httpCode), d.Reason, bb, fieldDeniedHeaders
		if !utf8.ValidString(reason) || !utf8.Valid(body) {
			return nil, false
		}
	} else if d.AdvisoryReason == "" {
		remove = advisoryOnly[0]
	}

	// google.rpc.Status: PERMISSION_DENIED and the reason, or OK (empty).
	statusLen := 0
	if !d.Allowed {
		statusLen = sizeVarint(fieldStatusCode, uint64(codes.PermissionDenied)) + sizeString(fieldStatusMessage, reason)
	}
	headersLen := 0
	for _, h := range headers[:n] {
		headersLen += sizeMessage(headersField, headerLen(h))
	}
	var answerLen int
	var answerField protowire.Number
	if d.Allowed {
		answerField, answerLen = fieldResponseOK, headersLen+sizeString(fieldOKRemove, remove)
	} else {
		answerField = fieldResponseDenied
		answerLen = sizeMessage(fieldDeniedStatus, sizeVarint(fieldHTTPStatusCode, code)) + headersLen + sizeString(fieldDeniedBody, body)
	}
	total := sizeMessage(fieldResponseStatus, statusLen) + sizeMessage(answerField, answerLen)
	if metaOK {
		total += sizeMessage(fieldResponseMetadata, meta.size())
	}
	b = slices.Grow(b, total)

	b = appendMessage(b, fieldResponseStatus, statusLen)
	if !d.Allowed {
		b = appendVarint(b, fieldStatusCode, uint64(codes.PermissionDenied))
		b = appendString(b, fieldStatusMessage, reason)
	}
	// Deterministic marshalling writes a oneof (the answer) after the
	// other fields.
	if metaOK {
		b = meta.append(b, fieldResponseMetadata)
	}
	b = appendMessage(b, answerField, answerLen)
	if !d.Allowed {
		b = appendMessage(b, fieldDeniedStatus, sizeVarint(fieldHTTPStatusCode, code))
		b = appendVarint(b, fieldHTTPStatusCode, code)
	}
	for _, h := range headers[:n] {
		b = appendHeader(b, headersField, h)
	}
	if d.Allowed {
		b = appendString(b, fieldOKRemove, remove)
	} else {
		b = appendString(b, fieldDeniedBody, body)
	}
	return b, true
}

// headerValueLen is the length of h as a HeaderValue.
func headerValueLen(h field) int {
	return sizeString(fieldHeaderKey, h.key) + sizeString(fieldHeaderValue, h.value)
}

// headerLen is the length of h as a HeaderValueOption that overwrites any
// header of its name.
func headerLen(h field) int {
	return sizeMessage(fieldOptionHeader, headerValueLen(h)) +
		sizeVarint(fieldOptionAction, uint64(corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD))
}

// appendHeader appends h as field num, a HeaderValueOption.
func appendHeader(b []byte, num protowire.Number, h field) []byte {
	b = appendMessage(b, num, headerLen(h))
	b = appendMessage(b, fieldOptionHeader, headerValueLen(h))
	b = appendString(b, fieldHeaderKey, h.key)
	b = appendString(b, fieldHeaderValue, h.value)
	return appendVarint(b, fieldOptionAction, uint64(corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD))
}

// wireMeta is dynamicMetadata's struct: metadataKey holding a struct of
// the members.
type wireMeta struct {
	members [3]field
	inner   int // the length of the members' struct
}

// newWireMeta reports false where dynamicMetadata leaves the metadata out.
func newWireMeta(d *binding.Decision) (wireMeta, bool) {
	ms, ok := metadataMembers(d)
	if !ok {
		return wireMeta{}, false
	}
	m := wireMeta{members: ms}
	for _, e := range ms {
		m.inner += sizeMessage(fieldStructFields, entryLen(e.key, stringValueLen(e.value)))
	}
	return m, true
}

// stringValueLen is the length of a Value holding s: a oneof member is
// written even when empty.
func stringValueLen(s string) int {
	return protowire.SizeTag(fieldValueString) + protowire.SizeBytes(len(s))
}

func entryLen(key string, valueLen int) int {
	return sizeString(fieldEntryKey, key) + sizeMessage(fieldEntryValue, valueLen)
}

// outerValueLen is the length of the Value that holds the members' struct.
func (m *wireMeta) outerValueLen() int { return sizeMessage(fieldValueStruct, m.inner) }

func (m *wireMeta) size() int {
	return sizeMessage(fieldStructFields, entryLen(metadataKey, m.outerValueLen()))
}

func (m *wireMeta) append(b []byte, num protowire.Number) []byte {
	outer := m.outerValueLen()
	b = appendMessage(b, num, m.size())
	b = appendMessage(b, fieldStructFields, entryLen(metadataKey, outer))
	b = appendString(b, fieldEntryKey, metadataKey)
	b = appendMessage(b, fieldEntryValue, outer)
	b = appendMessage(b, fieldValueStruct, m.inner)
	for _, e := range m.members {
		b = appendMessage(b, fieldStructFields, entryLen(e.key, stringValueLen(e.value)))
		b = appendString(b, fieldEntryKey, e.key)
		b = appendMessage(b, fieldEntryValue, stringValueLen(e.value))
		b = protowire.AppendTag(b, fieldValueString, protowire.BytesType)
		b = protowire.AppendString(b, e.value)
	}
	return b
}

// sizeString is the size of a proto3 string or bytes field: nothing when
// empty.
func sizeString[T string | []byte](num protowire.Number, s T) int {
	if len(s) == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(s))
}

func appendString[T string | []byte](b []byte, num protowire.Number, s T) []byte {
	if len(s) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(len(s)))
	return append(b, s...)
}

// sizeVarint is the size of a proto3 integer or enum field: nothing when 0.
func sizeVarint(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// sizeMessage is the size of a message field of n bytes, written even when
// empty (the field is set).
func sizeMessage(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// appendMessage appends the tag and length of a message field of n bytes;
// its fields follow.
func appendMessage(b []byte, num protowire.Number, n int) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(n))
}
