package binding

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/wal"
)

// revPolicy is a Policy of which the frame reads only the revision.
type revPolicy struct {
	Policy
	rev string
}

func (p revPolicy) Revision() string { return p.rev }

// frameCase is one decision frame's inputs: the call, the decision, and
// whether the attrs cannot be written (fallback).
type frameCase struct {
	raw      bool
	c        call
	d        Decision
	fallback bool
}

// frameCases are decision frames of every shape the gate writes.
func frameCases() map[string]frameCase {
	args := map[string]any{"z": json.Number("1.50"), "a": []any{"x\u2028", nil, true}, "\u00e9": map[string]any{}}
	deny := Decision{Status: http.StatusForbidden, Reason: "contract: preflight_replay", AuditID: "aud"}
	return map[string]frameCase{
		"replay deny": {
			c: call{req: &Request{Method: "POST", Path: "/v1/tool?x=1"}, gated: true, kind: "tool.echo",
				argsMap: map[string]any{}, requestID: "req-1", policy: revPolicy{rev: "rev-1"}},
			d: Decision{Status: 403, Reason: "contract: preflight_replay", PreflightID: "pf_1", AuditID: "aud"},
		},
		"allow with step and actor": {
			c: call{req: &Request{Method: "POST", Path: "/v1/tool"}, gated: true, kind: "tool.echo",
				argsMap: args, identity: "spiffe://x/\"y\"", policy: revPolicy{rev: ""}},
			d: Decision{Allowed: true, Status: 200, Reason: "preflight: passed", PreflightID: "pf", StepID: "s1"},
		},
		"advisory deny with raw args": {
			raw: true,
			c: call{req: &Request{Method: "POST", Path: "/v1/tool"}, gated: true, kind: "k\n\u0001\\",
				argsMap: args, requestID: "\t", policy: revPolicy{rev: "r"}},
			d: Decision{Status: 403, Reason: "policy: no", AdvisoryReason: "contract: plan_mismatch"},
		},
		"advisory allow": {
			c: call{req: &Request{Method: "POST", Path: "/v1/tool"}, gated: true, kind: "tool.shell", argsMap: map[string]any{}},
			d: Decision{Allowed: true, Status: 200, Reason: "policy: allowed", AdvisoryReason: "contract: preflight_required"},
		},
		"ungated unavailable": {
			c: call{req: &Request{Method: "GET", Path: "/healthz#f"}},
			d: Decision{Status: 503, Reason: reasonVerifierMissing},
		},
		"args digest fails": {
			raw: true,
			c: call{req: &Request{Method: "POST", Path: "/v1/tool"}, gated: true, kind: "tool.echo",
				argsMap: map[string]any{"n": json.Number("1e400")}},
			d:        deny,
			fallback: true,
		},
		// Request strings that are not UTF-8 are recorded with U+FFFD.
		"actor, request id, path and kind not UTF-8": {
			c: call{req: &Request{Method: "PO\xffST", Path: "/v1/\xfetool"}, gated: true, kind: "tool.\xff",
				argsMap: map[string]any{}, identity: "user:\xff", requestID: "r\xc3"},
			d: Decision{Status: 403, Reason: "contract: preflight_binding_mismatch", PreflightID: "pf_\xff"},
		},
	}
}

// TestDecisionFrame checks what the gate puts in decision frames: attrs
// that cannot be written fail the write (so the answer is a 503), the ids
// docs/API.md names are there even when empty, and request text that is not
// UTF-8 is recorded with U+FFFD.
func TestDecisionFrame(t *testing.T) {
	for name, tc := range frameCases() {
		t.Run(name, func(t *testing.T) {
			g := New(Options{Mode: ModeEnforce, StoreRawRequests: tc.raw})
			got, err := wal.EncodeAttrs(g.frame(&tc.c, &tc.d, time.Time{}).Attrs)
			if tc.fallback != (err != nil) {
				t.Fatalf("attrs %s, %v; want an error: %v", got, err, tc.fallback)
			}
			if err == nil && !json.Valid(got) {
				t.Fatalf("attrs are not JSON: %s", got)
			}
		})
	}
	// docs/API.md names preflight_id and step_id for every decision frame:
	// a deny that named no preflight still has both, empty.
	deny := Decision{Status: http.StatusForbidden, Reason: "contract: preflight_replay", AuditID: "aud"}
	attrs := func(c *call) []byte {
		b, err := wal.EncodeAttrs(New(Options{}).frame(c, &deny, time.Time{}).Attrs)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var noIDs map[string]any
	if b := attrs(&call{req: &Request{}}); json.Unmarshal(b, &noIDs) != nil {
		t.Fatalf("attrs = %s", b)
	}
	if pf, ok := noIDs["preflight_id"]; !ok || pf != "" {
		t.Errorf("preflight_id %v (present %v), want empty", pf, ok)
	}
	if st, ok := noIDs["step_id"]; !ok || st != "" {
		t.Errorf("step_id %v (present %v), want empty", st, ok)
	}
	if b := attrs(&call{req: &Request{}, identity: "user:\xfe"}); !bytes.Contains(b, []byte("\"actor\":\"user:\uFFFD\"")) {
		t.Fatalf("attrs = %s; want the actor with U+FFFD", b)
	}
}

// BenchmarkFrameAttrs measures the decision attrs of a replay deny, built
// and written in canonical JSON.
func BenchmarkFrameAttrs(b *testing.B) {
	g := New(Options{Mode: ModeEnforce})
	c := call{req: &Request{Method: "POST", Path: "/v1/tool"}, gated: true, kind: "tool.echo",
		argsMap: map[string]any{"msg": "hi"}, requestID: "req-1", policy: revPolicy{rev: "rev-1"}}
	d := Decision{Status: 403, Reason: "contract: preflight_replay", PreflightID: "pf_0123456789abcdef", AuditID: "aud"}
	b.ReportAllocs()
	for range b.N {
		if _, err := wal.EncodeAttrs(g.frame(&c, &d, time.Time{}).Attrs); err != nil {
			b.Fatal(err)
		}
	}
}

// denyBody is the shape DenyBody writes, members in the order docs/API.md gives.
type denyBody struct {
	Error struct {
		Code    string `json:"code"`
		Reason  string `json:"reason"`
		AuditID string `json:"audit_id"`
		Path    string `json:"path,omitempty"`
	} `json:"error"`
}

// TestDenyBodyAsEncodingJSON proves DenyBody writes what encoding/json
// writes for denyBody, on the plain ASCII it writes itself and on what it
// leaves to encoding/json.
func TestDenyBodyAsEncodingJSON(t *testing.T) {
	tests := map[string]Decision{
		"replay":            {AuditID: "au_0123456789abcdef", Reason: "contract: preflight_replay"},
		"html characters":   {AuditID: "a<b>&", Reason: "policy: x & y <z>"},
		"quotes, controls":  {AuditID: "\"\\", Reason: "policy: tab\there\nnl \u0001"},
		"non-ASCII":         {AuditID: "é", Reason: "policy: \u2028 \xff ünïcode"},
		"empty":             {},
		"reason without ::": {Reason: "no layer"},
		"with a pointer":    {AuditID: "au_1", Reason: "gate: malformed_tool_call", Pointer: "/args/a~1b"},
	}
	for name, d := range tests {
		t.Run(name, func(t *testing.T) {
			var body denyBody
			body.Error.Code, body.Error.Reason, body.Error.AuditID, body.Error.Path = d.Code(), d.Reason, d.AuditID, d.Pointer
			want, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			if got := d.DenyBody(); !bytes.Equal(got, want) {
				t.Fatalf("DenyBody = %s, want %s", got, want)
			}
		})
	}
}

var updateGolden = flag.Bool("update", false, "rewrite testdata/decision_attrs.txt from the current frames")

// TestDecisionAttrsGolden compares the decision attrs of every frameCase
// with testdata/decision_attrs.txt, which holds the bytes the gate wrote
// before the attrs had a type (go test -run DecisionAttrsGolden -update
// rewrites it): a frame's hash covers them, so they must not change.
func TestDecisionAttrsGolden(t *testing.T) {
	cases := frameCases()
	names := slices.Sorted(maps.Keys(cases))
	var got bytes.Buffer
	for _, name := range names {
		tc := cases[name]
		if tc.fallback {
			continue
		}
		g := New(Options{Mode: ModeEnforce, StoreRawRequests: tc.raw})
		b, err := wal.EncodeAttrs(g.frame(&tc.c, &tc.d, time.Time{}).Attrs)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		fmt.Fprintf(&got, "%s\n%s\n", name, b)
	}
	golden := filepath.Join("testdata", "decision_attrs.txt")
	if *updateGolden {
		if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("decision attrs differ from %s:\n%s\nwant\n%s", golden, got.Bytes(), want)
	}
}
