package preflight

import (
	"testing"
	"time"
)

func TestAttestationFreshness(t *testing.T) {
	const failHead = `{"contract":"attestation_freshness","outcome":"fail","severity":"blocking","reason":"contract: attestation_stale","repair_hints":[],`
	const pass = `{"contract":"attestation_freshness","outcome":"pass","severity":"blocking","reason":"","repair_hints":[],"evidence":{}}`
	issued := func(at string) func(*Request) {
		return func(r *Request) { r.Context.Attestation.IssuedAt = at }
	}
	cases := map[string]struct {
		echo bool
		req  func(*Request)
		gov  func(*Governance)
		want string
	}{
		"pass":                   {want: pass},
		"exactly max_age old":    {req: issued("2026-06-23T14:20:05Z"), want: pass},
		"30s in the future":      {req: issued("2026-06-23T14:30:35Z"), want: pass},
		"fractional seconds":     {req: issued("2026-06-23T14:29:59.5+00:00"), want: pass},
		"no enrolled nodes list": {req: func(r *Request) { r.Context.Attestation.NodeID = "edge-9" }, gov: func(g *Governance) { g.Attestation.EnrolledNodes = nil }, want: pass},
		"not applicable": {
			echo: true,
			want: `{"contract":"attestation_freshness","outcome":"not_applicable","severity":"info","reason":"","repair_hints":[],
				"evidence":{"detail":"no step has side effects and attestation is not required"}}`,
		},
		"required by the bundle": {
			echo: true,
			gov:  func(g *Governance) { g.Attestation.Required = true },
			want: failHead + `"evidence":{"violations":[{"field":"/context/attestation","message":"an attestation is required"}]}}`,
		},
		"missing": {
			req:  func(r *Request) { r.Context.Attestation = nil },
			want: failHead + `"evidence":{"violations":[{"field":"/context/attestation","message":"an attestation is required"}]}}`,
		},
		"node not enrolled": {
			req:  func(r *Request) { r.Context.Attestation.NodeID = "edge-9" },
			want: failHead + `"evidence":{"violations":[{"field":"/context/attestation/node_id","message":"node \"edge-9\" is not enrolled"}]}}`,
		},
		"no node": {
			req:  func(r *Request) { r.Context.Attestation.NodeID = "" },
			want: failHead + `"evidence":{"violations":[{"field":"/context/attestation/node_id","message":"the attestation names no node"}]}}`,
		},
		"unparseable": {
			req:  issued("yesterday"),
			want: failHead + `"evidence":{"violations":[{"field":"/context/attestation/issued_at","message":"issued_at \"yesterday\" is not an RFC 3339 time"}]}}`,
		},
		"stale": {
			req:  issued("2026-06-23T14:20:04Z"),
			want: failHead + `"evidence":{"violations":[{"field":"/context/attestation/issued_at","message":"the attestation is 10m1s old; the limit is 10m0s"}]}}`,
		},
		"stale under a shorter max_age": {
			gov:  func(g *Governance) { g.Attestation.MaxAge = Duration(time.Minute) },
			want: failHead + `"evidence":{"violations":[{"field":"/context/attestation/issued_at","message":"the attestation is 1m5s old; the limit is 1m0s"}]}}`,
		},
		"default max_age": {
			gov:  func(g *Governance) { g.Attestation.MaxAge = 0 },
			req:  issued("2026-06-23T14:20:04Z"),
			want: failHead + `"evidence":{"violations":[{"field":"/context/attestation/issued_at","message":"the attestation is 10m1s old; the limit is 10m0s"}]}}`,
		},
		"too far in the future": {
			req:  issued("2026-06-23T14:30:36Z"),
			want: failHead + `"evidence":{"violations":[{"field":"/context/attestation/issued_at","message":"the attestation is issued 31s in the future; the limit is 30s"}]}}`,
		},
		// Beyond what a time.Duration holds (about 292 years): the span
		// saturates, and must still read as the future it is.
		"centuries in the future": {
			req:  issued("9999-12-31T23:59:59Z"),
			want: failHead + `"evidence":{"violations":[{"field":"/context/attestation/issued_at","message":"the attestation is issued 2562047h47m16s in the future; the limit is 30s"}]}}`,
		},
		"centuries old": {
			req:  issued("0001-01-01T00:00:00Z"),
			want: failHead + `"evidence":{"violations":[{"field":"/context/attestation/issued_at","message":"the attestation is 2562047h47m16s old; the limit is 10m0s"}]}}`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req, g := refundRequest(t), loadGovernance(t)
			if tc.echo {
				req = echoRequest(1)
			}
			if tc.req != nil {
				tc.req(req)
			}
			if tc.gov != nil {
				tc.gov(g)
			}
			got, err := checkAttestationFreshness(newEvaluation(req, nil, g))
			if err != nil {
				t.Fatal(err)
			}
			assertJSON(t, got, tc.want)
		})
	}
}
