package wal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// ExampleDB_Consume records a one-step preflight and consumes its step
// twice: the first request gets the step, a second request is a replay.
func ExampleDB_Consume() {
	dir, _ := os.MkdirTemp("", "wal-example-")
	defer os.RemoveAll(dir)
	db, err := wal.Open(dir, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()

	ctx := context.Background()
	at := time.Date(2026, 6, 23, 14, 29, 0, 0, time.UTC)
	b := preflight.Binding{PreflightID: "pf_example000000001", AuditID: "au_example000000001",
		Outcome: preflight.OutcomePass, ActorID: "user:example", ExpiresAt: at.Add(5 * time.Minute),
		Steps: []preflight.BoundStep{{ID: "s1", Kind: "tool.shell", ArgsDigest: "sha256:…"}}}
	if _, err := db.RecordPreflight(ctx, wal.PreflightRecord{Binding: b,
		Decision: json.RawMessage(`{"outcome":"pass"}`), Time: at}); err != nil {
		fmt.Println(err)
		return
	}
	for _, requestID := range []string{"req-1", "req-2"} {
		res, err := db.Consume(ctx, wal.ConsumeRequest{Binding: &b, Kind: "tool.shell", RequestID: requestID, Time: at})
		if err != nil {
			fmt.Println(err)
			return
		}
		if res.StepID != "" {
			fmt.Println(requestID, res.Status, "step", res.StepID)
		} else {
			fmt.Println(requestID, res.Status)
		}
	}
	rep, _ := db.Verify(ctx)
	fmt.Println("frames", rep.Frames, "chain ok", rep.OK())
	// Output:
	// req-1 consumed step s1
	// req-2 replay
	// frames 2 chain ok true
}
