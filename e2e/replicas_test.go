package e2e

// Several `autonomy serve` processes sharing one etcd (docs/DEPLOY.md): a
// preflight on one replica binds on every other, a step is consumed once
// across all of them, a replica's death loses nothing it acknowledged, and
// every replica fails closed while etcd cannot answer.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/contractrefine/autonomy/internal/etcdtest"
	"github.com/contractrefine/autonomy/wal"
)

// replica is one serve process of a shared-store deployment.
type replica struct {
	*Server
	name  string
	authz authv3.AuthorizationClient
}

// startReplicas starts n replicas in enforce mode on the endpoints, named
// replica-a, replica-b, …
func startReplicas(t *testing.T, endpoints []string, n int, extra ...string) []*replica {
	t.Helper()
	rs := launchReplicas(t, endpoints, n, extra...)
	for _, r := range rs {
		r.WaitReadyz(http.StatusOK, "its start")
	}
	return rs
}

// launchReplicas is startReplicas without waiting for them to be ready: a
// replica on etcd listens before it has heard from etcd (and settled what
// a crash may have left there), unready and answering 503 until then.
func launchReplicas(t *testing.T, endpoints []string, n int, extra ...string) []*replica {
	t.Helper()
	cfg := writeFile(t, "replicas.yaml", "contract_refine:\n  mode: enforce\nstore:\n  etcd:\n    request_timeout: 1s\n    dial_timeout: 1s\n")
	out := make([]*replica, n)
	for i := range out {
		name := fmt.Sprintf("replica-%c", 'a'+i)
		args := append([]string{"--etcd-endpoints", strings.Join(endpoints, ","), "--replica-id", name}, extra...)
		s := StartServer(t, ServeOptions{Config: cfg, Args: args})
		out[i] = &replica{Server: s, name: name, authz: s.Authz(t)}
	}
	return out
}

// getBody GETs a URL and returns the status and the body.
func getBody(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// preflightOn posts a passing preflight to r and returns the decision and
// the body exactly as answered.
func preflightOn(t *testing.T, r *replica, session string) (decision, []byte) {
	t.Helper()
	status, body, _ := PostJSON(t, r.URL("/v1/preflight"), echoPreflight(session))
	var d decision
	if err := json.Unmarshal(body, &d); err != nil || status != http.StatusOK || d.Outcome != "pass" {
		t.Fatalf("preflight on %s: %d %s (%v)", r.name, status, body, err)
	}
	return d, body
}

// frameReplicas lists, per frame of an audit join, kind@replica.
func frameReplicas(frames []wal.Frame) []string {
	var out []string
	for _, f := range frames {
		var rep string
		f.Attr("replica", &rep)
		out = append(out, f.Kind+"@"+rep)
	}
	return out
}

func TestReplicasShareOneStore(t *testing.T) {
	c := etcdtest.StartT(t, etcdtest.Options{})
	rs := startReplicas(t, c.Endpoints(), 3)
	a, b, cc := rs[0], rs[1], rs[2]

	// Preflight on A, consume on B, replay on C, the retry of B's request on C.
	d, body := preflightOn(t, a, "session:replicas-1")
	for _, r := range rs {
		status, got := getBody(t, r.URL("/v1/preflight/"+d.PreflightID))
		if status != http.StatusOK || !bytes.Equal(got, body) {
			t.Fatalf("GET /v1/preflight on %s: %d\n%s\nwant the bytes A answered\n%s", r.name, status, got, body)
		}
	}
	wantAllow(t, checkEcho(t, b.authz, d.PreflightID, "req-b"), d.AuditID)
	wantDeny(t, checkEcho(t, cc.authz, d.PreflightID, "req-c"), codes.PermissionDenied, 403, "contract: preflight_replay")
	wantDeny(t, checkEcho(t, a.authz, d.PreflightID, "req-a"), codes.PermissionDenied, 403, "contract: preflight_replay")
	wantAllow(t, checkEcho(t, cc.authz, d.PreflightID, "req-b"), d.AuditID)

	// The audit join is the same on every replica and names each writer.
	_, joinA := getBody(t, a.URL("/v1/audit/"+d.AuditID))
	for _, r := range rs[1:] {
		if _, got := getBody(t, r.URL("/v1/audit/"+d.AuditID)); !bytes.Equal(got, joinA) {
			t.Fatalf("audit join on %s differs from A's:\n%s\n%s", r.name, got, joinA)
		}
	}
	got := strings.Join(frameReplicas(auditFrames(t, a.Server, d.AuditID)), " ")
	want := "autonomy.preflight@replica-a autonomy.decision@replica-b autonomy.decision@replica-c autonomy.decision@replica-a autonomy.decision@replica-c"
	if got != want {
		t.Fatalf("audit join frames:\n%s\nwant\n%s", got, want)
	}

	// 64 concurrent Checks on one id spread over the three: one allow.
	for round := range 3 {
		d, _ := preflightOn(t, rs[round%3], fmt.Sprintf("session:replicas-race-%d", round))
		const n = 64
		var allows, replays, other atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				resp, err := rs[i%3].authz.Check(t.Context(), ToolCheck("tool.echo", map[string]any{"msg": "hi"},
					fmt.Sprintf("req-race-%d-%d", round, i), map[string]string{"x-autonomy-preflight-id": d.PreflightID}))
				switch {
				case err != nil:
					other.Add(1)
				case codes.Code(resp.GetStatus().GetCode()) == codes.OK:
					allows.Add(1)
				case strings.Contains(resp.GetDeniedResponse().GetBody(), "preflight_replay"):
					replays.Add(1)
				default:
					other.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if allows.Load() != 1 || replays.Load() != n-1 {
			t.Fatalf("round %d: %d concurrent checks over 3 replicas: %d allowed, %d replays, %d other; want 1 and %d",
				round, n, allows.Load(), replays.Load(), other.Load(), n-1)
		}
	}

	// kill -9 of the replica that answered a preflight: the others still
	// consume it once and serve its decision and its frames.
	d2, body2 := preflightOn(t, a, "session:replicas-kill")
	a.Kill()
	wantAllow(t, checkEcho(t, b.authz, d2.PreflightID, "req-after-kill"), d2.AuditID)
	wantDeny(t, checkEcho(t, cc.authz, d2.PreflightID, "req-after-kill-2"), codes.PermissionDenied, 403, "contract: preflight_replay")
	for _, r := range rs[1:] {
		if status, got := getBody(t, r.URL("/v1/preflight/"+d2.PreflightID)); status != http.StatusOK || !bytes.Equal(got, body2) {
			t.Fatalf("GET /v1/preflight on %s after A's kill: %d %s", r.name, status, got)
		}
		kinds := frameReplicas(auditFrames(t, r.Server, d2.AuditID))
		if len(kinds) != 3 || kinds[0] != "autonomy.preflight@replica-a" {
			t.Fatalf("audit join on %s after A's kill: %v, want A's preflight and two decisions", r.name, kinds)
		}
	}
	for _, r := range rs {
		if r != a {
			r.Stop()
		}
		if res := RunAutonomy(t, "wal", "verify", "--data-dir", r.DataDir); res.Code != 0 {
			t.Fatalf("wal verify of %s: exit %d\n%s%s", r.name, res.Code, res.Stdout, res.Stderr)
		}
	}
}

// TestReplicasFailClosedWhileEtcdDown: with etcd stopped every answer that
// needs it is a 503, /readyz says so, one log line marks the change; once
// etcd is back the replica serves again by itself.
func TestReplicasFailClosedWhileEtcdDown(t *testing.T) {
	c := etcdtest.StartT(t, etcdtest.Options{})
	r := startReplicas(t, c.Endpoints(), 1)[0]
	d, _ := preflightOn(t, r, "session:etcd-down")
	// The binding is cached now; the consume still needs etcd.
	wantDeny(t, checkEcho(t, r.authz, d.PreflightID+"x", "req-unknown"), codes.PermissionDenied, 403, "contract: preflight_required")

	c.Members[0].Stop()
	// A call that needs no preflight is decided by the policy alone; its
	// frame's copy to etcd fails, so the caller gets 503, and the last
	// decision frame of the call must say so.
	free, err := r.authz.Check(t.Context(), ToolCheck("tool.echo", map[string]any{"msg": "hi"}, "req-free", nil))
	if err != nil {
		t.Fatal(err)
	}
	freeAudit := wantDeny(t, free, codes.PermissionDenied, 503, "contract: verifier_unavailable")
	wantDeny(t, checkEcho(t, r.authz, d.PreflightID, "req-down"), codes.PermissionDenied, 503, "contract: verifier_unavailable")
	status, body, _ := PostJSON(t, r.URL("/v1/preflight"), echoPreflight("session:etcd-down-2"))
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "verifier-unavailable") {
		t.Fatalf("preflight with etcd down: %d %s, want 503 verifier-unavailable", status, body)
	}
	// gRPC health, which Envoy's and Kubernetes' checks read, says so as
	// soon as a request found etcd away, not at the next background probe.
	if got := grpcHealth(t, r.Server); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("gRPC health after calls refused for etcd: %v, want NOT_SERVING", got)
	}
	// The reason names etcd first, also while the log is held for it.
	if status, body := getBody(t, r.URL("/readyz")); status != http.StatusServiceUnavailable || !strings.Contains(string(body), `"reason":"etcd: `) {
		t.Fatalf("/readyz with etcd down: %d %s, want 503 naming etcd", status, body)
	}
	if n := len(r.WaitLog("etcd unavailable; denying until it answers")); n != 1 {
		t.Fatalf("%d log lines for etcd becoming unavailable, want 1:\n%s", n, r.Logs())
	}
	_, metrics := getBody(t, r.URL("/metrics"))
	if !strings.Contains(string(metrics), "autonomy_store_available 0") {
		t.Fatalf("autonomy_store_available is not 0 with etcd down")
	}

	if err := c.Members[0].Start(); err != nil {
		t.Fatal(err)
	}
	r.WaitReadyz(http.StatusOK, "etcd's return")
	wantAllow(t, checkEcho(t, r.authz, d.PreflightID, "req-back"), d.AuditID)
	if n := len(r.WaitLog("etcd available again")); n != 1 {
		t.Fatalf("%d log lines for etcd's return, want 1", n)
	}
	frames := auditFrames(t, r.Server, freeAudit)
	if len(frames) == 0 {
		t.Fatal("no decision frame of the call refused while etcd was down")
	}
	var lastStatus int
	var lastReason string
	last := frames[len(frames)-1]
	last.Attr("status", &lastStatus)
	last.Attr("reason", &lastReason)
	if last.Kind != wal.KindDecision || lastStatus != 503 || lastReason != "contract: verifier_unavailable" {
		t.Fatalf("the last decision frame of a call answered 503 says %s %d %q (%d frames)", last.Kind, lastStatus, lastReason, len(frames))
	}
}

// TestReplicaStartedWithEtcdDown: a replica started while etcd is down
// listens at once, before it has heard from etcd (a liveness probe's
// /healthz must not wait on etcd's request timeouts), is unready with etcd
// named as the reason (not its log, which waits for etcd to settle what a
// crash may have left), and serves once etcd is up.
func TestReplicaStartedWithEtcdDown(t *testing.T) {
	c := etcdtest.StartT(t, etcdtest.Options{})
	c.Members[0].Stop()
	r := launchReplicas(t, c.Endpoints(), 1)[0]
	if status, _ := getBody(t, r.URL("/healthz")); status != http.StatusOK {
		t.Fatalf("/healthz of a replica started with etcd down: %d, want 200", status)
	}
	logs := r.Logs()
	if li, ei := strings.Index(logs, `"msg":"listening"`), strings.Index(logs, `"msg":"etcd unavailable`); li < 0 || (ei >= 0 && ei < li) {
		t.Fatalf("the replica heard etcd was down (at %d) before it listened (at %d):\n%s", ei, li, logs)
	}
	if status, body := getBody(t, r.URL("/readyz")); status != http.StatusServiceUnavailable || !strings.Contains(string(body), `"reason":"etcd: `) {
		t.Fatalf("/readyz of a replica started with etcd down: %d %s, want 503 naming etcd", status, body)
	}
	if err := c.Members[0].Start(); err != nil {
		t.Fatal(err)
	}
	r.WaitReadyz(http.StatusOK, "etcd's start")
	// Its first readiness is not a return.
	r.WaitLog("service ready")
	if n := len(r.LogLines("service ready again")); n != 0 {
		t.Fatalf("%d \"service ready again\" lines from a replica that was never ready before:\n%s", n, r.Logs())
	}
}

// TestDuplicateReplicaIDIsUnready: a second process with a live replica's
// id and another data dir is not ready, and its log names the conflict,
// not etcd as unreachable. Callers that reach it all the same (a sidecar's
// agent, the HTTP API) get 503s: it decides nothing under the other's name.
func TestDuplicateReplicaIDIsUnready(t *testing.T) {
	c := etcdtest.StartT(t, etcdtest.Options{})
	a := startReplicas(t, c.Endpoints(), 1)[0]
	b := launchReplicas(t, c.Endpoints(), 1)[0]
	status, body := getBody(t, b.URL("/readyz"))
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "replica_id") {
		t.Fatalf("/readyz of a second replica-a: %d %s, want 503 naming replica_id", status, body)
	}
	b.WaitLog("etcd: another live process holds this replica_id; not ready until it is gone: give each replica its own id")
	if logs := b.Logs(); strings.Contains(logs, "does not answer yet") {
		t.Fatalf("the second replica-a's log should name the conflict and not blame etcd:\n%s", logs)
	}
	if status, body, _ := PostJSON(t, b.URL("/v1/preflight"), echoPreflight("session:dup")); status != http.StatusServiceUnavailable ||
		!strings.Contains(string(body), "verifier-unavailable") {
		t.Fatalf("a preflight on the second replica-a: %d %s, want 503 verifier-unavailable", status, body)
	}
	d, _ := preflightOn(t, a, "session:dup")
	wantDeny(t, checkEcho(t, b.authz, d.PreflightID, "req-dup"), codes.PermissionDenied, 503, "contract: verifier_unavailable")
	wantAllow(t, checkEcho(t, a.authz, d.PreflightID, "req-a"), d.AuditID)
}

// TestReplicasOnEtcdBinary runs two replicas against an etcd server
// started from its own binary (Debian's etcd-server is 3.4).
func TestReplicasOnEtcdBinary(t *testing.T) {
	bin := NeedProgram(t, "etcd", "the etcd server binary (Debian package etcd-server)")
	c := etcdtest.StartT(t, etcdtest.Options{Kind: etcdtest.Binary, BinaryPath: bin})
	rs := startReplicas(t, c.Endpoints(), 2)
	d, body := preflightOn(t, rs[0], "session:etcd-binary")
	if status, got := getBody(t, rs[1].URL("/v1/preflight/"+d.PreflightID)); status != http.StatusOK || !bytes.Equal(got, body) {
		t.Fatalf("GET /v1/preflight on the other replica: %d %s", status, got)
	}
	wantAllow(t, checkEcho(t, rs[1].authz, d.PreflightID, "req-1"), d.AuditID)
	wantDeny(t, checkEcho(t, rs[0].authz, d.PreflightID, "req-2"), codes.PermissionDenied, 403, "contract: preflight_replay")
	wantAllow(t, checkEcho(t, rs[0].authz, d.PreflightID, "req-1"), d.AuditID)
	if kinds := frameReplicas(auditFrames(t, rs[0].Server, d.AuditID)); len(kinds) != 4 {
		t.Fatalf("audit join: %v, want the preflight and three decisions", kinds)
	}
}

// TestReplicasEtcdBytes measures what one preflight and its consume leave
// in etcd, key by key (docs/DEPLOY.md's capacity arithmetic uses it).
func TestReplicasEtcdBytes(t *testing.T) {
	c := etcdtest.StartT(t, etcdtest.Options{})
	r := startReplicas(t, c.Endpoints(), 1)[0]
	d, _ := preflightOn(t, r, "session:etcd-bytes")
	wantAllow(t, checkEcho(t, r.authz, d.PreflightID, "req-1"), d.AuditID)
	cli, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(t.Context(), "/contractrefine/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, kv := range resp.Kvs {
		n := len(kv.Key) + len(kv.Value)
		total += n
		t.Logf("%6d bytes  %s", n, kv.Key)
	}
	t.Logf("%d keys, %d bytes of keys and values for one one-step preflight and its consume", len(resp.Kvs), total)
	if len(resp.Kvs) < 5 || total > 16<<10 {
		t.Fatalf("%d keys, %d bytes: want the binding, outcome, marker and frame copies in under 16 KiB", len(resp.Kvs), total)
	}
}

// TestReplicasEtcdMemberKilledUnderLoad: two replicas on a three-member
// etcd; one member is killed with SIGKILL while preflights and consumes
// run. Every acknowledged preflight stays readable and consumable once,
// every acknowledged consume stays spent: no replay is admitted.
func TestReplicasEtcdMemberKilledUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three etcd processes")
	}
	c := etcdtest.StartT(t, etcdtest.Options{Members: 3, Kind: etcdtest.Process})
	rs := startReplicas(t, c.Endpoints(), 2)
	type acked struct {
		d        decision
		consumed bool
	}
	var mu sync.Mutex
	var done []acked
	const workers, perWorker = 4, 12
	var wg sync.WaitGroup
	killed := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				if w == 0 && i == perWorker/3 {
					c.Members[0].Kill() // may be the leader
					close(killed)
				}
				r, other := rs[(w+i)%2], rs[(w+i+1)%2]
				// A 503 (the election, or a log held until a cut
				// consume's copies are withdrawn) is not acknowledged;
				// the call is made again once the replica is ready, so
				// the load goes on past the outage however long it takes
				// here.
				var status int
				var body []byte
				for range 3 {
					status, body, _ = PostJSON(t, r.URL("/v1/preflight"), echoPreflight(fmt.Sprintf("session:kill-%d-%d", w, i)))
					if status != http.StatusServiceUnavailable {
						break
					}
					r.readyzWithin(http.StatusOK, startTimeout)
				}
				var d decision
				if status != http.StatusOK || json.Unmarshal(body, &d) != nil || d.Outcome != "pass" {
					continue // not acknowledged
				}
				resp, err := other.authz.Check(t.Context(), ToolCheck("tool.echo", map[string]any{"msg": "hi"},
					fmt.Sprintf("req-kill-%d-%d", w, i), map[string]string{"x-autonomy-preflight-id": d.PreflightID}))
				consumed := err == nil && codes.Code(resp.GetStatus().GetCode()) == codes.OK
				mu.Lock()
				done = append(done, acked{d: d, consumed: consumed})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	<-killed
	if len(done) < workers*perWorker/2 {
		t.Fatalf("only %d of %d preflights acknowledged with one etcd member of three down", len(done), workers*perWorker)
	}
	// A consume whose transaction was cut by the kill holds its replica's
	// log until the dropper has withdrawn its copies: both take writes
	// again once that is done.
	for _, r := range rs {
		r.WaitReadyz(http.StatusOK, "the kill of one etcd member of three")
	}
	for i, a := range done {
		r := rs[i%2]
		if status, _ := getBody(t, r.URL("/v1/preflight/"+a.d.PreflightID)); status != http.StatusOK {
			t.Fatalf("acknowledged preflight %s: GET answers %d on %s", a.d.PreflightID, status, r.name)
		}
		resp := checkEcho(t, r.authz, a.d.PreflightID, fmt.Sprintf("req-after-%d", i))
		allowed := codes.Code(resp.GetStatus().GetCode()) == codes.OK
		switch {
		case a.consumed && allowed:
			t.Fatalf("preflight %s: consumed before the kill, yet allowed again (a replay)", a.d.PreflightID)
		case a.consumed:
			wantDeny(t, resp, codes.PermissionDenied, 403, "contract: preflight_replay")
		case !allowed && !strings.Contains(resp.GetDeniedResponse().GetBody(), "preflight_replay"):
			// Not consumed before (or consumed but unacknowledged): now one
			// allow, or a replay when the unacknowledged consume committed.
			t.Fatalf("preflight %s: %s", a.d.PreflightID, resp.GetDeniedResponse().GetBody())
		}
	}
	t.Logf("%d preflights acknowledged across the kill of one etcd member of three", len(done))
}

// grpcHealth is the process's grpc.health.v1 status for the whole server.
func grpcHealth(t *testing.T, s *Server) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	conn, err := grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetStatus()
}

// TestRefusalWhileHeldIsInTheAudit: a consume whose transaction etcd may
// have taken when etcd went away leaves copies of its frames the log did
// not commit, and the log takes no frame until etcd answers. A refusal
// answered meanwhile names an audit id all the same; its frame waits, and
// is in the audit once etcd is back.
func TestRefusalWhileHeldIsInTheAudit(t *testing.T) {
	c := etcdtest.StartT(t, etcdtest.Options{Kind: etcdtest.Process})
	r := startReplicas(t, c.Endpoints(), 1)[0]
	d, _ := preflightOn(t, r, "session:held")
	// Frozen, etcd takes the consume's transaction and never answers it:
	// the replica cannot know whether etcd applied it.
	member := c.Members[0].Pid()
	if member <= 0 {
		t.Fatalf("the etcd member's process id is %d", member)
	}
	if err := syscall.Kill(member, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if err := syscall.Kill(member, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer thaw()
	wantDeny(t, checkEcho(t, r.authz, d.PreflightID, "req-down"), codes.PermissionDenied, 503, "contract: verifier_unavailable")
	r.WaitLog("wal: a commit whose frames were sent elsewhere failed; writes held until they are withdrawn")
	held, err := r.authz.Check(t.Context(), ToolCheck("tool.echo", map[string]any{"msg": "hi"}, "req-held", nil))
	if err != nil {
		t.Fatal(err)
	}
	heldAudit := wantDeny(t, held, codes.PermissionDenied, 503, "contract: verifier_unavailable")
	thaw()
	r.WaitReadyz(http.StatusOK, "etcd's return")
	r.WaitLog("etcd: refusals answered while the log was held are recorded")
	frames := auditFrames(t, r.Server, heldAudit)
	var status int
	var reason string
	if len(frames) == 1 {
		frames[0].Attr("status", &status)
		frames[0].Attr("reason", &reason)
	}
	if len(frames) != 1 || frames[0].Kind != wal.KindDecision || status != 503 || reason != "contract: verifier_unavailable" {
		t.Fatalf("the audit of the refusal answered while the log was held: %+v", frames)
	}
	r.Stop()
	if res := RunAutonomy(t, "wal", "verify", "--data-dir", r.DataDir); res.Code != 0 {
		t.Fatalf("wal verify: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
}
