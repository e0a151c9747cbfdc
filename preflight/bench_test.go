package preflight

import (
	"context"
	"testing"
)

func BenchmarkEvaluate(b *testing.B) {
	gov := loadGovernance(b)
	cases := map[string]Input{
		"one step":  {Request: echoRequest(1), Governance: gov, Clauses: refundClauses{}, Attempt: 1},
		"two steps": {Request: refundRequest(b), Envelope: highRiskEnvelope(), Governance: gov, Clauses: refundClauses{}, Attempt: 1},
	}
	v := NewVerifier(Options{Chain: testChain(), Now: fixedClock})
	for name, in := range cases {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				d, err := v.Evaluate(context.Background(), in)
				if err != nil || d.Outcome != OutcomePass {
					b.Fatalf("decision %v, %v", d, err)
				}
			}
		})
	}
}

func BenchmarkDecodeRequest(b *testing.B) {
	body := []byte(refundJSON)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeRequest(body); err != nil {
			b.Fatal(err)
		}
	}
}
