package extauthz_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/extauthz"
	"github.com/contractrefine/autonomy/internal/bundle"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// The one preflight the fuzz gate knows: a single tool.shell step (a kind
// that requires a preflight) for actor user:fuzz.
const (
	fuzzPreflightID = "pf_fuzzAAAAAAAAAAAAAAAAAAAA"
	fuzzAuditID     = "au_fuzzAAAAAAAAAAAAAAAAAAAA"
	fuzzActor       = "user:fuzz"
	// fuzzFramesPerDB bounds the log's growth: after this many checks the
	// gate starts over on a fresh log (and a fresh single-use ledger).
	fuzzFramesPerDB = 20000
)

var fuzzReasonRE = regexp.MustCompile(`^[a-z][a-z0-9_]*: [a-z0-9_]+$`)

// fuzzGate is an enforce-mode gate on a real WAL and the embedded default
// bundle, with a ledger of the request ids it allowed under the known
// preflight.
type fuzzGate struct {
	mu      sync.Mutex
	dir     string
	db      *wal.DB
	gate    *binding.Gate
	policy  *bundle.Bundle
	checks  int
	allowed map[string]bool
	logs    *fuzzLog
}

// fuzzLog remembers whether the gate logged a recovered panic: the gate
// turns a panic into a 503 deny, which the fuzzer would otherwise not see.
type fuzzLog struct {
	mu       sync.Mutex
	panicked string
}

func (l *fuzzLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *fuzzLog) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "panic") {
		l.mu.Lock()
		var detail string
		r.Attrs(func(a slog.Attr) bool { detail += " " + a.String(); return true })
		l.panicked = r.Message + detail
		l.mu.Unlock()
	}
	return nil
}
func (l *fuzzLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *fuzzLog) WithGroup(string) slog.Handler      { return l }

func newFuzzGate(f *testing.F) *fuzzGate {
	pol, err := bundle.Load(context.Background(), "", nil)
	if err != nil {
		f.Fatal(err)
	}
	g := &fuzzGate{dir: f.TempDir(), policy: pol, logs: &fuzzLog{}}
	if err := g.reset(); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { g.db.Close() })
	return g
}

// reset starts over on an empty log holding only the known preflight.
func (g *fuzzGate) reset() error {
	if g.db != nil {
		g.db.Close()
		os.Remove(g.db.Path())
	}
	db, err := wal.Open(g.dir, &wal.Options{NoSync: true})
	if err != nil {
		return err
	}
	now := time.Now()
	b := preflight.Binding{PreflightID: fuzzPreflightID, AuditID: fuzzAuditID, Outcome: preflight.OutcomePass,
		ActorID: fuzzActor, ExpiresAt: now.Add(time.Hour),
		Steps: []preflight.BoundStep{{ID: "s1", Kind: "tool.shell"}}}
	decision := json.RawMessage(`{"outcome":"pass","preflight_id":"` + fuzzPreflightID + `"}`)
	if _, err := db.RecordPreflight(context.Background(), wal.PreflightRecord{Binding: b, Decision: decision, Time: now}); err != nil {
		db.Close()
		return err
	}
	g.db, g.checks, g.allowed = db, 0, map[string]bool{}
	g.gate = binding.New(binding.Options{Store: db, Log: db, Policy: func() binding.Policy { return g.policy },
		Mode: binding.ModeEnforce, Logger: slog.New(g.logs)})
	return nil
}

// fuzzCheck builds a CheckRequest from fuzzed parts. headers is "name:
// value" lines; flags choose where the body and headers go and whether the
// known preflight id is sent.
func fuzzCheck(method, path, headers string, body []byte, principal string, flags byte) *authv3.CheckRequest {
	h := &authv3.AttributeContext_HttpRequest{Method: method, Path: path, Headers: map[string]string{}}
	for _, line := range strings.Split(headers, "\n") {
		k, v, _ := strings.Cut(line, ":")
		if flags&2 != 0 {
			if h.HeaderMap == nil {
				h.HeaderMap = &corev3.HeaderMap{}
			}
			h.HeaderMap.Headers = append(h.HeaderMap.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
		} else {
			h.Headers[k] = v
		}
	}
	if flags&4 != 0 {
		h.Headers["x-autonomy-preflight-id"] = fuzzPreflightID
	}
	if flags&1 != 0 {
		h.Body = string(body)
	} else {
		h.RawBody = body
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:  &authv3.AttributeContext_Peer{Principal: principal},
		Request: &authv3.AttributeContext_Request{Http: h},
	}}
}

// FuzzCheck feeds arbitrary method, path, headers, body and principal
// through RequestFromCheck and Gate.Check in enforce mode. Whatever the
// input: no panic (also none recovered inside the gate), a well-formed
// decision and response, and no allow of a gated call unless the kind needs
// no preflight and none was presented, or the call is the first use of the
// one known preflight. Its single step is never allowed to two request ids.
func FuzzCheck(f *testing.F) {
	g := newFuzzGate(f)
	toolBody := func(kind string, args string) []byte {
		return []byte(`{"kind":"` + kind + `","args":` + args + `}`)
	}
	f.Add("POST", "/v1/tool", "x-request-id:r1", toolBody("tool.shell", `{"cmd":"ls"}`), "", byte(4))
	f.Add("POST", "/v1/tool", "x-request-id:r2", toolBody("tool.shell", `{"cmd":"ls"}`), "", byte(4))
	f.Add("POST", "/v1/tool", "x-request-id:r1", toolBody("tool.shell", `{}`), fuzzActor, byte(5))
	f.Add("POST", "/v1/tool", "x-request-id:r3", toolBody("tool.shell", `{}`), "spiffe://mesh/other", byte(4))
	f.Add("POST", "/v1/tool", "", toolBody("tool.echo", `{"msg":"hi"}`), "", byte(0))
	f.Add("POST", "/v1/tool?x=1", "x-autonomy-preflight-id:pf_unknownunknownunknown", toolBody("refund.create.v2", `{"amountUsd":5}`), "", byte(2))
	f.Add("POST", "/v1/tool", "x-autonomy-preflight-id:", []byte(`{"kind":1}`), "", byte(1))
	f.Add("POST", "/v1/tool", "X-Autonomy-Preflight-Id:"+fuzzPreflightID+"\nx-request-id:r9", toolBody("tool.shell", `[]`), "", byte(2))
	f.Add("GET", "/v1/tool", "", []byte(nil), "", byte(0))
	f.Add("post", "/v1/tool", "", toolBody("tool.shell", `{}`), "", byte(4))
	f.Add("POST", "/v1/tool#frag", "content-type:application/json", []byte("\xff\xfe{\"kind\":\"tool.shell\"}"), "", byte(4))
	f.Add("POST", "/v1/tool", "x-request-id:\xc3\x28", []byte(`{"kind":"tool.shell","args":{"a":[[[[[[[[[[1]]]]]]]]]]}}`), "", byte(6))
	f.Fuzz(func(t *testing.T, method, path, headers string, body []byte, principal string, flags byte) {
		req := fuzzCheck(method, path, headers, body, principal, flags)
		r := extauthz.RequestFromCheck(req)

		g.mu.Lock()
		defer g.mu.Unlock()
		if g.checks++; g.checks > fuzzFramesPerDB {
			if err := g.reset(); err != nil {
				t.Fatal(err)
			}
		}
		d := g.gate.Check(context.Background(), r)
		if p := g.logs.panicked; p != "" {
			t.Fatalf("the gate recovered a panic: %s", p)
		}
		resp := extauthz.ResponseFor(&d)

		switch {
		case d.Allowed && (d.Status != http.StatusOK || codes.Code(resp.GetStatus().GetCode()) != codes.OK):
			t.Fatalf("allow with status %d / %v", d.Status, resp.GetStatus())
		case !d.Allowed && d.Status != http.StatusForbidden && d.Status != http.StatusServiceUnavailable:
			t.Fatalf("deny with status %d", d.Status)
		case !d.Allowed && resp.GetDeniedResponse() == nil:
			t.Fatal("deny without a denied response")
		case !fuzzReasonRE.MatchString(d.Reason):
			t.Fatalf("reason %q is not <layer>: <subreason>", d.Reason)
		}
		if !d.Allowed {
			var body struct {
				Error struct{ Code, Reason string } `json:"error"`
			}
			if err := json.Unmarshal([]byte(resp.GetDeniedResponse().GetBody()), &body); err != nil || body.Error.Reason != d.Reason {
				t.Fatalf("deny body %q (%v)", resp.GetDeniedResponse().GetBody(), err)
			}
			return
		}
		if !d.Gated {
			return
		}
		_, presented := r.Headers[binding.HeaderPreflightID]
		gov := g.policy.Governance()
		_, known := gov.Capability(d.ToolKind)
		switch {
		case d.PreflightID == fuzzPreflightID:
			g.allowed[r.Headers[binding.HeaderRequestID]] = true
			if len(g.allowed) > 1 {
				t.Fatalf("the one-step preflight was allowed to %d request ids: %v", len(g.allowed), g.allowed)
			}
			if d.ToolKind != "tool.shell" {
				t.Fatalf("preflight for tool.shell allowed %q", d.ToolKind)
			}
		case presented:
			t.Fatalf("allowed %q with preflight header %q that names no valid preflight", d.ToolKind, r.Headers[binding.HeaderPreflightID])
		case !known || gov.RequiresPreflight(d.ToolKind):
			t.Fatalf("allowed %q without a preflight (known capability %v)", d.ToolKind, known)
		}
	})
}
