package preflight_test

import (
	"context"
	"fmt"
	"time"

	"github.com/contractrefine/autonomy/preflight"
)

func ExampleDefaultVerifier_Evaluate() {
	req, rerr := preflight.DecodeRequest([]byte(`{
	  "intent": {"summary": "Say hello", "plan_hash": "hello-v1"},
	  "plan": {"steps": [{"id": "s1", "kind": "tool.echo", "args": {"text": "hello"}}]},
	  "context": {"actor": {"id": "user:example", "session_id": "session:001"}}}`))
	if rerr != nil {
		fmt.Println(rerr)
		return
	}
	gov := &preflight.Governance{Capabilities: map[string]preflight.Capability{
		"tool.echo": {Zones: []string{"*"}},
	}}
	v := preflight.NewVerifier(preflight.Options{
		Now: func() time.Time { return time.Date(2026, 6, 23, 14, 29, 0, 0, time.UTC) },
	})
	d, err := v.Evaluate(context.Background(), preflight.Input{Request: req, Governance: gov, Attempt: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(d.Outcome, d.Reason, d.Eligibility.BoundToolKinds, d.Eligibility.ExpiresAt)
	// Output: pass contract: passed [tool.echo] 2026-06-23T14:34:00Z
}

func ExampleDecodeRequest() {
	_, err := preflight.DecodeRequest([]byte(`{"intent": {"summary": "x"}, "plan": {"steps": [{"id": 7}]}}`))
	fmt.Println(err.Path, err.Message)
	// Output: /plan/steps/0/id must be a string, got a number
}
