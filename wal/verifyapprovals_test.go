package wal

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/contractrefine/autonomy/preflight"
)

// TestVerifyChecksApprovals: the approval records the gate reads to let a
// step that waits for a person run are checked against the binding record
// and the decision frames, so a record forged to approved, widened, moved
// to a later expiry, set back to pending or deleted does not pass for a
// verified log; an honest log with pending, approved and rejected steps
// does.
func TestVerifyChecksApprovals(t *testing.T) {
	ctx := context.Background()
	const pf = "pf_approval00000001"
	setup := func(t *testing.T) *DB {
		db := openTest(t, nil)
		b := testBinding(pf, "refund.create", "refund.create", "refund.create")
		for i := range b.Steps {
			b.Steps[i].Approval = &preflight.StepApproval{Authorities: []string{"role:approver"}, ExpiresAt: t0.Add(time.Hour)}
		}
		if _, err := db.RecordPreflight(ctx, PreflightRecord{Binding: b, Decision: json.RawMessage(`{}`), Time: t0,
			ActorRef: "user:envelope-actor"}); err != nil {
			t.Fatal(err)
		}
		for step, decision := range map[string]string{b.Steps[1].ID: DecisionApprove, b.Steps[2].ID: DecisionReject} {
			in := ApprovalInput{PreflightID: pf, StepID: step, ApprovalDecision: ApprovalDecision{Decision: decision,
				Approver: "alice", Roles: []string{"role:approver"}, Subject: "user:alice", Comment: "checked",
				DecidedAt: t0.Add(time.Minute)}}
			if _, err := db.DecideApproval(ctx, in); err != nil {
				t.Fatal(err)
			}
		}
		if rep, err := db.Verify(ctx); err != nil || !rep.OK() {
			t.Fatalf("honest log: %+v, %v", rep, err)
		}
		return db
	}
	steps := testBinding(pf, "a", "b", "c").Steps
	pending, approved, rejected := approvalKey(pf, steps[0].ID), approvalKey(pf, steps[1].ID), approvalKey(pf, steps[2].ID)
	edit := func(change func(a *Approval)) func(b *bolt.Bucket) error {
		return func(b *bolt.Bucket) error {
			k := pending
			var a Approval
			if err := json.Unmarshal(b.Get(k), &a); err != nil {
				return err
			}
			change(&a)
			v, _ := json.Marshal(&a)
			return b.Put(k, v)
		}
	}
	decided := func(k []byte, change func(d *ApprovalDecision)) func(b *bolt.Bucket) error {
		return func(b *bolt.Bucket) error {
			var a Approval
			if err := json.Unmarshal(b.Get(k), &a); err != nil {
				return err
			}
			change(a.Decided)
			v, _ := json.Marshal(&a)
			return b.Put(k, v)
		}
	}
	copyDecision := func(from []byte, state string) func(b *bolt.Bucket) error {
		return func(b *bolt.Bucket) error {
			var src, a Approval
			if err := json.Unmarshal(b.Get(from), &src); err != nil {
				return err
			}
			if err := json.Unmarshal(b.Get(pending), &a); err != nil {
				return err
			}
			a.State, a.Decided = state, src.Decided
			v, _ := json.Marshal(&a)
			return b.Put(pending, v)
		}
	}
	for name, tamper := range map[string]func(b *bolt.Bucket) error{
		"pending forged to approved, no frame": edit(func(a *Approval) {
			a.State, a.Decided = ApprovalApproved, &ApprovalDecision{Decision: DecisionApprove, Approver: "mallory", Seq: 1}
		}),
		"pending given another step's approval": copyDecision(approved, ApprovalApproved),
		"rejected turned approved": func(b *bolt.Bucket) error {
			v := bytes.Replace(b.Get(rejected), []byte(`"state":"rejected"`), []byte(`"state":"approved"`), 1)
			v = bytes.Replace(v, []byte(`"decision":"reject"`), []byte(`"decision":"approve"`), 1)
			return b.Put(rejected, v)
		},
		"approved set back to pending": func(b *bolt.Bucket) error {
			var a Approval
			if err := json.Unmarshal(b.Get(approved), &a); err != nil {
				return err
			}
			a.State, a.Decided = ApprovalPending, nil
			v, _ := json.Marshal(&a)
			return b.Put(approved, v)
		},
		"approved record deleted": func(b *bolt.Bucket) error { return b.Delete(approved) },
		"authorities widened":     edit(func(a *Approval) { a.Authorities = append(a.Authorities, "role:anyone") }),
		"expiry a year later":     edit(func(a *Approval) { a.ExpiresAt = a.ExpiresAt.AddDate(1, 0, 0) }),
		"other args":              edit(func(a *Approval) { a.ArgsDigest = "sha256:" + a.ArgsDigest[7:9] + a.ArgsDigest[9:] + "0" }),
		"unknown state":           edit(func(a *Approval) { a.State = "granted" }),
		// The envelope's actor may not approve its own step.
		"envelope actor removed":  edit(func(a *Approval) { a.ActorRef = "" }),
		"asked for later":         edit(func(a *Approval) { a.RequestedAt = a.RequestedAt.Add(time.Hour) }),
		"approval comment forged": decided(approved, func(d *ApprovalDecision) { d.Comment = "fine by me" }),
		"approver subject forged": decided(approved, func(d *ApprovalDecision) { d.Subject = "user:mallory" }),
		"decided at another time": decided(approved, func(d *ApprovalDecision) { d.DecidedAt = d.DecidedAt.Add(-time.Hour) }),
	} {
		t.Run(name, func(t *testing.T) {
			db := setup(t)
			if err := db.update(func(tx *bolt.Tx) error { return tamper(tx.Bucket(bucketApprovals)) }); err != nil {
				t.Fatal(err)
			}
			if rep, err := db.Verify(ctx); err != nil || rep.OK() {
				t.Fatalf("Verify = %+v, %v; want a failure", rep, err)
			}
		})
	}
}

// TestApprovalEditedWhileOpen: an approval record forged to approved while
// the service runs is not read as approved: the read fails, and nothing is
// decided from the log after it.
func TestApprovalEditedWhileOpen(t *testing.T) {
	ctx := context.Background()
	db := openTest(t, nil)
	b := testBinding("pf_approval00000002", "refund.create")
	b.Steps[0].Approval = &preflight.StepApproval{Authorities: []string{"role:approver"}, ExpiresAt: t0.Add(time.Hour)}
	if _, err := db.RecordPreflight(ctx, PreflightRecord{Binding: b, Decision: json.RawMessage(`{}`), Time: t0}); err != nil {
		t.Fatal(err)
	}
	if a, err := db.Approval(ctx, b.PreflightID, b.Steps[0].ID); err != nil || a.State != ApprovalPending {
		t.Fatalf("pending approval: %+v, %v", a, err)
	}
	k := approvalKey(b.PreflightID, b.Steps[0].ID)
	if err := db.update(func(tx *bolt.Tx) error {
		bucket := tx.Bucket(bucketApprovals)
		v := bytes.Replace(bucket.Get(k), []byte(`"state":"pending"`),
			[]byte(`"state":"approved","decided":{"decision":"approve","approver":"mallory","roles":["role:approver"],"decided_at":"2026-01-01T00:00:00Z","seq":1}`), 1)
		return bucket.Put(k, v)
	}); err != nil {
		t.Fatal(err)
	}
	if a, err := db.Approval(ctx, b.PreflightID, b.Steps[0].ID); err == nil {
		t.Fatalf("forged approval read as %+v, want an error", a)
	}
	if err := db.Trusted(); err == nil {
		t.Fatal("the log is still trusted after a forged approval was read")
	}
}
