package extauthz

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"

	"github.com/contractrefine/autonomy/binding"
)

// TestCodecMarshalsAsProto: what the codec writes for the responses the
// service sends decodes, through the protobuf codec, to the same message,
// and a message without generated code is written as the protobuf codec
// writes it. A request is read back as the protobuf codec reads it.
func TestCodecMarshalsAsProto(t *testing.T) {
	c := codec{proto: encoding.GetCodecV2(grpcproto.Name)}
	allow := floorChecker{}.Check(context.Background(), nil)
	advisory := allow
	advisory.AdvisoryReason = "contract: preflight_required"
	deny := binding.Decision{Status: http.StatusForbidden, Reason: "contract: preflight_replay",
		AuditID: "au_0123456789abcdefghij", Mode: binding.ModeEnforce, PreflightID: "pf_x", ToolKind: "tool.echo"}
	unavailable := deny
	unavailable.Status, unavailable.Reason = http.StatusServiceUnavailable, "contract: verifier_unavailable"
	// A body past the pooling threshold takes the pooled buffer.
	big := deny
	big.Reason = strings.Repeat("r", 4<<10)
	for name, d := range map[string]binding.Decision{"allow": allow, "advisory": advisory, "deny": deny,
		"unavailable": unavailable, "big": big} {
		t.Run(name, func(t *testing.T) {
			want := ResponseFor(&d)
			data, err := c.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			defer data.Free()
			got := new(authv3.CheckResponse)
			if err := proto.Unmarshal(data.Materialize(), got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, want) {
				t.Fatalf("decoded %v, want %v", got, want)
			}
			if n := proto.Size(want); data.Len() != n {
				t.Fatalf("%d bytes, protobuf writes %d", data.Len(), n)
			}
		})
	}
	health := &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}
	data, err := c.Marshal(health)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := proto.Marshal(health); string(data.Materialize()) != string(want) {
		t.Fatalf("health response %x, want %x", data.Materialize(), want)
	}
	req := benchCheckRequest("tool.echo", "pf_0123456789abcdefghij", 1)
	raw, err := c.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	back := new(authv3.CheckRequest)
	if err := c.Unmarshal(raw, back); err != nil || !proto.Equal(back, req) {
		t.Fatalf("request read back as %v (%v), want %v", back, err, req)
	}
	if c.Name() != grpcproto.Name {
		t.Fatalf("name %q", c.Name())
	}
}

// BenchmarkCodecMarshal: a deny's CheckResponse through the protobuf
// codec and through the generated marshalling.
func BenchmarkCodecMarshal(b *testing.B) {
	d := binding.Decision{Status: http.StatusForbidden, Reason: "contract: preflight_replay",
		AuditID: "au_0123456789abcdefghij", Mode: binding.ModeEnforce, PreflightID: "pf_x", ToolKind: "tool.echo"}
	resp := ResponseFor(&d)
	for name, c := range map[string]encoding.CodecV2{"proto": encoding.GetCodecV2(grpcproto.Name),
		"vt": codec{proto: encoding.GetCodecV2(grpcproto.Name)}} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				data, err := c.Marshal(resp)
				if err != nil {
					b.Fatal(err)
				}
				data.Free()
			}
		})
	}
}

// TestWireResponseIsResponseFor: the bytes the Check handler answers with
// are the deterministic protobuf encoding of ResponseFor's message, through
// the protobuf codec as through this package's, and they decode to that
// message.
// A decision with a string that is not UTF-8 gets ResponseFor's message
// itself.
func TestWireResponseIsResponseFor(t *testing.T) {
	deny := binding.Decision{Status: http.StatusForbidden, Reason: "contract: preflight_replay",
		AuditID: "au_0123456789abcdefghij", Mode: binding.ModeEnforce, PreflightID: "pf_x", ToolKind: "tool.echo"}
	allow := binding.Decision{Allowed: true, Status: http.StatusOK, Reason: "policy: allowed",
		AuditID: "au_0123456789abcdefghij", Mode: binding.ModeEnforce}
	with := func(d binding.Decision, f func(*binding.Decision)) binding.Decision { f(&d); return d }
	tests := map[string]struct {
		d        binding.Decision
		fallback bool
	}{
		"deny":  {d: deny},
		"allow": {d: allow},
		"advisory allow": {d: with(allow, func(d *binding.Decision) {
			d.AdvisoryReason, d.Mode = "contract: preflight_required", binding.ModeAdvisory
		})},
		"unavailable": {d: with(deny, func(d *binding.Decision) {
			d.Status, d.Reason = http.StatusServiceUnavailable, "contract: verifier_unavailable"
		})},
		"no audit id":        {d: with(deny, func(d *binding.Decision) { d.AuditID = "" })},
		"allow, no audit id": {d: with(allow, func(d *binding.Decision) { d.AuditID = "" })},
		"no reason":          {d: with(deny, func(d *binding.Decision) { d.Reason = "" })},
		"no mode":            {d: with(deny, func(d *binding.Decision) { d.Mode = "" })},
		"long reason":        {d: with(deny, func(d *binding.Decision) { d.Reason = "contract: " + strings.Repeat("é", 5000) })},
		"zero":               {d: binding.Decision{}},
		"mode not UTF-8":     {d: with(deny, func(d *binding.Decision) { d.Mode = "\xff" })},
		"reason not UTF-8":   {d: with(deny, func(d *binding.Decision) { d.Reason = "contract: \xff" }), fallback: true},
		"audit id not UTF-8": {d: with(allow, func(d *binding.Decision) { d.AuditID = "au_\xff" }), fallback: true},
		"advisory not UTF-8": {d: with(allow, func(d *binding.Decision) { d.AdvisoryReason = "\xc3" }), fallback: true},
	}
	det := proto.MarshalOptions{Deterministic: true}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			want := ResponseFor(&tc.d)
			got := wireResponse(tc.d)
			if tc.fallback {
				if len(got.ProtoReflect().GetUnknown()) != 0 || !proto.Equal(got, want) {
					t.Fatalf("got %v, want ResponseFor's %v", got, want)
				}
				return
			}
			wantBytes, err := det.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			gotBytes, err := proto.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(gotBytes, wantBytes) {
				t.Fatalf("wrote %d bytes\n%.400x\nwant %d\n%.400x", len(gotBytes), gotBytes, len(wantBytes), wantBytes)
			}
			data, err := codec{proto: encoding.GetCodecV2(grpcproto.Name)}.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			defer data.Free()
			if !bytes.Equal(data.Materialize(), wantBytes) {
				t.Fatalf("the codec wrote %x", data.Materialize())
			}
			back := new(authv3.CheckResponse)
			if err := proto.Unmarshal(gotBytes, back); err != nil || !proto.Equal(back, want) {
				t.Fatalf("read back %v (%v), want %v", back, err, want)
			}
		})
	}
}
