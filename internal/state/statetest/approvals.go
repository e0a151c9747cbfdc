package statetest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// approvalTests are the approval cases of the suite (docs/API.md).
var approvalTests = map[string]func(*testing.T, Opener){
	"ApprovalRecordedPending":  approvalRecordedPending,
	"ApprovalDecideOnce":       approvalDecideOnce,
	"ApprovalExpired":          approvalExpired,
	"ApprovalListNewestFirst":  approvalListNewestFirst,
	"ApprovalSurvivesRestart":  approvalSurvivesRestart,
	"ConsumeSkipsHeldSteps":    consumeSkipsHeldSteps,
	"ApprovalOfUnknownOrPlain": approvalOfUnknownOrPlain,
}

// withApproval is newBinding whose step i waits for an approval by
// role:statetest until the given time.
func withApproval(b preflight.Binding, i int, until time.Time) preflight.Binding {
	b.Steps[i].Approval = &preflight.StepApproval{Authorities: []string{"role:statetest", "role:other"}, ExpiresAt: until}
	return b
}

func decide(s interface {
	DecideApproval(context.Context, wal.ApprovalInput) (wal.Approval, error)
}, b *preflight.Binding, step, decision string, at time.Time) (wal.Approval, error) {
	return s.DecideApproval(context.Background(), wal.ApprovalInput{PreflightID: b.PreflightID, StepID: step,
		ApprovalDecision: wal.ApprovalDecision{Decision: decision, Approver: "alice-token",
			Roles: []string{"role:statetest"}, Subject: "user:alice", Comment: "ok", DecidedAt: at}})
}

func approvalRecordedPending(t *testing.T, open Opener) {
	s, _ := open(t)
	until := time.Now().Add(30 * time.Minute).Round(0)
	b := withApproval(newBinding("customer.read", "refund.create"), 1, until)
	b.Tenant = "tenant:statetest"
	at := time.Now().Round(0)
	record(t, s, wal.PreflightRecord{Binding: b, Time: at, ActorRef: "user:for-whom"})
	got, err := s.Binding(context.Background(), b.PreflightID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Steps[0].Approval != nil || got.Steps[1].Approval == nil ||
		!slices.Equal(got.Steps[1].Approval.Authorities, b.Steps[1].Approval.Authorities) ||
		!got.Steps[1].Approval.ExpiresAt.Equal(until) {
		t.Fatalf("binding steps = %+v, want step s2 waiting for role:statetest until %v", got.Steps, until)
	}
	a, err := s.Approval(context.Background(), b.PreflightID, "s2")
	if err != nil {
		t.Fatal(err)
	}
	want := wal.Approval{PreflightID: b.PreflightID, StepID: "s2", AuditID: b.AuditID, Tenant: b.Tenant,
		ActorID: b.ActorID, ActorRef: "user:for-whom", ToolKind: "refund.create", ArgsDigest: b.Steps[1].ArgsDigest,
		Authorities: b.Steps[1].Approval.Authorities, State: wal.ApprovalPending}
	if a.PreflightID != want.PreflightID || a.StepID != want.StepID || a.AuditID != want.AuditID ||
		a.Tenant != want.Tenant || a.ActorID != want.ActorID || a.ActorRef != want.ActorRef || a.ToolKind != want.ToolKind ||
		a.ArgsDigest != want.ArgsDigest || !slices.Equal(a.Authorities, want.Authorities) ||
		a.State != want.State || a.Decided != nil || !a.ExpiresAt.Equal(until) || !a.RequestedAt.Equal(at) {
		t.Fatalf("Approval = %+v\nwant %+v (expires %v, requested %v)", a, want, until, at)
	}
}

func approvalOfUnknownOrPlain(t *testing.T, open Opener) {
	s, _ := open(t)
	b := withApproval(newBinding("customer.read", "refund.create"), 1, time.Now().Add(time.Hour))
	record(t, s, wal.PreflightRecord{Binding: b})
	for _, c := range [][2]string{{b.PreflightID, "s1"}, {b.PreflightID, "s9"}, {"pf_statetest_never_recorded", "s1"}} {
		if _, err := s.Approval(context.Background(), c[0], c[1]); !errors.Is(err, wal.ErrNotFound) {
			t.Errorf("Approval(%s, %s): %v, want wal.ErrNotFound", c[0], c[1], err)
		}
		if _, err := decide(s, &b, c[1], wal.DecisionApprove, time.Now()); c[0] == b.PreflightID && !errors.Is(err, wal.ErrNotFound) {
			t.Errorf("DecideApproval(%s, %s): %v, want wal.ErrNotFound", c[0], c[1], err)
		}
	}
}

// approvalDecideOnce: many decisions at once, approve and reject mixed:
// exactly one is recorded, and every other one sees it.
func approvalDecideOnce(t *testing.T, open Opener) {
	s, _ := open(t)
	const n = 16
	b := withApproval(newBinding("refund.create"), 0, time.Now().Add(time.Hour))
	record(t, s, wal.PreflightRecord{Binding: b})
	var wg sync.WaitGroup
	errs := make([]error, n)
	got := make([]wal.Approval, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			d := wal.DecisionApprove
			if i%2 == 1 {
				d = wal.DecisionReject
			}
			got[i], errs[i] = decide(s, &b, "s1", d, time.Now())
		})
	}
	close(start)
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won < 0:
			won = i
		case err == nil:
			t.Fatalf("decisions %d and %d both recorded", won, i)
		case !errors.Is(err, wal.ErrApprovalDecided):
			t.Fatalf("decision %d: %v, want nil or wal.ErrApprovalDecided", i, err)
		}
	}
	if won < 0 {
		t.Fatal("no decision recorded")
	}
	w := got[won]
	if w.Decided == nil || w.Decided.Seq == 0 || w.Decided.Approver != "alice-token" || w.Decided.Comment != "ok" ||
		!slices.Equal(w.Decided.Roles, []string{"role:statetest"}) {
		t.Fatalf("recorded decision %+v", w.Decided)
	}
	for i, a := range got {
		if i != won && a.State != w.State {
			t.Errorf("decision %d saw state %q, the recorded one is %q", i, a.State, w.State)
		}
	}
	read, err := s.Approval(context.Background(), b.PreflightID, "s1")
	if err != nil || read.State != w.State || read.Decided == nil || read.Decided.Seq != w.Decided.Seq {
		t.Fatalf("Approval after the decision = %+v, %v; want state %s", read, err, w.State)
	}
}

func approvalExpired(t *testing.T, open Opener) {
	s, _ := open(t)
	until := time.Now().Add(time.Minute).Round(0)
	b := withApproval(newBinding("refund.create"), 0, until)
	record(t, s, wal.PreflightRecord{Binding: b})
	if _, err := decide(s, &b, "s1", wal.DecisionApprove, until); !errors.Is(err, wal.ErrApprovalExpired) {
		t.Fatalf("a decision at the expiry: %v, want wal.ErrApprovalExpired", err)
	}
	a, err := s.Approval(context.Background(), b.PreflightID, "s1")
	if err != nil || a.State != wal.ApprovalPending || a.StateAt(until) != wal.ApprovalExpired {
		t.Fatalf("after a late decision: %+v, %v; want it still pending, listed expired", a, err)
	}
	if _, err := decide(s, &b, "s1", wal.DecisionReject, until.Add(-time.Nanosecond)); err != nil {
		t.Fatalf("a decision just before the expiry: %v", err)
	}
}

func approvalListNewestFirst(t *testing.T, open Opener) {
	s, _ := open(t)
	var ids []string
	for range 5 {
		b := withApproval(newBinding("refund.create"), 0, time.Now().Add(time.Hour))
		record(t, s, wal.PreflightRecord{Binding: b})
		ids = append(ids, b.PreflightID)
	}
	plain := newBinding("refund.create")
	record(t, s, wal.PreflightRecord{Binding: plain})
	skip := ids[2]
	q := wal.ApprovalQuery{Limit: 2, Match: func(a *wal.Approval) bool { return a.PreflightID != skip }}
	var listed []string
	for page := 0; ; page++ {
		got, next, err := s.ListApprovals(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range got {
			listed = append(listed, a.PreflightID)
		}
		if next == "" {
			break
		}
		if page > 5 {
			t.Fatal("the cursor never ends")
		}
		q.After = next
	}
	want := []string{ids[4], ids[3], ids[1], ids[0]}
	if !slices.Equal(listed, want) {
		t.Fatalf("listed %v, want %v", listed, want)
	}
}

func approvalSurvivesRestart(t *testing.T, open Opener) {
	s, restart := open(t)
	b := withApproval(newBinding("refund.create", "email.send"), 0, time.Now().Add(time.Hour))
	b = withApproval(b, 1, time.Now().Add(time.Hour))
	record(t, s, wal.PreflightRecord{Binding: b})
	if _, err := decide(s, &b, "s1", wal.DecisionApprove, time.Now()); err != nil {
		t.Fatal(err)
	}
	s = restart()
	a1, err1 := s.Approval(context.Background(), b.PreflightID, "s1")
	a2, err2 := s.Approval(context.Background(), b.PreflightID, "s2")
	if err1 != nil || err2 != nil || a1.State != wal.ApprovalApproved || a2.State != wal.ApprovalPending {
		t.Fatalf("after restart: s1 %q (%v), s2 %q (%v); want approved and pending", a1.State, err1, a2.State, err2)
	}
	if _, err := decide(s, &b, "s1", wal.DecisionReject, time.Now()); !errors.Is(err, wal.ErrApprovalDecided) {
		t.Fatalf("a second decision after restart: %v, want wal.ErrApprovalDecided", err)
	}
}

// consumeSkipsHeldSteps: a step held for its approval is not consumed, the
// same step of the kind without the hold is.
func consumeSkipsHeldSteps(t *testing.T, open Opener) {
	s, _ := open(t)
	b := newBinding("refund.create", "refund.create")
	b.Steps[1].ArgsDigest = b.Steps[0].ArgsDigest
	record(t, s, wal.PreflightRecord{Binding: b})
	r := wal.ConsumeRequest{Binding: &b, Kind: "refund.create", RequestID: "req-held", Time: time.Now(),
		Held: []bool{true, false}}
	res, err := s.Consume(context.Background(), r)
	if err != nil || res.Status != wal.Consumed || res.StepID != "s2" {
		t.Fatalf("consume with s1 held = %+v, %v; want s2 consumed", res, err)
	}
	r.RequestID, r.Held = "req-held-2", []bool{true, false}
	res, err = s.Consume(context.Background(), r)
	if err != nil || res.Status != wal.Replay {
		t.Fatalf("second consume with s1 held = %+v, %v; want replay", res, err)
	}
	r.Held = nil
	if res := consume(t, s, &b, "refund.create", "req-free", ""); res.Status != wal.Consumed || res.StepID != "s1" {
		t.Fatalf("consume without the hold = %+v; want s1 consumed", res)
	}

}
