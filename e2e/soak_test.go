package e2e

// The crash soak: the real binary in enforce mode on one data directory, a
// driver sending concurrent preflights and ext_authz Checks over gRPC
// (with deliberate replays, repeats, repair sessions and idempotent
// requests), SIGKILL at a random moment of every cycle and a restart. What
// the service acknowledged before a kill is checked after every restart:
//
//   - every preflight answered 200 is returned by GET /v1/preflight/{id}
//     byte for byte;
//   - no preflight step is ever allowed to a second request id (a preflight
//     with n steps has at most n allowed request ids, over the whole soak);
//   - `autonomy wal verify` passes on the killed process's file;
//   - a repair session never gets its budget back: attempts only grow, and
//     once repair_exhausted it stays exhausted;
//   - an idempotency key answered once returns the same preflight_id and
//     bytes, marked Idempotent-Replayed.
//
// SOAK_CYCLES sets the number of kill cycles (default 20, 3 with -short;
// TestCrashSoakEtcd runs it on two replicas sharing an etcd, 10 by default);
// SOAK_SEED replays a run's random choices. CI runs it as
//
//	go test -count=1 -v -run '^TestCrashSoak$' ./e2e
//
// and reads the closing "soak:" line.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"

	"github.com/contractrefine/autonomy/internal/etcdtest"
)

const (
	soakWorkers        = 8
	soakMinUptime      = 300 * time.Millisecond
	soakMaxUptime      = 2 * time.Second
	soakRequestTimeout = 10 * time.Second
	// soakSample bounds how many older records each restart re-checks; the
	// ones acknowledged in the cycle just killed are always all checked,
	// and everything is checked once more at the end.
	soakSample = 40
)

// soakPreflight is one preflight the service answered 200.
type soakPreflight struct {
	id    string
	body  []byte // the decision bytes returned
	steps int    // plan steps the preflight binds (0 unless it passed)
	cycle int
	// allowed holds the request ids Check allowed under this preflight.
	allowed map[string]bool
}

// soakSession is a repair session driven towards repair_exhausted.
type soakSession struct {
	mu        sync.Mutex // one request at a time, so attempts are seen in order
	id        string
	maxAcked  int
	exhausted bool
}

// soakIdem is a request with an idempotency key that was answered 200.
type soakIdem struct {
	body        []byte
	preflightID string
	decision    []byte
	cycle       int
}

// soakLedger is everything the service acknowledged, and what went wrong.
type soakLedger struct {
	mu         sync.Mutex
	preflights map[string]*soakPreflight
	order      []string
	sessions   []*soakSession
	idem       []*soakIdem
	violations []string

	preflightsAcked, allows, replayDenies, repeats, repairsAcked atomic.Int64
	idemAcked, idemReplays, reads, unacked                       atomic.Int64
}

func (l *soakLedger) violate(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.violations = append(l.violations, fmt.Sprintf(format, args...))
}

func (l *soakLedger) addPreflight(p *soakPreflight) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.preflights[p.id] = p
	l.order = append(l.order, p.id)
	l.preflightsAcked.Add(1)
}

// allowed records an allow and checks the single-use invariant.
func (l *soakLedger) allowed(preflightID, requestID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.preflights[preflightID]
	if p == nil {
		l.violations = append(l.violations, fmt.Sprintf("allow under %s, which was never acknowledged", preflightID))
		return
	}
	if p.allowed[requestID] {
		l.repeats.Add(1)
		return
	}
	p.allowed[requestID] = true
	l.allows.Add(1)
	if len(p.allowed) > p.steps {
		ids := make([]string, 0, len(p.allowed))
		for id := range p.allowed {
			ids = append(ids, id)
		}
		l.violations = append(l.violations, fmt.Sprintf("preflight %s (%d steps) allowed to %d request ids: %v",
			preflightID, p.steps, len(p.allowed), ids))
	}
}

// pick returns up to n random acknowledged preflights matching keep.
func (l *soakLedger) pick(rng *rand.Rand, n int, keep func(*soakPreflight) bool) []*soakPreflight {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*soakPreflight
	for tries := 0; tries < 4*n && len(out) < n && len(l.order) > 0; tries++ {
		p := l.preflights[l.order[rng.IntN(len(l.order))]]
		if keep(p) {
			out = append(out, p)
		}
	}
	return out
}

// soakClient talks to one running process.
type soakClient struct {
	s     *Server
	http  *http.Client
	authz authv3.AuthorizationClient
}

func (c *soakClient) post(body []byte) (int, []byte, http.Header, error) {
	ctx, cancel := context.WithTimeout(context.Background(), soakRequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.s.URL("/v1/preflight"), bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header, err
}

func (c *soakClient) get(path string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), soakRequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.s.URL(path), nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// check asks for tool.echo under preflightID. allowed is meaningful only
// when err is nil.
func (c *soakClient) check(preflightID, requestID string) (allowed bool, reason string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), soakRequestTimeout)
	defer cancel()
	resp, err := c.authz.Check(ctx, ToolCheck("tool.echo", map[string]any{"msg": "soak"}, requestID,
		map[string]string{"x-autonomy-preflight-id": preflightID}))
	if err != nil {
		return false, "", err
	}
	if codes.Code(resp.GetStatus().GetCode()) == codes.OK {
		return true, "", nil
	}
	return false, resp.GetStatus().GetMessage(), nil
}

type soakDecision struct {
	PreflightID string `json:"preflight_id"`
	Outcome     string `json:"outcome"`
	Reason      string `json:"reason"`
	Attempt     int    `json:"attempt"`
}

// soakEchoRequest is a passing preflight of steps tool.echo steps.
func soakEchoRequest(session string, steps int) []byte {
	var plan []any
	for i := range steps {
		plan = append(plan, map[string]any{"id": "s" + strconv.Itoa(i+1), "kind": "tool.echo", "zone": "default",
			"args": map[string]any{"msg": "soak"}})
	}
	b, _ := json.Marshal(map[string]any{
		"intent":  map[string]any{"summary": "soak echo", "plan_hash": "plan-" + session},
		"plan":    map[string]any{"steps": plan},
		"context": map[string]any{"actor": map[string]any{"id": "user:soak", "session_id": session}},
	})
	return b
}

// soakRepairRequest asks for customer.read.v3 in a zone it is not offered
// in: the bounded zone hint makes it repair_required, and repeating it
// spends the session's repair budget.
func soakRepairRequest(session string) []byte {
	b, _ := json.Marshal(map[string]any{
		"intent": map[string]any{"summary": "soak repair", "plan_hash": "plan-" + session},
		"plan": map[string]any{"steps": []any{map[string]any{"id": "s1", "kind": "customer.read.v3",
			"zone": "retail", "args": map[string]any{"caseRef": "case:1"}}}},
		"context": map[string]any{"actor": map[string]any{"id": "user:soak", "session_id": session}},
	})
	return b
}

// soakIdemRequest is a passing tool.echo preflight carrying an envelope
// with idempotency key key.
func soakIdemRequest(key string, now time.Time) []byte {
	b, _ := json.Marshal(map[string]any{
		"intent": map[string]any{"summary": "soak idempotent", "plan_hash": "plan-" + key},
		"plan": map[string]any{"steps": []any{map[string]any{"id": "s1", "kind": "tool.echo", "zone": "default",
			"args": map[string]any{"msg": "soak"}}}},
		"context": map[string]any{
			"actor":   map[string]any{"id": "user:soak", "session_id": "session:" + key},
			"request": soakEnvelope(key, "tenant:soak", now),
		},
	})
	return b
}

// soakEnvelope is a valid aruntime.runtime-request.v1 envelope
// for a low-risk tool.echo call.
func soakEnvelope(key, tenant string, now time.Time) map[string]any {
	return map[string]any{
		"contractVersion": "aruntime.runtime-request.v1",
		"requestId":       "req_" + key,
		"correlationId":   "corr_" + key,
		"idempotencyKey":  "idem_" + key,
		"timestampUtc":    now.Format(time.RFC3339),
		"deadlineUtc":     now.Add(30 * time.Minute).Format(time.RFC3339),
		"actor":           map[string]any{"type": "user", "idRef": "user:soak"},
		"tenant":          map[string]any{"idRef": tenant, "region": "us-central"},
		"session":         map[string]any{"idRef": "session:" + key, "sequence": 1},
		"taskType":        "echo",
		"riskLevel":       "low",
		"input":           map[string]any{"msg": "soak"},
		"permissions":     []any{"read:echo"},
		"contextPolicy": map[string]any{"classificationMax": "internal", "citeSources": false,
			"allowExternalRetrieval": false, "allowedRepositories": []any{}, "maxContextTokens": 1000},
		"modelRouteConstraints": map[string]any{"allowHosted": true, "allowedRoutes": []any{"hosted-general-v3"},
			"deniedProviders": []any{}, "maxLatencyMs": 8000, "requiredCapabilities": []any{}},
		"allowedTools": []any{"tool.echo"},
		"toolPolicy": map[string]any{"defaultDecision": "deny", "maxCalls": 5, "allowSideEffects": false,
			"requiredPermissionClasses": []any{"read"}},
		"memoryPolicy": map[string]any{"readScopes": []any{"session"}, "writeScopes": []any{},
			"writeRequiresApproval": true, "ttlSeconds": 3600},
		"budget": map[string]any{"maxInputTokens": 1000, "maxOutputTokens": 100, "maxToolCalls": 4,
			"maxCostUsd": 1, "currency": "USD"},
		"approvalPolicy": map[string]any{"mode": "never", "requiredFor": []any{},
			"timeoutSeconds": 60, "authorityRefs": []any{}},
		"outputContract": map[string]any{"format": "text", "maxBytes": 1000, "requiresCitations": false},
		"traceSettings": map[string]any{"level": "standard", "redactInputs": true, "captureToolResults": false,
			"samplingDecision": "record-and-sample"},
		"dataClassification": "internal",
		"retentionPolicy": map[string]any{"policyId": "retention:soak", "days": 1,
			"storeRawInputs": false, "legalHold": false},
		"metadata": map[string]any{"channel": "soak"},
	}
}

// soakRun is the state of one soak.
type soakRun struct {
	t      *testing.T
	ledger *soakLedger
	seq    atomic.Int64
	start  time.Time
}

func (r *soakRun) nextID(prefix string, cycle int) string {
	return fmt.Sprintf("%s-%d-%d", prefix, cycle, r.seq.Add(1))
}

func TestCrashSoak(t *testing.T) {
	srv := StartServer(t, ServeOptions{Mode: "enforce"})
	crashSoak(t, 20, []*Server{srv}, nil)
}

// TestCrashSoakEtcd is the crash soak on the etcd backend: two replicas
// share one etcd, and each cycle drives one of them, kills it, checks its
// log (wal verify, and wal check-store against etcd), restarts it and
// checks what was acknowledged on the other. Every check of the soak holds
// across the two; SOAK_CYCLES and SOAK_SEED work as for TestCrashSoak
// (default 10 cycles, 3 with -short). CI runs it as
//
//	go test -count=1 -v -run '^TestCrashSoakEtcd$' ./e2e
func TestCrashSoakEtcd(t *testing.T) {
	c := etcdtest.StartT(t, etcdtest.Options{})
	reps := startReplicas(t, c.Endpoints(), 2)
	srvs := []*Server{reps[0].Server, reps[1].Server}
	names := map[string]string{reps[0].DataDir: reps[0].name, reps[1].DataDir: reps[1].name}
	var adopted, dropped float64
	t.Cleanup(func() {
		t.Logf("soak: restarted replicas took up %v frame copies a kill left past their log's head and dropped %v", adopted, dropped)
	})
	crashSoak(t, 10, srvs, func(l *soakLedger, cycle int, killed *Server) {
		for _, rec := range killed.LogLines("etcd: frame copies a crash left past the log's head") {
			a, _ := rec["adopted"].(float64)
			d, _ := rec["dropped"].(float64)
			adopted, dropped = adopted+a, dropped+d
		}
		// A replica killed at any moment leaves no record in etcd that
		// names a frame its log lacks: its frames are durable before their
		// copies and bindings. (A marker may lack its frames: the marker
		// commits first, and the consume was never acknowledged.)
		res := RunAutonomy(t, "wal", "check-store", "--data-dir", killed.DataDir, "--etcd-endpoints",
			strings.Join(c.Endpoints(), ","), "--replica-id", names[killed.DataDir], "--json")
		var rep struct {
			Problems []struct {
				Problem string `json:"problem"`
				Seq     uint64 `json:"seq"`
				Key     string `json:"key"`
			} `json:"problems"`
		}
		if err := json.Unmarshal([]byte(res.Stdout), &rep); err != nil || res.Code > 1 {
			l.violate("cycle %d: wal check-store exit %d: %s%s", cycle, res.Code, res.Stdout, res.Stderr)
			return
		}
		for _, p := range rep.Problems {
			switch p.Problem {
			case "copy_without_frame", "copy_differs", "binding_without_frame":
				l.violate("cycle %d: wal check-store: %s seq %d key %s", cycle, p.Problem, p.Seq, p.Key)
			}
		}
	})
}

// crashSoak runs the soak over srvs, killing srvs[i] in cycle i (mod
// len(srvs)) and checking on the next one; check, when set, runs on each
// killed process's data directory after wal verify.
func crashSoak(t *testing.T, cycles int, srvs []*Server, check func(l *soakLedger, cycle int, killed *Server)) {
	if testing.Short() {
		cycles = 3
	}
	if v := os.Getenv("SOAK_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SOAK_CYCLES=%q is not a positive number", v)
		}
		cycles = n
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("SOAK_SEED=%q: %v", v, err)
		}
		seed = n
	}
	t.Logf("soak: %d cycles over %d processes, seed %d (SOAK_SEED=%d replays the choices)", cycles, len(srvs), seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x50a6))
	run := &soakRun{t: t, ledger: &soakLedger{preflights: map[string]*soakPreflight{}}, start: time.Now()}
	for i := range 12 {
		run.ledger.sessions = append(run.ledger.sessions, &soakSession{id: fmt.Sprintf("soak-repair-%d", i)})
	}

	kills, passed := 0, 0
	for cycle := 1; cycle <= cycles; cycle++ {
		before := len(run.ledger.violations)
		i := (cycle - 1) % len(srvs)
		srv := srvs[i]
		c := newSoakClient(t, srv)
		uptime := soakMinUptime + time.Duration(rng.Int64N(int64(soakMaxUptime-soakMinUptime)))
		run.drive(c, cycle, uptime, rng.Uint64(), func() { srv.Kill() })
		kills++

		res := RunAutonomy(t, "wal", "verify", "--data-dir", srv.DataDir)
		if res.Code != 0 || !strings.Contains(res.Stdout, "hash chain intact") {
			run.ledger.violate("cycle %d: wal verify exit %d: %s%s", cycle, res.Code, res.Stdout, res.Stderr)
		}
		if check != nil {
			check(run.ledger, cycle, srv)
		}
		srvs[i] = srv.Restart()
		run.verify(newSoakClient(t, srvs[(i+1)%len(srvs)]), cycle, rng, false)
		if len(run.ledger.violations) == before {
			passed++
		}
		t.Logf("soak: cycle %d: up %s, %d preflights, %d allows acknowledged so far", cycle,
			uptime.Round(time.Millisecond), run.ledger.preflightsAcked.Load(), run.ledger.allows.Load())
	}
	run.verify(newSoakClient(t, srvs[0]), cycles+1, rng, true)
	for _, srv := range srvs {
		if code := srv.Stop(); code != 0 {
			run.ledger.violate("graceful stop exited %d", code)
		}
		if res := RunAutonomy(t, "wal", "verify", "--data-dir", srv.DataDir); res.Code != 0 {
			run.ledger.violate("final wal verify exit %d: %s", res.Code, res.Stdout)
		}
	}

	l := run.ledger
	acked := l.preflightsAcked.Load() + l.allows.Load() + l.replayDenies.Load() + l.repeats.Load() +
		l.repairsAcked.Load() + l.idemReplays.Load() + l.reads.Load()
	for i, v := range l.violations {
		if i == 20 {
			t.Errorf("… and %d more violations", len(l.violations)-i)
			break
		}
		t.Errorf("violation: %s", v)
	}
	t.Logf("soak: %d passed, %d failed; %d kills; %d operations acknowledged (%d preflights, %d allows, "+
		"%d replays denied, %d repeat allows, %d repair attempts, %d idempotent replays, %d reads), "+
		"%d unacknowledged; %d violations; %s",
		passed, cycles-passed, kills, acked, l.preflightsAcked.Load(), l.allows.Load(), l.replayDenies.Load(),
		l.repeats.Load(), l.repairsAcked.Load(), l.idemReplays.Load(), l.reads.Load(), l.unacked.Load(),
		len(l.violations), time.Since(run.start).Round(time.Second))
	if acked == 0 || l.allows.Load() == 0 {
		t.Fatal("the soak acknowledged nothing: the driver never reached the service")
	}
}

// newSoakClient returns a client of s whose calls report transport errors
// instead of failing the test: the process may die under it.
func newSoakClient(t testing.TB, s *Server) *soakClient {
	return &soakClient{s: s, authz: s.Authz(t), http: &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: soakWorkers * 2}}}
}

// drive runs the workers against c for uptime, then kills the process
// while they are still sending, and waits for them.
func (r *soakRun) drive(c *soakClient, cycle int, uptime time.Duration, seed uint64, kill func()) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range soakWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				r.operation(c, cycle, rng)
			}
		}()
	}
	timer := time.NewTimer(uptime)
	<-timer.C
	kill()
	close(stop)
	wg.Wait()
}

// operation sends one random piece of traffic and records what was
// acknowledged.
func (r *soakRun) operation(c *soakClient, cycle int, rng *rand.Rand) {
	l := r.ledger
	switch n := rng.IntN(100); {
	case n < 50: // a one- or two-step preflight, used at once, sometimes replayed
		steps := 1
		if n < 12 {
			steps = 2
		}
		p := r.preflight(c, cycle, r.nextID("soak-echo", cycle), steps)
		if p == nil {
			return
		}
		for i := range steps + 1 {
			reqID := r.nextID("req", cycle)
			r.checkAndRecord(c, p.id, reqID)
			if i == 0 && rng.IntN(4) == 0 { // Envoy retrying the same request
				r.checkAndRecord(c, p.id, reqID)
			}
		}
	case n < 72: // a deliberate replay of something allowed earlier, maybe before a kill
		for _, p := range l.pick(rng, 1, func(p *soakPreflight) bool { return p.steps > 0 }) {
			r.checkAndRecord(c, p.id, r.nextID("replay", cycle))
		}
	case n < 84: // a repair session attempt
		r.repair(c, l.sessions[rng.IntN(len(l.sessions))], cycle)
	default: // an idempotent preflight, sent twice
		key := r.nextID("soak-idem", cycle)
		body := soakIdemRequest(key, time.Now().UTC().Truncate(time.Second))
		status, out, _, err := c.post(body)
		if err != nil || status != http.StatusOK {
			l.unacked.Add(1)
			return
		}
		var d soakDecision
		if json.Unmarshal(out, &d) != nil || d.Outcome != "pass" {
			l.violate("idempotent preflight %s: %s", key, out)
			return
		}
		l.addPreflight(&soakPreflight{id: d.PreflightID, body: out, steps: 1, cycle: cycle, allowed: map[string]bool{}})
		it := &soakIdem{body: body, preflightID: d.PreflightID, decision: out, cycle: cycle}
		l.mu.Lock()
		l.idem = append(l.idem, it)
		l.mu.Unlock()
		l.idemAcked.Add(1)
		r.idemReplay(c, it)
	}
}

// preflight posts a passing echo preflight and records it when answered.
func (r *soakRun) preflight(c *soakClient, cycle int, session string, steps int) *soakPreflight {
	status, out, _, err := c.post(soakEchoRequest(session, steps))
	if err != nil || status != http.StatusOK {
		r.ledger.unacked.Add(1)
		return nil
	}
	var d soakDecision
	if err := json.Unmarshal(out, &d); err != nil || d.Outcome != "pass" {
		r.ledger.violate("echo preflight %s answered %s", session, out)
		return nil
	}
	p := &soakPreflight{id: d.PreflightID, body: out, steps: steps, cycle: cycle, allowed: map[string]bool{}}
	r.ledger.addPreflight(p)
	return p
}

func (r *soakRun) checkAndRecord(c *soakClient, preflightID, requestID string) (allowed bool, reason string, ok bool) {
	allowed, reason, err := c.check(preflightID, requestID)
	if err != nil {
		r.ledger.unacked.Add(1)
		return false, "", false
	}
	if allowed {
		r.ledger.allowed(preflightID, requestID)
	} else if reason == "contract: preflight_replay" {
		r.ledger.replayDenies.Add(1)
	} else {
		r.ledger.violate("check %s under %s denied %q, want allow or contract: preflight_replay", requestID, preflightID, reason)
	}
	return allowed, reason, true
}

// repair sends one attempt of a repair session (max_repair_attempts 1):
// attempts 1 and 2 are repair_required, later ones repair_exhausted, and
// attempts only ever grow.
func (r *soakRun) repair(c *soakClient, s *soakSession, cycle int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	status, out, _, err := c.post(soakRepairRequest(s.id))
	if err != nil || status != http.StatusOK {
		r.ledger.unacked.Add(1)
		return
	}
	var d soakDecision
	if err := json.Unmarshal(out, &d); err != nil {
		r.ledger.violate("repair session %s answered %s", s.id, out)
		return
	}
	r.ledger.repairsAcked.Add(1)
	r.ledger.addPreflight(&soakPreflight{id: d.PreflightID, body: out, cycle: cycle, allowed: map[string]bool{}})
	switch {
	case d.Attempt <= s.maxAcked:
		r.ledger.violate("repair session %s: attempt %d after attempt %d was acknowledged (budget lost)", s.id, d.Attempt, s.maxAcked)
	case s.exhausted && d.Reason != "contract: repair_exhausted":
		r.ledger.violate("repair session %s: exhausted, then answered %s (%s)", s.id, d.Outcome, d.Reason)
	case d.Attempt <= 2 && d.Outcome != "repair_required":
		r.ledger.violate("repair session %s: attempt %d answered %s (%s)", s.id, d.Attempt, d.Outcome, d.Reason)
	case d.Attempt > 2 && (d.Outcome != "deny" || d.Reason != "contract: repair_exhausted"):
		r.ledger.violate("repair session %s: attempt %d answered %s (%s), want repair_exhausted", s.id, d.Attempt, d.Outcome, d.Reason)
	}
	s.maxAcked = max(s.maxAcked, d.Attempt)
	if d.Reason == "contract: repair_exhausted" {
		s.exhausted = true
	}
}

// idemReplay re-sends an idempotent request: same preflight id, same bytes.
func (r *soakRun) idemReplay(c *soakClient, it *soakIdem) {
	status, out, h, err := c.post(it.body)
	if err != nil {
		r.ledger.unacked.Add(1)
		return
	}
	if status == http.StatusConflict && strings.Contains(string(out), "idempotency-in-progress") {
		return
	}
	if status != http.StatusOK || !bytes.Equal(out, it.decision) || h.Get("Idempotent-Replayed") != "true" {
		r.ledger.violate("idempotent replay of %s: %d %q %s, want the recorded bytes again", it.preflightID,
			status, h.Get("Idempotent-Replayed"), out)
		return
	}
	r.ledger.idemReplays.Add(1)
}

// verify runs after a restart: reads back what was acknowledged, replays
// allowed preflights, and re-checks exhausted sessions and idempotency
// keys. With all set it checks every record instead of a sample.
func (r *soakRun) verify(c *soakClient, cycle int, rng *rand.Rand, all bool) {
	l := r.ledger
	recent := func(p *soakPreflight) bool { return all || p.cycle == cycle }
	l.mu.Lock()
	var reads []*soakPreflight
	for _, id := range l.order {
		if p := l.preflights[id]; recent(p) {
			reads = append(reads, p)
		}
	}
	idems := make([]*soakIdem, 0, len(l.idem))
	for _, it := range l.idem {
		if all || it.cycle == cycle {
			idems = append(idems, it)
		}
	}
	l.mu.Unlock()
	if !all {
		reads = append(reads, l.pick(rng, soakSample, func(*soakPreflight) bool { return true })...)
	}
	for _, p := range reads {
		status, body, err := c.get("/v1/preflight/" + p.id)
		if err != nil || status != http.StatusOK || !bytes.Equal(body, p.body) {
			l.violate("after restart %d: GET /v1/preflight/%s: %d %v, bytes equal %v", cycle, p.id, status, err, bytes.Equal(body, p.body))
			continue
		}
		l.reads.Add(1)
	}
	// Everything allowed before the kill stays consumed: checkAndRecord
	// counts a deny other than preflight_replay, or an allow past the
	// preflight's steps, as a violation.
	consumed := l.pick(rng, soakSample, func(p *soakPreflight) bool { return len(p.allowed) >= p.steps && p.steps > 0 })
	for _, p := range consumed {
		r.checkAndRecord(c, p.id, r.nextID("after-restart", cycle))
	}
	for _, s := range l.sessions {
		if s.exhausted || all {
			r.repair(c, s, cycle)
		}
	}
	for _, it := range idems {
		r.idemReplay(c, it)
	}
}
