package httpapi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/preflight/submit"
	"github.com/contractrefine/autonomy/wal"
)

// TestFrameAttrsGolden records every kind of frame the service writes
// (preflights through the API, with and without an envelope; a consume, a
// replay and an unbound call through the real gate; a decided approval)
// with the injected clock and ids, and compares each frame's kind, attrs
// and hash with testdata/frames (go test -run FrameAttrsGolden -update
// rewrites them). The files hold what the service wrote before the attrs
// had types: the same bytes and hashes, so a log written by an older binary
// and one written by this one cannot be told apart.
func TestFrameAttrsGolden(t *testing.T) {
	for _, raw := range []bool{false, true} {
		name := "frames"
		if raw {
			name = "frames_raw"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, func(o *submit.Options) { o.StoreRawRequests = raw })
			echo := mustDecision(t, f.post(readRequest(t, "echo_pass")))
			mustDecision(t, f.post(readRequest(t, "refund_pass")))
			b, err := loadBundle()
			if err != nil {
				t.Fatal(err)
			}
			gate := binding.New(binding.Options{Store: f.db, Log: f.db, Policy: func() binding.Policy { return b },
				Mode: binding.ModeEnforce, Now: f.clock.Now, StoreRawRequests: raw, ActorHeader: "x-actor",
				NewID: func() string { return "au_test_unbound_0001" }})
			body := []byte(`{"kind":"tool.echo","args":{"text":"raw-arg-value-7f3a","n":2.5}}`)
			check := func(headers map[string]string, want int) {
				t.Helper()
				d := gate.Check(context.Background(), &binding.Request{Method: "POST", Path: "/v1/tool?q=1", Headers: headers, Body: body})
				if d.Status != want {
					t.Fatalf("check %v: %d %s, want %d", headers, d.Status, d.Reason, want)
				}
			}
			check(map[string]string{binding.HeaderPreflightID: echo.PreflightID, binding.HeaderRequestID: "req-golden-1", "x-actor": "user:example"}, http.StatusOK)
			check(map[string]string{binding.HeaderPreflightID: echo.PreflightID, binding.HeaderRequestID: "req-golden-2"}, http.StatusForbidden)
			check(map[string]string{binding.HeaderRequestID: "req-golden-3"}, http.StatusOK)
			// An advisory gate lets a replay through and records why.
			advisory := binding.New(binding.Options{Store: f.db, Log: f.db, Policy: func() binding.Policy { return b },
				Mode: binding.ModeAdvisory, Now: f.clock.Now})
			if d := advisory.Check(context.Background(), &binding.Request{Method: "POST", Path: "/v1/tool",
				Headers: map[string]string{binding.HeaderPreflightID: echo.PreflightID, binding.HeaderRequestID: "req-golden-4"}, Body: body}); d.Status != http.StatusOK || d.AdvisoryReason == "" {
				t.Fatalf("advisory replay: %+v", d)
			}

			// A preflight with a tenant, an output bound and a step that
			// waits for an approval, recorded directly, and its approval
			// decided.
			at := f.clock.Now()
			pf := preflight.Binding{PreflightID: "pf_test_approval_01", AuditID: "au_test_approval_01", Outcome: preflight.OutcomePass,
				ActorID: "user:example", Tenant: "tenant:demo", ExpiresAt: at.Add(5 * time.Minute),
				Steps: []preflight.BoundStep{
					{ID: "s1", Kind: "tool.echo", ArgsDigest: "sha256:0000000000000000000000000000000000000000000000000000000000000001"},
					{ID: "s2", Kind: "refund.create", ArgsDigest: "sha256:0000000000000000000000000000000000000000000000000000000000000002",
						Approval: &preflight.StepApproval{Authorities: []string{"finance", "ops"}, ExpiresAt: at.Add(2 * time.Minute)}},
				}}
			if _, err := f.db.RecordPreflight(context.Background(), wal.PreflightRecord{Binding: pf,
				Decision: []byte(`{"outcome":"pass"}`), Time: at, OutputMaxBytes: new(int64(4096))}); err != nil {
				t.Fatal(err)
			}
			for _, in := range []wal.ApprovalInput{
				{PreflightID: pf.PreflightID, StepID: "s2", ApprovalDecision: wal.ApprovalDecision{Decision: wal.DecisionApprove,
					Approver: "alice", Roles: []string{"finance"}, Subject: "alice@example.com", Comment: "ok <&>", DecidedAt: at.Add(time.Second)},
					Replica: "replica-a"},
			} {
				if _, err := f.db.DecideApproval(context.Background(), in); err != nil {
					t.Fatal(err)
				}
			}

			var got bytes.Buffer
			err = f.db.View(func(tx *wal.Tx) error {
				for seq := uint64(1); ; seq++ {
					fr, err := tx.Frame(seq)
					if errors.Is(err, wal.ErrNotFound) {
						return nil
					}
					if err != nil {
						return err
					}
					fmt.Fprintf(&got, "%d %s %s\n%s\n", fr.Seq, fr.Kind, fr.Hash, fr.Attrs)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "frames", name+".txt")
			if *update {
				if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/httpapi -run FrameAttrsGolden -update)", err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Fatalf("frames differ from %s:\n%s\nwant\n%s", golden, got.Bytes(), want)
			}
		})
	}
}
