package extauthz

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/internal/benchutil"
	"github.com/contractrefine/autonomy/internal/bundle"
	"github.com/contractrefine/autonomy/internal/ids"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// floorChecker allows everything without looking: the Check floor.
type floorChecker struct{}

func (floorChecker) Check(context.Context, *binding.Request) binding.Decision {
	return binding.Decision{Allowed: true, Status: http.StatusOK, Reason: "policy: allowed",
		AuditID: "au_floorfloorfloorfloor", Mode: binding.ModeEnforce}
}

// benchServe serves gate over gRPC on loopback and returns a client.
func benchServe(b *testing.B, gate Checker) authv3.AuthorizationClient {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer(CodecOption())
	NewServer(gate).Register(gs)
	go gs.Serve(ln)
	b.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return authv3.NewAuthorizationClient(conn)
}

// benchGate is the real gate in enforce mode on a fsyncing WAL with the
// embedded default bundle, and n recorded one-step tool.echo preflights;
// opts adjust the gate's options.
func benchGate(b *testing.B, n int, opts ...func(*binding.Options)) (*binding.Gate, []string) {
	b.Helper()
	ctx := context.Background()
	bun, err := bundle.Load(ctx, "", nil)
	if err != nil {
		b.Fatal(err)
	}
	db, err := wal.Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	now := time.Now()
	o := binding.Options{Store: db, Log: db, Policy: func() binding.Policy { return bun },
		Mode: binding.ModeEnforce, NewID: ids.Audit, CacheSize: 1 << 20}
	for _, f := range opts {
		f(&o)
	}
	gate := binding.New(o)
	req := &preflight.Request{Intent: preflight.Intent{Summary: "bench", PlanHash: "plan-1"},
		Plan:    preflight.Plan{Steps: []preflight.Step{{ID: "s1", Kind: "tool.echo", Zone: "default", Args: map[string]any{"msg": "hi"}}}},
		Context: preflight.Context{Actor: preflight.Actor{ID: "user:bench", SessionID: "s"}}}
	idList := make([]string, n)
	for start := 0; start < n; start += 2000 {
		end := min(start+2000, n)
		err := db.Update(ctx, func(tx *wal.Tx) error {
			for i := start; i < end; i++ {
				d := &preflight.Decision{PreflightID: ids.Preflight(), AuditID: ids.Audit(), Outcome: preflight.OutcomePass,
					Reason: preflight.ReasonPassed, ContractResults: []preflight.Result{}, ClauseResults: []preflight.Result{},
					Eligibility: preflight.Eligibility{Allowed: true, BoundToolKinds: []string{"tool.echo"}}, Attempt: 1}
				bind, err := preflight.BindingOf(req, d, now.Add(time.Hour))
				if err != nil {
					return err
				}
				raw, err := d.CanonicalJSON()
				if err != nil {
					return err
				}
				if _, err := tx.RecordPreflight(wal.PreflightRecord{Binding: bind, Decision: raw, Time: now}); err != nil {
					return err
				}
				idList[i] = d.PreflightID
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return gate, idList
}

func benchCheckRequest(kind, preflightID string, i int) *authv3.CheckRequest {
	h := map[string]string{"content-type": "application/json", "x-request-id": fmt.Sprintf("req-%d", i)}
	if preflightID != "" {
		h["x-autonomy-preflight-id"] = preflightID
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: http.MethodPost, Path: "/v1/tool", Headers: h,
			Body: `{"kind":"` + kind + `","args":{"msg":"hi"}}`}}}}
}

// BenchmarkGRPCCheck measures Check over gRPC on loopback, client and
// server in one process, against the floor (a server that allows without
// looking), by 1 and 64 callers. The ratios between these lines are the
// in-process view of the load command's goals.
func BenchmarkGRPCCheck(b *testing.B) {
	cases := []struct {
		name  string
		setup func(b *testing.B) (Checker, func(i int) *authv3.CheckRequest)
		code  codes.Code
	}{
		{"floor", func(b *testing.B) (Checker, func(int) *authv3.CheckRequest) {
			return floorChecker{}, func(i int) *authv3.CheckRequest { return benchCheckRequest("tool.echo", "", i) }
		}, codes.OK},
		{"consume", func(b *testing.B) (Checker, func(int) *authv3.CheckRequest) {
			gate, idList := benchGate(b, b.N)
			return gate, func(i int) *authv3.CheckRequest { return benchCheckRequest("tool.echo", idList[i], i) }
		}, codes.OK},
		{"replay", func(b *testing.B) (Checker, func(int) *authv3.CheckRequest) {
			gate, idList := benchGate(b, 1)
			if d := gate.Check(context.Background(), RequestFromCheck(benchCheckRequest("tool.echo", idList[0], -1))); !d.Allowed {
				b.Fatalf("first use: %+v", d)
			}
			return gate, func(i int) *authv3.CheckRequest { return benchCheckRequest("tool.echo", idList[0], i) }
		}, codes.PermissionDenied},
		{"no_header", func(b *testing.B) (Checker, func(int) *authv3.CheckRequest) {
			gate, _ := benchGate(b, 0)
			return gate, func(i int) *authv3.CheckRequest { return benchCheckRequest("tool.shell", "", i) }
		}, codes.PermissionDenied},
	}
	for _, tc := range cases {
		for _, conc := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/conc=%d", tc.name, conc), func(b *testing.B) {
				gate, mk := tc.setup(b)
				client := benchServe(b, gate)
				reqs := make([]*authv3.CheckRequest, b.N)
				for i := range reqs {
					reqs[i] = mk(i)
				}
				ctx := context.Background()
				b.ReportAllocs()
				b.ResetTimer()
				benchutil.Parallel(b, conc, func(i int) error {
					resp, err := client.Check(ctx, reqs[i])
					if err == nil && codes.Code(resp.GetStatus().GetCode()) != tc.code {
						err = fmt.Errorf("call %d: %v", i, resp.GetStatus())
					}
					return err
				})
			})
		}
	}
}

// BenchmarkTranslate measures the protocol adapters alone: a CheckRequest
// into the gate's Request, and a decision into a CheckResponse.
func BenchmarkTranslate(b *testing.B) {
	req := benchCheckRequest("tool.echo", "pf_0123456789abcdefghij", 1)
	allow := floorChecker{}.Check(context.Background(), nil)
	deny := binding.Decision{Status: http.StatusForbidden, Reason: "contract: preflight_replay",
		AuditID: "au_0123456789abcdefghij", Mode: binding.ModeEnforce}
	b.Run("request", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r := RequestFromCheck(req); r.Method != http.MethodPost {
				b.Fatal(r)
			}
		}
	})
	b.Run("allow", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r := ResponseFor(&allow); r.GetOkResponse() == nil {
				b.Fatal(r)
			}
		}
	})
	b.Run("deny", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r := ResponseFor(&deny); r.GetDeniedResponse() == nil {
				b.Fatal(r)
			}
		}
	})
}
