package httpapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/internal/canon"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/preflight/submit"
	"github.com/contractrefine/autonomy/wal"
)

// gatedStore holds every RecordPreflight until the test releases it, so a
// test can act while a decision is being recorded.
type gatedStore struct {
	*wal.DB
	entered chan struct{}
	release chan struct{}
}

func (g *gatedStore) RecordPreflight(ctx context.Context, rec wal.PreflightRecord) (wal.Frame, error) {
	g.entered <- struct{}{}
	<-g.release
	return g.DB.RecordPreflight(ctx, rec)
}

// withGate wraps the fixture's store in a gatedStore.
func withGate(g *gatedStore) fixtureOption {
	return func(o *submit.Options) {
		g.DB = o.Store.(*wal.DB)
		o.Store = g
	}
}

func TestDryRunWritesNothing(t *testing.T) {
	f := newFixture(t)
	for i := range 3 {
		d := mustDecision(t, f.do(http.MethodPost, "/v1/preflight?dry_run=true", readRequest(t, "read_repair")))
		if d.PreflightID != "" || d.AuditID != "" {
			t.Errorf("dry run %d: ids %q %q, want both empty", i, d.PreflightID, d.AuditID)
		}
		if d.Attempt != 1 || d.Outcome != "repair_required" {
			t.Errorf("dry run %d: attempt %d %s, want attempt 1 repair_required: dry runs spend no budget", i, d.Attempt, d.Outcome)
		}
	}
	r := f.do(http.MethodPost, "/v1/preflight?dry_run=true", readRequest(t, "refund_pass"))
	if mustDecision(t, r).Outcome != "pass" || r.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("dry run of refund_pass: %s", r.body)
	}
	if n := f.frames(); n != 0 {
		t.Fatalf("dry runs wrote %d frames", n)
	}
	if s, _ := f.db.Session(t.Context(), `["user:example","session:read","plan-read-v1"]`); s.Attempts != 0 {
		t.Errorf("dry runs counted %d session attempts", s.Attempts)
	}

	// The budget is whole: the real first attempt is attempt 1.
	if d := mustDecision(t, f.post(readRequest(t, "read_repair"))); d.Attempt != 1 || d.PreflightID == "" {
		t.Errorf("first real attempt after dry runs: attempt %d id %q", d.Attempt, d.PreflightID)
	}
	// The key was not recorded: the real request is decided, not replayed.
	real := f.post(readRequest(t, "refund_pass"))
	if mustDecision(t, real).PreflightID == "" || real.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("real request after a dry run was replayed: %s", real.body)
	}
	// A dry run neither reads recorded keys: a different body under the
	// recorded key is evaluated, not refused.
	other := edit(t, "refund_pass", map[string]any{"/intent/summary": "another refund"})
	if d := mustDecision(t, f.do(http.MethodPost, "/v1/preflight?dry_run=true", other)); d.PreflightID != "" {
		t.Errorf("dry run got id %q", d.PreflightID)
	}
	if n := f.frames(); n != 2 {
		t.Errorf("WAL holds %d frames, want the 2 real decisions", n)
	}
	// A dry run is not bindable: the empty id names no record.
	if r := f.do(http.MethodGet, "/v1/preflight/", nil); r.status != http.StatusNotFound {
		t.Errorf("GET /v1/preflight/ status %d", r.status)
	}
}

// TestDryRunSpellings shows that ?dry_run takes strconv.ParseBool's
// spellings, and that any other value is refused rather than read as a
// real run that writes.
func TestDryRunSpellings(t *testing.T) {
	f := newFixture(t)
	for _, q := range []string{"dry_run=true", "dry_run=1", "dry_run=TRUE", "dry_run=t", "dry_run=True"} {
		if d := mustDecision(t, f.do(http.MethodPost, "/v1/preflight?"+q, readRequest(t, "read_repair"))); d.PreflightID != "" {
			t.Errorf("%s: id %q, want a dry run", q, d.PreflightID)
		}
	}
	for _, q := range []string{"dry_run=yes", "dry_run=", "dry_run", "dry_run=true&dry_run=false", "dry_run=on",
		"dry_run=true;", "dry_run=true;x=1", "dry_run=tru%", "DRY_RUN=true", "Dry_Run=1", "dry-run=true", "dryRun=true",
		"dry_run=true&x=1"} {
		errs := mustError(t, f.do(http.MethodPost, "/v1/preflight?"+q, readRequest(t, "read_repair")), http.StatusBadRequest)
		if errs[0].Code != preflight.CodeMalformedRequest {
			t.Errorf("%s: %+v", q, errs)
		}
	}
	if n := f.frames(); n != 0 {
		t.Fatalf("%d frames written, want none", n)
	}
	if d := mustDecision(t, f.do(http.MethodPost, "/v1/preflight?dry_run=false", readRequest(t, "read_repair"))); d.PreflightID == "" {
		t.Error("dry_run=false: no id, want a real run")
	}
}

// compactedStore answers as a log whose compaction removed the recorded
// decisions of gone but kept the idempotency keys naming them: the sweep
// of keys runs after the chunks that remove preflights, and a cancelled or
// crashed compaction leaves it undone.
type compactedStore struct {
	*wal.DB
	gone map[string]bool
}

func (c *compactedStore) Decision(ctx context.Context, id string) ([]byte, error) {
	if c.gone[id] {
		return nil, wal.ErrNotFound
	}
	return c.DB.Decision(ctx, id)
}

// TestIdempotencyKeyOfACompactedDecision: a key whose decision compaction
// removed names no effect any more; the request is decided afresh (as
// docs/OPERATIONS.md says), not answered 503 on every retry.
func TestIdempotencyKeyOfACompactedDecision(t *testing.T) {
	cs := &compactedStore{gone: map[string]bool{}}
	f := newFixture(t, func(o *submit.Options) {
		cs.DB = o.Store.(*wal.DB)
		o.Store = cs
	})
	first := mustDecision(t, f.post(readRequest(t, "refund_pass")))
	cs.gone[first.PreflightID] = true
	again := f.post(readRequest(t, "refund_pass"))
	if d := mustDecision(t, again); d.PreflightID == "" || d.PreflightID == first.PreflightID || again.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("same key after its decision was compacted: id %q (first %q), replayed %q; want a fresh decision",
			d.PreflightID, first.PreflightID, again.header.Get("Idempotent-Replayed"))
	}
	// The fresh decision is now the key's record: the next retry replays it.
	third := f.post(readRequest(t, "refund_pass"))
	if third.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry after the fresh decision: not a replay (%d %s)", third.status, third.body)
	}
	// Another request under a compacted key is decided too, not 409.
	cs.gone[mustDecision(t, third).PreflightID] = true
	other := edit(t, "refund_pass", map[string]any{"/intent/summary": "another refund"})
	if r := f.post(other); r.status != http.StatusOK {
		t.Errorf("another request under a compacted key: %d %s, want it decided", r.status, r.body)
	}
}

func TestIdempotentReplay(t *testing.T) {
	f := newFixture(t)
	first := f.post(readRequest(t, "refund_pass"))
	d := mustDecision(t, first)
	if first.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("first answer carries Idempotent-Replayed")
	}
	frames := f.frames()

	// The same request, reformatted: the canonical digest is the same.
	var v any
	json.Unmarshal(readRequest(t, "refund_pass"), &v)
	compact, _ := json.Marshal(v)
	cases := map[string][]byte{"same bytes": readRequest(t, "refund_pass"), "same request, other formatting": compact}
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			r := f.post(body)
			if r.status != http.StatusOK || r.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("status %d, Idempotent-Replayed %q", r.status, r.header.Get("Idempotent-Replayed"))
			}
			if !bytes.Equal(r.body, first.body) {
				t.Errorf("replay differs from the recorded decision:\n%s\n%s", r.body, first.body)
			}
		})
	}
	// The recorded outcome wins over a clock that has moved on: the key
	// names the effect, and a retry after the deadline must learn what
	// was decided, not be told the deadline passed.
	f.clock.Add(time.Hour)
	late := f.post(readRequest(t, "refund_pass"))
	if late.status != http.StatusOK || !bytes.Equal(late.body, first.body) || late.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay after the deadline: status %d %s", late.status, late.body)
	}
	// A session attempt is spent once, by the decision, not by replays.
	if s, _ := f.db.Session(t.Context(), `["user:example","session:001","plan-882-v1","tenant:demo"]`); s.Attempts != 1 {
		t.Errorf("session attempts %d, want 1", s.Attempts)
	}
	if got := f.frames(); got != frames {
		t.Errorf("replays wrote %d frames", got-frames)
	}
	// The key is scoped by tenant and actor: the same key in another
	// tenant is another effect.
	otherTenant := edit(t, "refund_pass", map[string]any{"/context/request/tenant/idRef": "tenant:other"})
	f.clock.Set(decisionTime)
	r := f.post(otherTenant)
	o := mustDecision(t, r)
	if o.PreflightID == d.PreflightID || r.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("same key in another tenant replayed %s", o.PreflightID)
	}
	// So is the repair session: the other tenant's first submission is its
	// own attempt 1, not the demo tenant's attempt 2.
	if o.Attempt != 1 {
		t.Errorf("the other tenant's first submission of the session is attempt %d, want 1", o.Attempt)
	}
}

// TestIdempotencyInProgress holds the first decision in RecordPreflight and
// shows that the same key meanwhile gets 409 idempotency-in-progress,
// whatever the body, and the recorded decision afterwards.
func TestIdempotencyInProgress(t *testing.T) {
	g := &gatedStore{entered: make(chan struct{}), release: make(chan struct{})}
	f := newFixture(t, withGate(g))
	done := make(chan response, 1)
	go func() { done <- doHTTP(t, http.MethodPost, f.srv.URL+"/v1/preflight", readRequest(t, "refund_pass")) }()
	<-g.entered

	bodies := map[string][]byte{
		"same body":      readRequest(t, "refund_pass"),
		"different body": edit(t, "refund_pass", map[string]any{"/intent/summary": "changed"}),
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			errs := mustError(t, f.post(body), http.StatusConflict)
			if errs[0].Code != preflight.CodeIdempotencyInProgress || !*errs[0].Retryable ||
				*errs[0].Path != "/context/request/idempotencyKey" {
				t.Errorf("got %+v, want retryable idempotency-in-progress at /context/request/idempotencyKey", errs[0])
			}
		})
	}
	close(g.release)
	first := <-done
	mustDecision(t, first)
	again := f.post(readRequest(t, "refund_pass"))
	if !bytes.Equal(again.body, first.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("after the first decision: %d %s", again.status, again.body)
	}
}

// TestSessionWaitIsBounded: submissions of one repair session are decided
// one at a time; one that waits past SessionWait (held up behind another
// that is being recorded) gets a retryable 503 and records nothing, rather
// than being decided after its client can no longer be answered.
func TestSessionWaitIsBounded(t *testing.T) {
	g := &gatedStore{entered: make(chan struct{}), release: make(chan struct{})}
	f := newFixture(t, withGate(g), func(o *submit.Options) { o.SessionWait = 50 * time.Millisecond })
	done := make(chan response, 1)
	go func() { done <- doHTTP(t, http.MethodPost, f.srv.URL+"/v1/preflight", readRequest(t, "echo_pass")) }()
	<-g.entered
	frames := f.frames()

	// The same session, another submission (no envelope, no idempotency key).
	second := edit(t, "echo_pass", map[string]any{"/intent/summary": "second"})
	errs := mustError(t, f.post(second), http.StatusServiceUnavailable)
	if errs[0].Code != preflight.CodeVerifierUnavailable || !*errs[0].Retryable {
		t.Errorf("got %+v, want a retryable verifier-unavailable", errs[0])
	}
	close(g.release)
	go func() { // let later submissions through the gate
		for range g.entered {
		}
	}()
	defer close(g.entered)
	if d := mustDecision(t, <-done); d.Attempt != 1 {
		t.Errorf("the held submission is attempt %d, want 1", d.Attempt)
	}
	if got := f.frames(); got != frames+1 {
		t.Errorf("%d frames written, want the held submission's alone", got-frames)
	}
	// The refused one spent nothing: the next submission is attempt 2.
	if d := mustDecision(t, f.post(second)); d.Attempt != 2 {
		t.Errorf("the next submission is attempt %d, want 2", d.Attempt)
	}
}

// TestConcurrentSameKey races two POSTs with one idempotency key, many
// times: one decides; the other is told it is in progress or gets the
// replayed decision; never are there two different preflight ids.
func TestConcurrentSameKey(t *testing.T) {
	const rounds = 40
	f := newFixture(t)
	var replays, conflicts int
	for i := range rounds {
		body := edit(t, "refund_pass", map[string]any{
			"/context/request/idempotencyKey": fmt.Sprintf("idem_race_%d", i),
			"/context/actor/session_id":       fmt.Sprintf("session:race:%d", i),
		})
		var wg sync.WaitGroup
		var rs [2]response
		start := make(chan struct{})
		for j := range rs {
			wg.Go(func() {
				<-start
				rs[j] = doHTTP(t, http.MethodPost, f.srv.URL+"/v1/preflight", body)
			})
		}
		close(start)
		wg.Wait()
		var ids []string
		replayed := 0
		for _, r := range rs {
			switch r.status {
			case http.StatusOK:
				ids = append(ids, mustDecision(t, r).PreflightID)
				if r.header.Get("Idempotent-Replayed") == "true" {
					replayed++
				}
			case http.StatusConflict:
				errs := mustError(t, r, http.StatusConflict)
				if errs[0].Code != preflight.CodeIdempotencyInProgress || !*errs[0].Retryable {
					t.Errorf("round %d: conflict %+v", i, errs[0])
				}
				conflicts++
			default:
				t.Errorf("round %d: status %d %s", i, r.status, r.body)
			}
		}
		if len(ids) == 0 {
			t.Fatalf("round %d: neither request was decided", i)
		}
		if len(ids) == 2 && (ids[0] != ids[1] || replayed != 1) {
			t.Errorf("round %d: ids %v, %d replayed: want one decision and one replay of it", i, ids, replayed)
		}
		replays += replayed
	}
	if n := f.frames(); n != rounds {
		t.Errorf("WAL holds %d frames, want one decision per key (%d)", n, rounds)
	}
	t.Logf("%d rounds: %d in-progress conflicts, %d replays", rounds, conflicts, replays)
}

// TestRepairBudget walks a session: a repair, the repaired plan passing,
// then a third submission refused without evaluation; it also races many
// submissions of one session and finds every attempt number used once.
func TestRepairBudget(t *testing.T) {
	t.Run("sequential", func(t *testing.T) {
		f := newFixture(t)
		steps := []struct {
			req, outcome, reason string
		}{
			{"read_repair", "repair_required", "contract: repair_required"},
			{"read_pass", "pass", "contract: passed"},
			{"read_pass", "deny", "contract: repair_exhausted"},
			{"read_repair", "deny", "contract: repair_exhausted"},
		}
		for i, s := range steps {
			d := mustDecision(t, f.post(readRequest(t, s.req)))
			if d.Outcome != s.outcome || d.Reason != s.reason || d.Attempt != i+1 {
				t.Errorf("submission %d (%s): %s %s attempt %d, want %s %s attempt %d",
					i+1, s.req, d.Outcome, d.Reason, d.Attempt, s.outcome, s.reason, i+1)
			}
			if s.reason == "contract: repair_exhausted" {
				for _, r := range d.ContractResults {
					if r.Outcome != "not_applicable" {
						t.Errorf("exhausted submission evaluated %s: %s", r.Contract, r.Outcome)
					}
				}
			}
		}
		// Another plan of the same actor is another session.
		other := edit(t, "read_repair", map[string]any{"/intent/plan_hash": "plan-read-v2"})
		if d := mustDecision(t, f.post(other)); d.Attempt != 1 || d.Outcome != "repair_required" {
			t.Errorf("new plan hash: attempt %d %s", d.Attempt, d.Outcome)
		}
		// Another actor naming the same session and plan neither spends nor
		// sees this actor's budget.
		mallory := edit(t, "read_pass", map[string]any{"/context/actor/id": "user:mallory"})
		if d := mustDecision(t, f.post(mallory)); d.Attempt != 1 || d.Outcome != "pass" {
			t.Errorf("another actor, same session and plan: attempt %d %s %s", d.Attempt, d.Outcome, d.Reason)
		}
	})
	t.Run("budget opens at the first repair", func(t *testing.T) {
		// Before any repair_required the session has no budget to spend:
		// passes and denies are decided however many there are. The first
		// repair_required opens it, for max_repair_attempts (1) more.
		f := newFixture(t)
		unknown := edit(t, "read_pass", map[string]any{"/plan/steps/0/kind": "zz.unknown"})
		steps := []struct {
			req             []byte
			outcome, reason string
		}{
			{readRequest(t, "read_pass"), "pass", "contract: passed"},
			{readRequest(t, "read_pass"), "pass", "contract: passed"},
			{unknown, "deny", "contract: capability_not_in_zone"},
			{readRequest(t, "read_pass"), "pass", "contract: passed"},
			{readRequest(t, "read_repair"), "repair_required", "contract: repair_required"},
			{readRequest(t, "read_pass"), "pass", "contract: passed"},
			{readRequest(t, "read_pass"), "deny", "contract: repair_exhausted"},
		}
		for i, s := range steps {
			d := mustDecision(t, f.post(s.req))
			if d.Outcome != s.outcome || d.Reason != s.reason || d.Attempt != i+1 {
				t.Errorf("submission %d: %s %s attempt %d, want %s %s attempt %d",
					i+1, d.Outcome, d.Reason, d.Attempt, s.outcome, s.reason, i+1)
			}
		}
		if s, err := f.db.Session(t.Context(), `["user:example","session:read","plan-read-v1"]`); err != nil || s.Attempts != 7 || s.RepairFrom != 5 {
			t.Errorf("session %+v, %v: want 7 attempts, budget opened at 5", s, err)
		}
	})
	t.Run("max_repair_attempts 0", func(t *testing.T) {
		f := newFixture(t, func(o *submit.Options) { o.MaxRepairAttempts = 0 })
		mustDecision(t, f.post(readRequest(t, "read_repair")))
		if d := mustDecision(t, f.post(readRequest(t, "read_pass"))); d.Reason != "contract: repair_exhausted" {
			t.Errorf("second submission with no repairs allowed: %s", d.Reason)
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		const n = 8
		f := newFixture(t)
		var wg sync.WaitGroup
		ds := make([]decision, n)
		for i := range n {
			wg.Go(func() {
				ds[i] = mustDecision(t, doHTTP(t, http.MethodPost, f.srv.URL+"/v1/preflight", readRequest(t, "read_repair")))
			})
		}
		wg.Wait()
		var attempts []int
		for _, d := range ds {
			attempts = append(attempts, d.Attempt)
			want := "contract: repair_required"
			if d.Attempt > 2 {
				want = "contract: repair_exhausted"
			}
			if d.Reason != want {
				t.Errorf("attempt %d: %s, want %s", d.Attempt, d.Reason, want)
			}
		}
		slices.Sort(attempts)
		if !slices.Equal(attempts, []int{1, 2, 3, 4, 5, 6, 7, 8}) {
			t.Errorf("attempts %v: two submissions read the same budget", attempts)
		}
		if got, _ := f.db.Session(t.Context(), `["user:example","session:read","plan-read-v1"]`); got.Attempts != n {
			t.Errorf("session attempts %d, want %d", got.Attempts, n)
		}
	})
}

// auditBody is GET /v1/audit/{id} with attrs kept raw.
type auditBody struct {
	AuditID string `json:"audit_id"`
	Frames  []struct {
		Seq       uint64                     `json:"seq"`
		Kind      string                     `json:"kind"`
		Timestamp string                     `json:"timestamp"`
		AuditID   string                     `json:"audit_id"`
		Attrs     map[string]json.RawMessage `json:"attrs"`
		PrevHash  string                     `json:"prev_hash"`
		Hash      string                     `json:"hash"`
	} `json:"frames"`
}

func getAudit(t *testing.T, f *fixture, id string) (auditBody, response) {
	t.Helper()
	r := f.do(http.MethodGet, "/v1/audit/"+id, nil)
	if r.status != http.StatusOK {
		t.Fatalf("GET /v1/audit/%s: %d %s", id, r.status, r.body)
	}
	var a auditBody
	if err := json.Unmarshal(r.body, &a); err != nil {
		t.Fatal(err)
	}
	return a, r
}

func TestAuditJoin(t *testing.T) {
	cases := map[string]struct {
		request string
		raw     bool
	}{
		"digests only":        {request: "echo_pass"},
		"raw requests kept":   {request: "echo_pass", raw: true},
		"decision with < > &": {request: "refund_clause_violation"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, func(o *submit.Options) { o.StoreRawRequests = tc.raw })
			post := f.post(readRequest(t, tc.request))
			d := mustDecision(t, post)
			a, r := getAudit(t, f, d.AuditID)
			if a.AuditID != d.AuditID || len(a.Frames) != 1 || a.Frames[0].Kind != wal.KindPreflight {
				t.Fatalf("audit join: %s", r.body)
			}
			attrs := a.Frames[0].Attrs
			if !bytes.Equal(attrs["decision"], post.body) {
				t.Errorf("the frame's decision is not the answer's bytes:\n%s\n%s", attrs["decision"], post.body)
			}
			for _, k := range []string{"request_digest", "steps", "outcome", "preflight_id", "actor_id"} {
				if attrs[k] == nil {
					t.Errorf("preflight frame lacks %s: %s", k, r.body)
				}
			}
			var steps []struct{ ID, Kind, ArgsDigest string }
			json.Unmarshal(attrs["steps"], &steps)
			if len(steps) == 0 || steps[0].Kind == "" {
				t.Errorf("steps %s", attrs["steps"])
			}
			const rawArg = "raw-arg-value-7f3a"
			if tc.request == "echo_pass" && bytes.Contains(r.body, []byte(rawArg)) != tc.raw {
				t.Errorf("raw arg in the audit frame: %v, want %v (wal.store_raw_requests)", !tc.raw, tc.raw)
			}
			if !strings.Contains(string(attrs["steps"]), "args_digest") {
				t.Errorf("steps carry no args digest: %s", attrs["steps"])
			}
			checkFrameHashes(t, r.body)
		})
	}

	t.Run("a query it cannot read is refused", func(t *testing.T) {
		f := newFixture(t)
		d := mustDecision(t, f.post(readRequest(t, "echo_pass")))
		for _, q := range []string{"?include=%zz", "?include=all;x", "?includes=all", "?x=1", "?include=outcomes"} {
			r := f.do(http.MethodGet, "/v1/audit/"+d.AuditID+q, nil)
			if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `"malformed-request"`) {
				t.Errorf("%s: %d %s, want 400 malformed-request", q, r.status, r.body)
			}
		}
		if r := f.do(http.MethodGet, "/v1/audit/"+d.AuditID+"?include=all", nil); r.status != http.StatusOK {
			t.Errorf("?include=all: %d %s", r.status, r.body)
		}
	})

	t.Run("decision frames in timestamp order", func(t *testing.T) {
		f := newFixture(t)
		d := mustDecision(t, f.post(readRequest(t, "echo_pass")))
		// Written out of time order on purpose; equal timestamps keep seq order.
		for _, in := range []struct {
			at   time.Time
			step string
		}{
			{decisionTime.Add(2 * time.Second), "late"},
			{decisionTime.Add(time.Second), "early-a"},
			{decisionTime.Add(time.Second), "early-b"},
		} {
			if _, err := f.db.AppendDecision(t.Context(), wal.FrameInput{Kind: wal.KindDecision, AuditID: d.AuditID,
				Time: in.at, Attrs: map[string]any{"step_id": in.step}}); err != nil {
				t.Fatal(err)
			}
		}
		a, r := getAudit(t, f, d.AuditID)
		checkFrameHashes(t, r.body)
		var order []string
		for _, fr := range a.Frames {
			order = append(order, fr.Kind+":"+string(fr.Attrs["step_id"]))
		}
		want := []string{"autonomy.preflight:", `autonomy.decision:"early-a"`, `autonomy.decision:"early-b"`, `autonomy.decision:"late"`}
		if !slices.Equal(order, want) {
			t.Errorf("order %v, want %v\n%s", order, want, r.body)
		}
	})
}

// checkFrameHashes recomputes each frame's chain hash from the audit answer
// alone (wal/doc.go: SHA-256 over prev_hash and the frame's canonical bytes
// without its hash), as an auditor outside the service would.
func checkFrameHashes(t *testing.T, body []byte) {
	t.Helper()
	var a struct {
		Frames []map[string]json.RawMessage `json:"frames"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatal(err)
	}
	for _, fr := range a.Frames {
		var hash, prev string
		json.Unmarshal(fr["hash"], &hash)
		json.Unmarshal(fr["prev_hash"], &prev)
		delete(fr, "hash")
		b, err := canon.Marshal(fr)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(append([]byte(prev), b...))
		if got := hex.EncodeToString(sum[:]); got != hash {
			t.Errorf("frame %s: recomputed hash %s, frame says %s", fr["seq"], got, hash)
		}
	}
}

// TestDecisionChainStaysInItsTenant: a plan builds only on decisions of its
// own tenant. Another tenant's audit id is not on record for it (and so
// says nothing of whether that decision exists or passed).
func TestDecisionChainStaysInItsTenant(t *testing.T) {
	f := newFixture(t)
	cited := mustDecision(t, f.post(readRequest(t, "refund_pass")))
	if cited.Outcome != "pass" {
		t.Fatalf("the cited preflight: %s, want pass", cited.Outcome)
	}
	chainRow := func(tenant, key string) row {
		t.Helper()
		d := mustDecision(t, f.post(edit(t, "refund_pass", map[string]any{
			"/context/request/tenant/idRef":   tenant,
			"/context/request/idempotencyKey": key,
			"/context/decision_chain":         []string{cited.AuditID},
		})))
		for _, r := range d.ContractResults {
			if r.Contract == "decision_chain_complete" {
				return r
			}
		}
		t.Fatalf("no decision_chain_complete row in %+v", d)
		return row{}
	}
	if r := chainRow("tenant:demo", "idem_chain_same"); r.Outcome != "pass" {
		t.Errorf("citing its own tenant's pass: %+v, want pass", r)
	}
	if r := chainRow("tenant:other", "idem_chain_other"); r.Outcome != "fail" || r.Reason != "contract: decision_chain_incomplete" {
		t.Errorf("citing another tenant's pass: %+v, want fail contract: decision_chain_incomplete", r)
	}
}
