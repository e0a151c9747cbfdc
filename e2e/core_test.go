package e2e

// The service core from the outside (issue 2): a passing preflight allows
// exactly one tool call over real gRPC, and that stays true after the
// binding cache forgets the id, after a graceful stop and after a SIGKILL;
// configuration errors stop startup naming the key and line; the WAL's hash
// chain names the first tampered frame.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc/codes"

	"github.com/contractrefine/autonomy/wal"
)

// echoPreflight is a PreflightRequest for one tool.echo step that passes
// against the default bundle.
func echoPreflight(session string) map[string]any {
	return map[string]any{
		"intent": map[string]any{"summary": "echo a greeting", "plan_hash": "plan-" + session},
		"plan": map[string]any{"steps": []any{map[string]any{
			"id": "s1", "kind": "tool.echo", "zone": "default", "args": map[string]any{"msg": "hi"}}}},
		"context": map[string]any{"actor": map[string]any{"id": "user:example", "session_id": session}},
	}
}

type decision struct {
	PreflightID string `json:"preflight_id"`
	AuditID     string `json:"audit_id"`
	Outcome     string `json:"outcome"`
	Reason      string `json:"reason"`
}

// passPreflight posts a passing tool.echo preflight and returns its decision.
func passPreflight(t *testing.T, s *Server, session string) decision {
	t.Helper()
	status, body, _ := PostJSON(t, s.URL("/v1/preflight"), echoPreflight(session))
	var d decision
	if err := json.Unmarshal(body, &d); err != nil || status != http.StatusOK || d.Outcome != "pass" {
		t.Fatalf("preflight: %d %s (%v)", status, body, err)
	}
	return d
}

// checkEcho runs one ext_authz Check for POST /v1/tool tool.echo under the
// preflight id and request id.
func checkEcho(t *testing.T, c authv3.AuthorizationClient, preflightID, requestID string) *authv3.CheckResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Check(ctx, ToolCheck("tool.echo", map[string]any{"msg": "hi"}, requestID,
		map[string]string{"x-autonomy-preflight-id": preflightID}))
	if err != nil {
		t.Fatalf("Check %s: %v", requestID, err)
	}
	return resp
}

func wantAllow(t *testing.T, resp *authv3.CheckResponse, auditID string) {
	t.Helper()
	if codes.Code(resp.GetStatus().GetCode()) != codes.OK || resp.GetOkResponse() == nil {
		t.Fatalf("want allow, got %v %s", codes.Code(resp.GetStatus().GetCode()), resp.GetDeniedResponse().GetBody())
	}
	var got string
	for _, h := range resp.GetOkResponse().GetHeaders() {
		if h.GetHeader().GetKey() == "x-autonomy-audit-id" {
			got = h.GetHeader().GetValue()
		}
	}
	if got != auditID {
		t.Fatalf("x-autonomy-audit-id = %q, want the preflight's %q", got, auditID)
	}
	if r := resp.GetDynamicMetadata().GetFields()["autonomy"].GetStructValue().GetFields()["reason"].GetStringValue(); r != "contract: passed" {
		t.Fatalf("dynamic metadata reason = %q", r)
	}
}

func wantDeny(t *testing.T, resp *authv3.CheckResponse, code codes.Code, httpStatus int, reason string) (auditID string) {
	t.Helper()
	if got := codes.Code(resp.GetStatus().GetCode()); got != code || resp.GetDeniedResponse() == nil {
		t.Fatalf("want %v deny %q, got %v %v", code, reason, got, resp)
	}
	if got := int(resp.GetDeniedResponse().GetStatus().GetCode()); got != httpStatus {
		t.Fatalf("denied status %d, want %d", got, httpStatus)
	}
	var body struct {
		Error struct {
			Reason  string `json:"reason"`
			AuditID string `json:"audit_id"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(resp.GetDeniedResponse().GetBody()), &body); err != nil || body.Error.Reason != reason {
		t.Fatalf("deny body %s, want reason %q (%v)", resp.GetDeniedResponse().GetBody(), reason, err)
	}
	return body.Error.AuditID
}

// auditFrames reads GET /v1/audit/{id}.
func auditFrames(t *testing.T, s *Server, auditID string) []wal.Frame {
	t.Helper()
	resp, err := http.Get(s.URL("/v1/audit/" + auditID))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var join struct {
		Frames []wal.Frame `json:"frames"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&join); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/audit/%s: %d %v", auditID, resp.StatusCode, err)
	}
	return join.Frames
}

// metricFamilies reads s's /metrics; nil when it answers other than 200.
func metricFamilies(t *testing.T, s *Server) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(s.URL("/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return families
}

// cacheMisses reads autonomy_binding_cache_lookups_total{result="miss"}
// from /metrics; ok is false when the server does not export it.
func cacheMisses(t *testing.T, s *Server) (float64, bool) {
	t.Helper()
	for _, m := range metricFamilies(t, s)["autonomy_binding_cache_lookups_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "result" && l.GetValue() == "miss" {
				return m.GetCounter().GetValue(), true
			}
		}
	}
	return 0, false
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReplayDeniedAcrossCacheExpiryStopAndKill: one allow per one-step
// preflight, whatever happened to the cache or the process in between.
func TestReplayDeniedAcrossCacheExpiryStopAndKill(t *testing.T) {
	// A 1 s cache TTL lets the test outlive the cached binding quickly.
	cfg := writeFile(t, "autonomy.yaml", "contract_refine:\n  mode: enforce\n  binding_cache_ttl: 1s\n")
	s := StartServer(t, ServeOptions{Config: cfg})
	authz := s.Authz(t)
	d := passPreflight(t, s, "session:core-1")

	first := time.Now()
	wantAllow(t, checkEcho(t, authz, d.PreflightID, "req-1"), d.AuditID)
	wantDeny(t, checkEcho(t, authz, d.PreflightID, "req-2"), codes.PermissionDenied, 403, "contract: preflight_replay")
	// The preflight API hands the gate each binding it records, so the
	// first checks of a fresh id read nothing from the WAL.
	if m, ok := cacheMisses(t, s); ok && m != 0 {
		t.Errorf("%v binding-cache misses for the checks of a binding just recorded, want 0", m)
	}

	// Keep asking under fresh request ids until the cached binding has
	// lapsed and a check has read it from the WAL again (the cache-miss
	// counter moved): every answer, from the cache or not, is a replay.
	baseMisses, haveMetrics := cacheMisses(t, s)
	if !haveMetrics {
		t.Log("no binding-cache metric on /metrics: relying on outliving the TTL")
	}
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	n := 0
	for {
		if time.Since(first) > 1500*time.Millisecond {
			if !haveMetrics {
				break
			}
			if m, _ := cacheMisses(t, s); m > baseMisses {
				break
			}
		}
		if time.Since(first) > 20*time.Second {
			t.Fatal("no binding-cache miss within 20s of a 1s TTL")
		}
		<-tick.C
		n++
		wantDeny(t, checkEcho(t, authz, d.PreflightID, fmt.Sprintf("req-poll-%d", n)),
			codes.PermissionDenied, 403, "contract: preflight_replay")
	}
	// Envoy may ask twice for one request: the same request id is allowed again.
	wantAllow(t, checkEcho(t, authz, d.PreflightID, "req-1"), d.AuditID)

	if code := s.Stop(); code != 0 {
		t.Fatalf("SIGTERM: exit code %d, want 0", code)
	}
	if len(s.LogLines("stopped")) != 1 {
		t.Fatalf("no \"stopped\" log line after SIGTERM:\n%s", s.Logs())
	}

	// A second process on the same data dir.
	s2 := s.Restart()
	authz2 := s2.Authz(t)
	wantDeny(t, checkEcho(t, authz2, d.PreflightID, "req-after-stop"), codes.PermissionDenied, 403, "contract: preflight_replay")
	wantAllow(t, checkEcho(t, authz2, d.PreflightID, "req-1"), d.AuditID)

	// SIGKILL: no graceful close, the consume must already be on disk, and
	// so must the deny answered just before the kill.
	d2 := passPreflight(t, s2, "session:core-2")
	wantAllow(t, checkEcho(t, authz2, d2.PreflightID, "req-k1"), d2.AuditID)
	wantDeny(t, checkEcho(t, authz2, d2.PreflightID, "req-k2"), codes.PermissionDenied, 403, "contract: preflight_replay")
	s2.Kill()
	s3 := s2.Restart()
	authz3 := s3.Authz(t)
	killedDeny := false
	for _, f := range auditFrames(t, s3, d2.AuditID) {
		var outcome, rid string
		f.Attr("outcome", &outcome)
		f.Attr("request_id", &rid)
		killedDeny = killedDeny || f.Kind == wal.KindDecision && outcome == "deny" && rid == "req-k2"
	}
	if !killedDeny {
		t.Errorf("audit %s: the deny answered just before SIGKILL (req-k2) has no decision frame", d2.AuditID)
	}
	wantDeny(t, checkEcho(t, authz3, d2.PreflightID, "req-after-kill"), codes.PermissionDenied, 403, "contract: preflight_replay")
	wantDeny(t, checkEcho(t, authz3, d.PreflightID, "req-after-kill"), codes.PermissionDenied, 403, "contract: preflight_replay")

	// Across all three processes, each preflight allowed one request id only.
	for _, pf := range []struct{ auditID, requestID string }{{d.AuditID, "req-1"}, {d2.AuditID, "req-k1"}} {
		allows, denies := 0, 0
		for _, f := range auditFrames(t, s3, pf.auditID) {
			if f.Kind != wal.KindDecision {
				continue
			}
			var outcome, rid string
			f.Attr("outcome", &outcome)
			f.Attr("request_id", &rid)
			if outcome == "allow" {
				allows++
				if rid != pf.requestID {
					t.Errorf("audit %s: an allow for request %q, want only %q", pf.auditID, rid, pf.requestID)
				}
			} else {
				denies++
			}
		}
		if allows == 0 || denies == 0 {
			t.Errorf("audit %s: %d allow and %d deny frames", pf.auditID, allows, denies)
		}
	}
	t.Logf("%d replay checks until the 1s cache entry lapsed and the WAL was read again", n)

	if code := s3.Stop(); code != 0 {
		t.Fatalf("SIGTERM: exit code %d", code)
	}
	res := RunAutonomy(t, "wal", "verify", "--data-dir", s3.DataDir)
	if res.Code != 0 || !strings.Contains(res.Stdout, "hash chain intact") {
		t.Fatalf("wal verify after stop/kill/restart: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
}

// TestConfigErrorsStopStartup: a bad configuration fails serve and
// check-config before anything listens, naming the key and its line.
func TestConfigErrorsStopStartup(t *testing.T) {
	cases := map[string]struct {
		yaml string
		key  string
		line int
	}{
		"unknown top-level key": {"http_adr: 127.0.0.1:0\n", "http_adr", 1},
		"unknown nested key":    {"contract_refine:\n  mode: enforce\n  binding_windw: 5m\n", "binding_windw", 3},
		"mode not an enum":      {"data_dir: ./d\ncontract_refine:\n  mode: strict\n", "contract_refine.mode", 3},
		"ttl above ceiling":     {"contract_refine:\n  binding_cache_ttl: 2m\n", "contract_refine.binding_cache_ttl", 2},
		"ttl not a duration":    {"contract_refine:\n  binding_cache_ttl: soon\n", "contract_refine.binding_cache_ttl", 2},
		"attempts above max":    {"contract_refine:\n\n  max_repair_attempts: 4\n", "contract_refine.max_repair_attempts", 3},
		"body limit negative":   {"http:\n  max_body_bytes: -1\n", "http.max_body_bytes", 2},
		"attempts fractional":   {"contract_refine:\n  max_repair_attempts: 2.9\n", "contract_refine.max_repair_attempts", 2},
		"gate path with query":  {"gate:\n  path: /v1/tool?x\n", "gate.path", 2},
		"header name invalid":   {"gate:\n  kind_header: bad header\n", "gate.kind_header", 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := writeFile(t, "bad.yaml", tc.yaml)
			wantNamed := func(what, out string) {
				t.Helper()
				if !strings.Contains(out, tc.key) || !strings.Contains(out, fmt.Sprintf("line %d", tc.line)) {
					t.Errorf("%s: error does not name %q and line %d:\n%s", what, tc.key, tc.line, out)
				}
			}
			res := RunAutonomy(t, "check-config", "--config", cfg)
			if res.Code == 0 {
				t.Errorf("check-config exit 0 on a bad config:\n%s", res.Stdout)
			}
			wantNamed("check-config", res.Stderr)

			s, err := TryStartServer(t, ServeOptions{Config: cfg})
			if err == nil {
				t.Fatalf("serve came up on a bad config")
			}
			if s.code == 0 || len(s.LogLines("listening")) != 0 {
				t.Errorf("serve: exit %d, listening lines %d", s.code, len(s.LogLines("listening")))
			}
			wantNamed("serve", s.Logs())
		})
	}
}

// TestServeNamesBadFlag shows that a bad listen address given as a flag is
// refused before listening and named as the flag.
func TestServeNamesBadFlag(t *testing.T) {
	for _, args := range [][]string{{"--http-addr", "5"}, {"--grpc-addr", "127.0.0.1:abc"}, {"--http-addr", ""}} {
		res := RunAutonomy(t, append([]string{"serve", "--data-dir", t.TempDir()}, args...)...)
		if res.Code == 0 || !strings.Contains(res.Stderr, args[0]+":") || strings.Contains(res.Stderr, "listening") {
			t.Errorf("serve %v: exit %d\n%s", args, res.Code, res.Stderr)
		}
	}
}

func TestCheckConfigDefaultAndVersion(t *testing.T) {
	res := RunAutonomy(t, "check-config")
	if res.Code != 0 || !strings.Contains(res.Stdout, "configuration ok") {
		t.Fatalf("check-config on the defaults: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	res = RunAutonomy(t, "version")
	if res.Code != 0 || !regexp.MustCompile(`^autonomy \S+ \(go[0-9.]+ \w+/\w+\)\n$`).MatchString(res.Stdout) {
		t.Fatalf("version: exit %d %q", res.Code, res.Stdout)
	}
}

// TestWALVerifyNamesTamperedFrame edits one frame's bytes in the stopped
// server's bbolt file and expects `autonomy wal verify` to name its seq.
func TestWALVerifyNamesTamperedFrame(t *testing.T) {
	s := StartServer(t, ServeOptions{Mode: "enforce"})
	authz := s.Authz(t)
	d := passPreflight(t, s, "session:tamper")
	wantAllow(t, checkEcho(t, authz, d.PreflightID, "req-1"), d.AuditID)
	wantDeny(t, checkEcho(t, authz, d.PreflightID, "req-2"), codes.PermissionDenied, 403, "contract: preflight_replay")
	passPreflight(t, s, "session:tamper-after") // frames after the tampered one
	frames := auditFrames(t, s, d.AuditID)
	var target wal.Frame
	for _, f := range frames {
		if f.Kind == wal.KindDecision {
			target = f // the last decision: the replay deny
		}
	}
	if target.Seq == 0 {
		t.Fatalf("no decision frame in %+v", frames)
	}
	if code := s.Stop(); code != 0 {
		t.Fatalf("SIGTERM: exit code %d", code)
	}
	if res := RunAutonomy(t, "wal", "verify", "--data-dir", s.DataDir); res.Code != 0 {
		t.Fatalf("wal verify before tampering: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}

	// The frame is stored as its JSON; change one byte of its kind in every
	// copy in the file (bbolt may keep stale copies of a page).
	path := filepath.Join(s.DataDir, wal.FileName)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	old := []byte(fmt.Sprintf(`{"seq":%d,"kind":"autonomy.decision"`, target.Seq))
	if bytes.Count(raw, old) == 0 {
		t.Fatalf("frame %d not found in %s", target.Seq, path)
	}
	raw = bytes.ReplaceAll(raw, old, []byte(fmt.Sprintf(`{"seq":%d,"kind":"autonomy.decisioN"`, target.Seq)))
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	res := RunAutonomy(t, "wal", "verify", "--data-dir", s.DataDir)
	want := fmt.Sprintf("FAILED at seq %d: hash does not match the frame's contents (%d frames good before it)",
		target.Seq, target.Seq-1)
	if res.Code != 1 || !strings.Contains(res.Stdout, want) {
		t.Fatalf("wal verify after tampering: exit %d, want 1 and %q\n%s%s", res.Code, want, res.Stdout, res.Stderr)
	}
}

// TestServeRefusesUnwritableDataDir: a log the process cannot open for
// writing stops startup (exit non-zero, nothing listening) instead of
// serving without durability. Root ignores file modes, so as root the test
// runs the server as nobody on a root-owned data dir.
func TestServeRefusesUnwritableDataDir(t *testing.T) {
	dir := t.TempDir()
	// A log that exists: first a normal run creates it.
	s := StartServer(t, ServeOptions{DataDir: dir})
	if code := s.Stop(); code != 0 {
		t.Fatalf("SIGTERM: exit code %d", code)
	}
	o := ServeOptions{DataDir: dir}
	if os.Geteuid() == 0 {
		o.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		// nobody must reach the dir (t.TempDir's parents are 0700 root).
		for p := dir; p != filepath.Dir(p) && p != os.TempDir(); p = filepath.Dir(p) {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		if err := os.Chmod(filepath.Join(dir, wal.FileName), 0o400); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o500); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o700) })
	}
	s, err := TryStartServer(t, o)
	if err == nil {
		t.Fatal("serve came up on a data dir it cannot write")
	}
	if s.code == 0 || len(s.LogLines("listening")) != 0 || !strings.Contains(s.Logs(), wal.FileName) {
		t.Fatalf("exit %d, logs:\n%s", s.code, s.Logs())
	}
	// Log pipelines read JSON lines: the reason is one of them too.
	if failed := s.LogLines("serve failed"); len(failed) != 1 || !strings.Contains(fmt.Sprint(failed[0]["err"]), wal.FileName) {
		t.Fatalf("want one \"serve failed\" JSON line naming %s, got %v:\n%s", wal.FileName, failed, s.Logs())
	}
}
