// Package statetest is the conformance suite of state.Store: every
// implementation runs it from its own tests, and is done when it passes.
//
//	func TestConformance(t *testing.T) {
//		statetest.Run(t, func(t *testing.T) (state.Store, func() state.Store) { ... })
//	}
package statetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/internal/state"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// Opener returns a fresh, empty store for one test, and restart, which
// closes that store and opens the same storage again as a restarted process
// would (restart may be called more than once; each call closes the store
// the previous one returned). The opener registers the final close with
// t.Cleanup.
type Opener func(t *testing.T) (s state.Store, restart func() state.Store)

// Run runs the suite against the stores open returns.
func Run(t *testing.T, open Opener) {
	tests := map[string]func(*testing.T, Opener){
		"NotFound":                notFound,
		"RecordRoundTrip":         recordRoundTrip,
		"ConsumeOnceConcurrent":   consumeOnceConcurrent,
		"ConsumeSteps":            consumeSteps,
		"RetrySameRequestID":      retrySameRequestID,
		"MismatchAndGone":         mismatchAndGone,
		"PeekWritesNothing":       peekWritesNothing,
		"DecisionFrameEveryCase":  decisionFrameEveryCase,
		"SurvivesRestart":         survivesRestart,
		"IdempotencyClaims":       idempotencyClaims,
		"IdempotencyClaimRace":    idempotencyClaimRace,
		"IdempotencyRecord":       idempotencyRecord,
		"SessionCounters":         sessionCounters,
		"SessionAttemptConflict":  sessionAttemptConflict,
		"SessionLockSerialises":   sessionLockSerialises,
		"SessionConcurrentCounts": sessionConcurrentCounts,
	}
	for name, fn := range approvalTests {
		tests[name] = fn
	}
	for name, fn := range tests {
		t.Run(name, func(t *testing.T) { fn(t, open) })
	}
}

var seq atomic.Uint64

// newBinding is a pass binding with one step per kind given, each with its
// own args digest, expiring in an hour, at a time with nanoseconds and not
// in UTC (the store must give it back in UTC, to the nanosecond).
func newBinding(kinds ...string) preflight.Binding {
	n := seq.Add(1)
	zone := time.FixedZone("UTC+2", 2*3600)
	b := preflight.Binding{
		PreflightID: fmt.Sprintf("pf_statetest_%012d", n),
		AuditID:     fmt.Sprintf("au_statetest_%012d", n),
		Outcome:     preflight.OutcomePass,
		ActorID:     "user:statetest",
		ExpiresAt:   time.Now().Add(time.Hour).Round(0).In(zone),
	}
	for i, k := range kinds {
		b.Steps = append(b.Steps, preflight.BoundStep{ID: fmt.Sprintf("s%d", i+1), Kind: k, ArgsDigest: digest(i)})
	}
	return b
}

// digest is a well-formed args digest, different for every i.
func digest(i int) string { return fmt.Sprintf("sha256:%064x", i+1) }

func decisionOf(b *preflight.Binding) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"audit_id":%q,"outcome":%q,"preflight_id":%q}`, b.AuditID, b.Outcome, b.PreflightID))
}

func record(t *testing.T, s state.Store, rec wal.PreflightRecord) {
	t.Helper()
	if rec.Decision == nil {
		rec.Decision = decisionOf(&rec.Binding)
	}
	if rec.Time.IsZero() {
		rec.Time = time.Now()
	}
	if _, err := s.RecordPreflight(context.Background(), rec); err != nil {
		t.Fatalf("RecordPreflight(%s): %v", rec.Binding.PreflightID, err)
	}
}

func consume(t *testing.T, s state.Store, b *preflight.Binding, kind, requestID, call string) wal.ConsumeResult {
	t.Helper()
	res, err := s.Consume(context.Background(), wal.ConsumeRequest{Binding: b, Kind: kind,
		RequestID: requestID, CallDigest: call, Time: time.Now()})
	if err != nil {
		t.Fatalf("Consume(%s, %s, %q): %v", b.PreflightID, kind, requestID, err)
	}
	return res
}

func wantStatus(t *testing.T, what string, got wal.ConsumeResult, want wal.ConsumeStatus) {
	t.Helper()
	if got.Status != want {
		t.Fatalf("%s: status %v, want %v", what, got.Status, want)
	}
}

func notFound(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := context.Background()
	if _, err := s.Binding(ctx, "pf_statetest_never_recorded"); !errors.Is(err, wal.ErrNotFound) {
		t.Errorf("Binding of an unknown id: %v, want wal.ErrNotFound", err)
	}
	if _, err := s.Decision(ctx, "pf_statetest_never_recorded"); !errors.Is(err, wal.ErrNotFound) {
		t.Errorf("Decision of an unknown id: %v, want wal.ErrNotFound", err)
	}
	if _, err := s.Idempotency(ctx, "never-claimed"); !errors.Is(err, wal.ErrNotFound) {
		t.Errorf("Idempotency of an unknown key: %v, want wal.ErrNotFound", err)
	}
	if sess, err := s.Session(ctx, "never-counted"); err != nil || sess != (wal.Session{}) {
		t.Errorf("Session of an unknown key = %+v, %v; want the zero Session", sess, err)
	}
	if found, passed, err := s.ChainStatus(ctx, "au_statetest_never_recorded", ""); err != nil || found || passed {
		t.Errorf("ChainStatus of an unknown audit id = %v, %v, %v; want false, false, nil", found, passed, err)
	}
}

func recordRoundTrip(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := context.Background()
	b := newBinding("refund.create", "email.send")
	b.Tenant = "tenant:statetest"
	// Bytes no encoder would write this way: the store keeps them as given.
	dec := json.RawMessage(`{"outcome":"pass","preflight_id":"` + b.PreflightID + `","z":"\u00e9"}`)
	record(t, s, wal.PreflightRecord{Binding: b, Decision: dec})
	got, err := s.Binding(ctx, b.PreflightID)
	if err != nil {
		t.Fatalf("Binding: %v", err)
	}
	if !got.ExpiresAt.Equal(b.ExpiresAt) || got.ExpiresAt.Location() != time.UTC ||
		got.ExpiresAt.Nanosecond() != b.ExpiresAt.Nanosecond() {
		t.Errorf("expires_at = %v, want %v in UTC to the nanosecond", got.ExpiresAt, b.ExpiresAt.UTC())
	}
	got.ExpiresAt = b.ExpiresAt
	if fmt.Sprint(got) != fmt.Sprint(b) {
		t.Errorf("Binding =\n%+v\nwant\n%+v", got, b)
	}
	raw, err := s.Decision(ctx, b.PreflightID)
	if err != nil || string(raw) != string(dec) {
		t.Errorf("Decision = %s, %v; want %s", raw, err, dec)
	}
	if found, passed, err := s.ChainStatus(ctx, b.AuditID, b.Tenant); err != nil || !found || !passed {
		t.Errorf("ChainStatus of a pass = %v, %v, %v; want true, true, nil", found, passed, err)
	}
	// Another tenant, or none, does not find it.
	for _, other := range []string{"tenant:other", ""} {
		if found, passed, err := s.ChainStatus(ctx, b.AuditID, other); err != nil || found || passed {
			t.Errorf("ChainStatus of tenant %q's pass for tenant %q = %v, %v, %v; want false, false, nil", b.Tenant, other, found, passed, err)
		}
	}
	deny := newBinding("refund.create")
	deny.Outcome = preflight.OutcomeDeny
	record(t, s, wal.PreflightRecord{Binding: deny})
	if found, passed, err := s.ChainStatus(ctx, deny.AuditID, deny.Tenant); err != nil || !found || passed {
		t.Errorf("ChainStatus of a deny = %v, %v, %v; want true, false, nil", found, passed, err)
	}
}

// consumeOnceConcurrent: many consumes of a one-step binding at once, each
// with its own request id, give exactly one Consumed; every other one sees
// the step spent. Repeated over several bindings, so a race has chances.
func consumeOnceConcurrent(t *testing.T, open Opener) {
	s, _ := open(t)
	const rounds, n = 8, 32
	for round := range rounds {
		b := newBinding("refund.create")
		record(t, s, wal.PreflightRecord{Binding: b})
		var wg sync.WaitGroup
		results := make([]wal.ConsumeResult, n)
		errs := make([]error, n)
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				results[i], errs[i] = s.Consume(context.Background(), wal.ConsumeRequest{Binding: &b,
					Kind: "refund.create", RequestID: fmt.Sprintf("req-%d-%d", round, i),
					CallDigest: digest(0), Time: time.Now()})
			})
		}
		close(start)
		wg.Wait()
		consumed := 0
		for i, r := range results {
			if errs[i] != nil {
				t.Fatalf("round %d: consume %d: %v", round, i, errs[i])
			}
			switch r.Status {
			case wal.Consumed:
				consumed++
				if r.StepID != "s1" || r.StepIndex != 0 {
					t.Errorf("round %d: consumed step %q (%d), want s1 (0)", round, r.StepID, r.StepIndex)
				}
			case wal.Replay:
			default:
				t.Errorf("round %d: consume %d: status %v", round, i, r.Status)
			}
		}
		if consumed != 1 {
			t.Fatalf("round %d: %d of %d concurrent consumes of one step succeeded, want exactly 1", round, consumed, n)
		}
	}
}

// consumeSteps: a binding with two steps of one kind and one of another
// is consumed step by step, in plan order, then refuses.
func consumeSteps(t *testing.T, open Opener) {
	s, _ := open(t)
	b := newBinding("refund.create", "email.send", "refund.create")
	b.Steps[2].ArgsDigest = b.Steps[0].ArgsDigest
	r1 := consume(t, s, &b, "refund.create", "r1", digest(0))
	wantStatus(t, "first refund", r1, wal.Gone)
	record(t, s, wal.PreflightRecord{Binding: b})
	r1 = consume(t, s, &b, "refund.create", "r1", digest(0))
	wantStatus(t, "first refund", r1, wal.Consumed)
	r2 := consume(t, s, &b, "refund.create", "r2", digest(0))
	wantStatus(t, "second refund", r2, wal.Consumed)
	if r1.StepIndex != 0 || r2.StepIndex != 2 || r2.StepID != "s3" {
		t.Errorf("refunds consumed steps %d and %d (%s), want 0 and 2 (s3)", r1.StepIndex, r2.StepIndex, r2.StepID)
	}
	r3 := consume(t, s, &b, "refund.create", "r3", digest(0))
	wantStatus(t, "third refund", r3, wal.Replay)
	// A replay names the markers it read, so a caller may remember them.
	if want := []wal.SpentStep{{Index: 0, RequestID: "r1"}, {Index: 2, RequestID: "r2"}}; !reflect.DeepEqual(r3.Spent, want) {
		t.Errorf("third refund's replay names spent steps %+v, want %+v", r3.Spent, want)
	}
	e := consume(t, s, &b, "email.send", "r4", digest(1))
	wantStatus(t, "email", e, wal.Consumed)
	if e.StepID != "s2" || e.StepIndex != 1 {
		t.Errorf("email consumed %s (%d), want s2 (1)", e.StepID, e.StepIndex)
	}
	wantStatus(t, "second email", consume(t, s, &b, "email.send", "r5", digest(1)), wal.Replay)
}

// retrySameRequestID is Envoy's rule: the same x-request-id with the same
// call repeats the allow, on the step it consumed; another call under that
// id (another call digest, or one where the marker has none), or another
// id, is a replay; no request id never repeats.
func retrySameRequestID(t *testing.T, open Opener) {
	s, _ := open(t)
	b := newBinding("refund.create")
	record(t, s, wal.PreflightRecord{Binding: b})
	wantStatus(t, "first", consume(t, s, &b, "refund.create", "req-1", "sha256:call-a"), wal.Consumed)
	again := consume(t, s, &b, "refund.create", "req-1", "sha256:call-a")
	wantStatus(t, "same request id and call", again, wal.Repeated)
	if again.StepID != "s1" || again.StepIndex != 0 {
		t.Errorf("repeat names step %q (%d), want s1 (0)", again.StepID, again.StepIndex)
	}
	wantStatus(t, "same request id, other call", consume(t, s, &b, "refund.create", "req-1", "sha256:call-b"), wal.Replay)
	wantStatus(t, "other request id", consume(t, s, &b, "refund.create", "req-2", "sha256:call-a"), wal.Replay)

	anon := newBinding("refund.create")
	record(t, s, wal.PreflightRecord{Binding: anon})
	wantStatus(t, "no request id", consume(t, s, &anon, "refund.create", "", "sha256:call-a"), wal.Consumed)
	wantStatus(t, "no request id again", consume(t, s, &anon, "refund.create", "", "sha256:call-a"), wal.Replay)

	// A marker of a consume that named no call digest repeats only for
	// another consume without one: a digest is another call.
	undigested := newBinding("refund.create")
	record(t, s, wal.PreflightRecord{Binding: undigested})
	wantStatus(t, "no digest", consume(t, s, &undigested, "refund.create", "req-u", ""), wal.Consumed)
	wantStatus(t, "no digest again", consume(t, s, &undigested, "refund.create", "req-u", ""), wal.Repeated)
	wantStatus(t, "a digest after none", consume(t, s, &undigested, "refund.create", "req-u", "sha256:call-a"), wal.Replay)

	// Concurrent retries of one request: all allowed, one step spent.
	many := newBinding("refund.create")
	record(t, s, wal.PreflightRecord{Binding: many})
	var wg sync.WaitGroup
	var consumed, repeated, other atomic.Int32
	for range 16 {
		wg.Go(func() {
			res, err := s.Consume(context.Background(), wal.ConsumeRequest{Binding: &many, Kind: "refund.create",
				RequestID: "req-retry", CallDigest: "sha256:call-a", Time: time.Now()})
			switch {
			case err != nil:
				other.Add(1)
			case res.Status == wal.Consumed:
				consumed.Add(1)
			case res.Status == wal.Repeated:
				repeated.Add(1)
			default:
				other.Add(1)
			}
		})
	}
	wg.Wait()
	if consumed.Load() != 1 || repeated.Load() != 15 || other.Load() != 0 {
		t.Errorf("16 concurrent retries: %d consumed, %d repeated, %d other; want 1, 15, 0",
			consumed.Load(), repeated.Load(), other.Load())
	}
}

func mismatchAndGone(t *testing.T, open Opener) {
	s, _ := open(t)
	b := newBinding("refund.create")
	record(t, s, wal.PreflightRecord{Binding: b})
	ctx := context.Background()
	for name, r := range map[string]wal.ConsumeRequest{
		"kind not bound": {Binding: &b, Kind: "email.send", RequestID: "m1"},
		"other args":     {Binding: &b, Kind: "refund.create", ArgsDigest: digest(7), RequestID: "m2"},
	} {
		res, err := s.Consume(ctx, r)
		if err != nil || res.Status != wal.Mismatch || res.StepIndex != -1 {
			t.Errorf("%s: %+v, %v; want Mismatch at step -1", name, res, err)
		}
	}
	bound := consume(t, s, &b, "refund.create", "m3", digest(0))
	wantStatus(t, "the bound args after mismatches", bound, wal.Consumed)
	ghost := newBinding("refund.create")
	res, err := s.Consume(ctx, wal.ConsumeRequest{Binding: &ghost, Kind: "refund.create", RequestID: "g1"})
	if err != nil || res.Status != wal.Gone || res.StepIndex != -1 {
		t.Errorf("unrecorded binding: %+v, %v; want Gone at step -1", res, err)
	}
	if p, err := s.Peek(ctx, wal.ConsumeRequest{Binding: &ghost, Kind: "refund.create"}); err != nil || p.Status != wal.Gone {
		t.Errorf("Peek of an unrecorded binding: %+v, %v; want Gone", p, err)
	}
}

func peekWritesNothing(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := context.Background()
	b := newBinding("refund.create")
	record(t, s, wal.PreflightRecord{Binding: b})
	r := wal.ConsumeRequest{Binding: &b, Kind: "refund.create", RequestID: "p1", CallDigest: "sha256:x"}
	for range 3 {
		if res, err := s.Peek(ctx, r); err != nil || res.Status != wal.Consumed || res.StepID != "s1" {
			t.Fatalf("Peek of a free step: %+v, %v; want Consumed s1", res, err)
		}
	}
	wantStatus(t, "consume after peeks", consume(t, s, &b, "refund.create", "p1", "sha256:x"), wal.Consumed)
	if res, err := s.Peek(ctx, r); err != nil || res.Status != wal.Repeated {
		t.Errorf("Peek under the consuming request id: %+v, %v; want Repeated", res, err)
	}
	r.RequestID = "p2"
	if res, err := s.Peek(ctx, r); err != nil || res.Status != wal.Replay {
		t.Errorf("Peek under another request id: %+v, %v; want Replay", res, err)
	}
}

// decisionFrameEveryCase: the decision frame is asked for with the result
// the consume returns, whatever it is.
func decisionFrameEveryCase(t *testing.T, open Opener) {
	s, _ := open(t)
	b := newBinding("refund.create")
	record(t, s, wal.PreflightRecord{Binding: b})
	for i, want := range []wal.ConsumeStatus{wal.Consumed, wal.Replay} {
		var mu sync.Mutex
		var seen []wal.ConsumeStatus
		res, err := s.Consume(context.Background(), wal.ConsumeRequest{Binding: &b, Kind: "refund.create",
			RequestID: fmt.Sprintf("d%d", i), Time: time.Now(),
			Decision: func(r wal.ConsumeResult) wal.FrameInput {
				mu.Lock()
				seen = append(seen, r.Status)
				mu.Unlock()
				return wal.FrameInput{Kind: wal.KindDecision, AuditID: b.AuditID, Time: time.Now(),
					Attrs: &wal.DecisionAttrs{Outcome: r.Status.String()}}
			}})
		if err != nil || res.Status != want {
			t.Fatalf("consume %d: %+v, %v; want %v", i, res, err, want)
		}
		mu.Lock()
		if len(seen) == 0 || seen[len(seen)-1] != want {
			t.Errorf("consume %d: decision frame built for %v, want the result %v last", i, seen, want)
		}
		mu.Unlock()
	}
}

func survivesRestart(t *testing.T, open Opener) {
	s, restart := open(t)
	ctx := context.Background()
	b := newBinding("refund.create", "refund.create")
	rec := wal.PreflightRecord{Binding: b, SessionKey: `["user:statetest","sess-restart","sha256:plan"]`,
		Idempotency: &wal.IdempotencyRecord{Key: "restart-key", RequestDigest: "sha256:req", PreflightID: b.PreflightID}}
	record(t, s, rec)
	wantStatus(t, "before restart", consume(t, s, &b, "refund.create", "req-a", "sha256:a"), wal.Consumed)
	s = restart()
	got, err := s.Binding(ctx, b.PreflightID)
	if err != nil || got.PreflightID != b.PreflightID || !got.ExpiresAt.Equal(b.ExpiresAt) {
		t.Fatalf("Binding after restart: %+v, %v", got, err)
	}
	wantStatus(t, "retry after restart", consume(t, s, &b, "refund.create", "req-a", "sha256:a"), wal.Repeated)
	wantStatus(t, "second step after restart", consume(t, s, &b, "refund.create", "req-b", "sha256:b"), wal.Consumed)
	s = restart()
	wantStatus(t, "third call after two restarts", consume(t, s, &b, "refund.create", "req-c", "sha256:c"), wal.Replay)
	if sess, err := s.Session(ctx, rec.SessionKey); err != nil || sess.Attempts != 1 {
		t.Errorf("Session after restart = %+v, %v; want 1 attempt", sess, err)
	}
	if ir, err := s.Idempotency(ctx, "restart-key"); err != nil || ir.PreflightID != b.PreflightID || ir.RequestDigest != "sha256:req" {
		t.Errorf("Idempotency after restart = %+v, %v", ir, err)
	}
}

func idempotencyClaims(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := context.Background()
	release, err := s.ClaimIdempotency(ctx, "claim-1")
	if err != nil {
		t.Fatalf("first claim: %v", err)
	}
	if _, err := s.ClaimIdempotency(ctx, "claim-1"); !errors.Is(err, wal.ErrInProgress) {
		t.Fatalf("second claim of a held key: %v, want wal.ErrInProgress", err)
	}
	other, err := s.ClaimIdempotency(ctx, "claim-2")
	if err != nil {
		t.Fatalf("claim of another key while one is held: %v", err)
	}
	other()
	release()
	release() // a second release changes nothing
	again, err := s.ClaimIdempotency(ctx, "claim-1")
	if err != nil {
		t.Fatalf("claim after release: %v", err)
	}
	if _, err := s.ClaimIdempotency(ctx, "claim-1"); !errors.Is(err, wal.ErrInProgress) {
		t.Fatalf("claim of a key held again, after a double release: %v, want wal.ErrInProgress", err)
	}
	again()
}

func idempotencyClaimRace(t *testing.T, open Opener) {
	s, _ := open(t)
	const n = 32
	var wg sync.WaitGroup
	var won, busy, other atomic.Int32
	releases := make(chan func(), n)
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			release, err := s.ClaimIdempotency(context.Background(), "race-key")
			switch {
			case err == nil:
				won.Add(1)
				releases <- release
			case errors.Is(err, wal.ErrInProgress):
				busy.Add(1)
			default:
				other.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	close(releases)
	for r := range releases {
		r()
	}
	if won.Load() != 1 || busy.Load() != n-1 || other.Load() != 0 {
		t.Errorf("%d concurrent claims: %d won, %d in progress, %d other; want 1, %d, 0", n, won.Load(), busy.Load(), other.Load(), n-1)
	}
}

func idempotencyRecord(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := context.Background()
	b := newBinding("refund.create")
	idem := &wal.IdempotencyRecord{Key: "idem-record", RequestDigest: "sha256:first", PreflightID: b.PreflightID}
	record(t, s, wal.PreflightRecord{Binding: b, Idempotency: idem})
	got, err := s.Idempotency(ctx, "idem-record")
	if err != nil || got != *idem {
		t.Fatalf("Idempotency = %+v, %v; want %+v", got, err, *idem)
	}
	second := newBinding("refund.create")
	_, err = s.RecordPreflight(ctx, wal.PreflightRecord{Binding: second, Decision: decisionOf(&second), Time: time.Now(),
		Idempotency: &wal.IdempotencyRecord{Key: "idem-record", RequestDigest: "sha256:second", PreflightID: second.PreflightID}})
	if !errors.Is(err, wal.ErrConflict) {
		t.Fatalf("a second preflight under a recorded key: %v, want wal.ErrConflict", err)
	}
	if _, err := s.Binding(ctx, second.PreflightID); !errors.Is(err, wal.ErrNotFound) {
		t.Errorf("the refused preflight's binding: %v, want wal.ErrNotFound (nothing written)", err)
	}
	if got, err := s.Idempotency(ctx, "idem-record"); err != nil || got != *idem {
		t.Errorf("Idempotency after the refused write = %+v, %v; want the first record", got, err)
	}
	// A caller that read the first record (its decision gone, say) replaces it.
	third := newBinding("refund.create")
	next := &wal.IdempotencyRecord{Key: "idem-record", RequestDigest: "sha256:third", PreflightID: third.PreflightID}
	record(t, s, wal.PreflightRecord{Binding: third, Idempotency: next, IdempotencyReplaces: b.PreflightID})
	if got, err := s.Idempotency(ctx, "idem-record"); err != nil || got != *next {
		t.Errorf("Idempotency after a replacing write = %+v, %v; want %+v", got, err, *next)
	}
}

func sessionCounters(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := context.Background()
	key := `["user:statetest","sess-counters","sha256:plan"]`
	outcomes := []preflight.Outcome{preflight.OutcomeDeny, preflight.OutcomeRepairRequired,
		preflight.OutcomeRepairRequired, preflight.OutcomePass}
	for i, o := range outcomes {
		b := newBinding("refund.create")
		b.Outcome = o
		record(t, s, wal.PreflightRecord{Binding: b, SessionKey: key, SessionAttempt: i + 1})
		got, err := s.Session(ctx, key)
		want := wal.Session{Attempts: i + 1}
		if i >= 1 {
			want.RepairFrom = 2 // the first repair_required opens the budget
		}
		if err != nil || got != want {
			t.Fatalf("after attempt %d (%s): Session = %+v, %v; want %+v", i+1, o, got, err, want)
		}
	}
	if got, _ := s.Session(ctx, `["user:statetest","sess-other","sha256:plan"]`); got != (wal.Session{}) {
		t.Errorf("another session = %+v, want the zero Session", got)
	}
	// Without SessionAttempt the count goes up unconditionally.
	record(t, s, wal.PreflightRecord{Binding: newBinding("refund.create"), SessionKey: key})
	if got, _ := s.Session(ctx, key); got.Attempts != len(outcomes)+1 {
		t.Errorf("after an unconditional attempt: %+v, want %d attempts", got, len(outcomes)+1)
	}
}

func sessionAttemptConflict(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := context.Background()
	key := `["user:statetest","sess-conflict","sha256:plan"]`
	record(t, s, wal.PreflightRecord{Binding: newBinding("refund.create"), SessionKey: key, SessionAttempt: 1})
	for _, attempt := range []int{1, 3} {
		b := newBinding("refund.create")
		_, err := s.RecordPreflight(ctx, wal.PreflightRecord{Binding: b, Decision: decisionOf(&b), Time: time.Now(),
			SessionKey: key, SessionAttempt: attempt})
		if !errors.Is(err, wal.ErrConflict) {
			t.Errorf("attempt %d of a session with 1: %v, want wal.ErrConflict", attempt, err)
		}
		if _, err := s.Binding(ctx, b.PreflightID); !errors.Is(err, wal.ErrNotFound) {
			t.Errorf("attempt %d refused, yet its binding: %v", attempt, err)
		}
	}
	if got, _ := s.Session(ctx, key); got.Attempts != 1 {
		t.Errorf("Session after refused attempts = %+v, want 1 attempt", got)
	}
}

func sessionLockSerialises(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := context.Background()
	unlock, err := s.LockSession(ctx, "lock-a")
	if err != nil {
		t.Fatalf("LockSession: %v", err)
	}
	other, err := s.LockSession(ctx, "lock-b")
	if err != nil {
		t.Fatalf("LockSession of another session while one is held: %v", err)
	}
	other()
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := s.LockSession(short, "lock-a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockSession of a held session until the deadline: %v, want context.DeadlineExceeded", err)
	}
	got := make(chan func(), 1)
	go func() {
		u, err := s.LockSession(ctx, "lock-a")
		if err != nil {
			t.Errorf("waiting LockSession: %v", err)
			u = func() {}
		}
		got <- u
	}()
	select {
	case u := <-got:
		u()
		t.Fatal("LockSession returned while another held the session")
	case <-time.After(20 * time.Millisecond):
	}
	unlock()
	(<-got)()
}

// sessionConcurrentCounts: submissions of one session from many goroutines,
// each under the lock, count every attempt once.
func sessionConcurrentCounts(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := context.Background()
	key := `["user:statetest","sess-concurrent","sha256:plan"]`
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			unlock, err := s.LockSession(ctx, key)
			if err != nil {
				errs <- err
				return
			}
			defer unlock()
			sess, err := s.Session(ctx, key)
			if err != nil {
				errs <- err
				return
			}
			b := newBinding("refund.create")
			_, err = s.RecordPreflight(ctx, wal.PreflightRecord{Binding: b, Decision: decisionOf(&b), Time: time.Now(),
				SessionKey: key, SessionAttempt: sess.Attempts + 1})
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("submission under the session lock: %v", err)
	}
	if got, _ := s.Session(ctx, key); got.Attempts != n {
		t.Errorf("after %d locked submissions: %+v, want %d attempts", n, got, n)
	}
}
