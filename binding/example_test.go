package binding_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/internal/bundle"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// ExampleGate_Check runs the gate in enforce mode over a real WAL and the
// embedded default bundle: a preflighted call is allowed once, its replay
// and a call without a preflight are denied.
func ExampleGate_Check() {
	dir, _ := os.MkdirTemp("", "gate-example-")
	defer os.RemoveAll(dir)
	db, err := wal.Open(dir, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	ctx := context.Background()
	policy, err := bundle.Load(ctx, "", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	now := time.Date(2026, 6, 23, 14, 29, 0, 0, time.UTC)

	// A passing preflight that binds one tool.shell step.
	b := preflight.Binding{PreflightID: "pf_example000000002", AuditID: "au_example000000002",
		Outcome: preflight.OutcomePass, ActorID: "user:example", ExpiresAt: now.Add(5 * time.Minute),
		Steps: []preflight.BoundStep{{ID: "s1", Kind: "tool.shell", ArgsDigest: "sha256:…"}}}
	if _, err := db.RecordPreflight(ctx, wal.PreflightRecord{Binding: b,
		Decision: json.RawMessage(`{"outcome":"pass"}`), Time: now}); err != nil {
		fmt.Println(err)
		return
	}

	gate := binding.New(binding.Options{Store: db, Log: db, Mode: binding.ModeEnforce,
		Policy: func() binding.Policy { return policy }, Now: func() time.Time { return now },
		NewID: func() string { return "au_fresh0000000000001" }})
	call := func(preflightID, requestID string) {
		headers := map[string]string{binding.HeaderRequestID: requestID}
		if preflightID != "" {
			headers[binding.HeaderPreflightID] = preflightID
		}
		d := gate.Check(ctx, &binding.Request{Method: "POST", Path: "/v1/tool", Headers: headers,
			Body: []byte(`{"kind":"tool.shell","args":{"cmd":"uptime"}}`)})
		fmt.Println(requestID, d.Status, d.Reason)
	}
	call(b.PreflightID, "req-1")
	call(b.PreflightID, "req-2")
	call("", "req-3")
	// Output:
	// req-1 200 contract: passed
	// req-2 403 contract: preflight_replay
	// req-3 403 contract: preflight_required
}
