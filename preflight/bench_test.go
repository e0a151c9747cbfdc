package preflight

import (
	"bytes"
	"context"
	"fmt"
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

// hugeArgsBody is a PreflightRequest of one step whose args hold keys
// object members of ~14 bytes each, about 1 MB for 70,000 keys: the body of
// the issue-21 attack.
func hugeArgsBody(keys int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"intent":{"summary":"s","plan_hash":"p"},"plan":{"steps":[{"id":"s1","kind":"tool.echo","zone":"default","args":{`)
	for i := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%07d":%d`, i, i%10)
	}
	b.WriteString(`}}]},"context":{"actor":{"id":"user:a","session_id":"s"}}}`)
	return b.Bytes()
}

// BenchmarkDecodeHugeArgs measures what a 1 MB args object costs to
// decode: refused past MaxArgsValues (70,000 keys) and accepted just
// within it.
func BenchmarkDecodeHugeArgs(b *testing.B) {
	for _, keys := range []int{70000, MaxArgsValues - 1} {
		body := hugeArgsBody(keys)
		b.Run(fmt.Sprintf("%d keys %d KB", keys, len(body)>>10), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				_, err := DecodeRequest(body)
				if (err != nil) != (keys > MaxArgsValues) {
					b.Fatal(err)
				}
			}
		})
	}
}
