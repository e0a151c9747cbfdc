package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/contractrefine/autonomy/internal/config"
	"github.com/contractrefine/autonomy/internal/metrics"
)

// addedCapability is appended to the default bundle's capabilities to make
// a good change whose effect a check can see: the default policy allows a
// kind exactly when it is a capability.
const addedCapability = `    tool.added:
      zones: ["*"]
      side_effects: false
`

// copyDefaultBundle copies the embedded default bundle's source into a new
// directory and returns it.
func copyDefaultBundle(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bundle")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"policy.rego", "data.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "bundle", "default", name))
		if err != nil {
			t.Fatal(err)
		}
		writeAtomically(t, filepath.Join(dir, name), string(b))
	}
	return dir
}

// writeAtomically replaces path the way deployment tools do: write a
// temporary file beside it, then rename it over the old one.
func writeAtomically(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// withGoodChange returns data.yaml with tool.added among the capabilities.
func withGoodChange(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "data.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const anchor = "  capabilities:\n"
	if !strings.Contains(string(b), anchor) {
		t.Fatalf("default data.yaml has no %q", anchor)
	}
	return strings.Replace(string(b), anchor, anchor+addedCapability, 1)
}

// hammer runs checks of tool.echo from several goroutines, half over gRPC
// and half over the HTTP check, until stop is called.
type hammer struct {
	runs     atomic.Int64
	mu       sync.Mutex
	failures []string
	wg       sync.WaitGroup
	cancel   context.CancelFunc
}

func startHammer(e *obsEnv, workers int) *hammer {
	h := &hammer{}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	body := toolBody("tool.echo", map[string]any{"msg": "in flight"})
	for w := range workers {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				var (
					status int
					err    error
				)
				if w%2 == 0 {
					var a checkAnswer
					a, err = e.check(context.Background(), body, map[string]string{"x-request-id": fmt.Sprintf("w%d-%d", w, i)})
					status = a.Status
				} else {
					var resp *http.Response
					resp, err = http.Post(e.base+"/v1/authz/v1/tool", "application/json", strings.NewReader(body))
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						status = resp.StatusCode
					}
				}
				h.runs.Add(1)
				if err != nil || status != 200 {
					h.mu.Lock()
					h.failures = append(h.failures, fmt.Sprintf("worker %d: status %d, err %v", w, status, err))
					h.mu.Unlock()
				}
			}
		}()
	}
	return h
}

// waitRuns waits until at least n more checks have been answered, so the
// load demonstrably spans whatever happens meanwhile.
func (h *hammer) waitRuns(t *testing.T, n int64) {
	t.Helper()
	target := h.runs.Load() + n
	eventually(t, fmt.Sprintf("%d more checks", n), func() bool { return h.runs.Load() >= target })
}

func (h *hammer) stop() (int64, []string) {
	h.cancel()
	h.wg.Wait()
	return h.runs.Load(), h.failures
}

// frameRevision returns the bundle_revision of the decision frame of an
// audit id, read through GET /v1/audit.
func frameRevision(t *testing.T, e *obsEnv, auditID string) string {
	t.Helper()
	status, body := e.get(t, "/v1/audit/"+auditID)
	if status != 200 {
		t.Fatalf("audit %s: %d %s", auditID, status, body)
	}
	var got struct {
		Frames []struct {
			Kind  string         `json:"kind"`
			Attrs map[string]any `json:"attrs"`
		} `json:"frames"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	for _, f := range got.Frames {
		if f.Kind == "autonomy.decision" {
			rev, _ := f.Attrs["bundle_revision"].(string)
			return rev
		}
	}
	t.Fatalf("audit %s has no decision frame: %s", auditID, body)
	return ""
}

// configMapBundle lays the default bundle out the way a Kubernetes
// ConfigMap volume does: the files live in a hidden timestamped directory,
// ..data links to it, and each file name links through ..data.
func configMapBundle(t *testing.T) string {
	t.Helper()
	src := copyDefaultBundle(t)
	dir := filepath.Join(t.TempDir(), "configmap")
	if err := os.MkdirAll(filepath.Join(dir, "..v1"), 0o750); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"policy.rego", "data.yaml"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		writeAtomically(t, filepath.Join(dir, "..v1", name), string(b))
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// swapConfigMap publishes new contents the way the kubelet does: a new
// timestamped directory, then an atomic rename of a fresh link over ..data.
func swapConfigMap(t *testing.T, dir string) {
	t.Helper()
	v2 := filepath.Join(dir, "..v2")
	if err := os.MkdirAll(v2, 0o750); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "policy.rego"))
	if err != nil {
		t.Fatal(err)
	}
	writeAtomically(t, filepath.Join(v2, "policy.rego"), string(b))
	writeAtomically(t, filepath.Join(v2, "data.yaml"), withGoodChange(t, dir))
	if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// TestReloadOnFileChange changes the bundle on disk while checks run
// throughout: the change is picked up, every check in flight is answered
// 200, and decisions after the swap record the new revision.
func TestReloadOnFileChange(t *testing.T) {
	tests := map[string]struct {
		layout func(t *testing.T) string
		change func(t *testing.T, dir string)
	}{
		"file replaced": {copyDefaultBundle, func(t *testing.T, dir string) {
			writeAtomically(t, filepath.Join(dir, "data.yaml"), withGoodChange(t, dir))
		}},
		"file rewritten in place": {copyDefaultBundle, func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "data.yaml"), []byte(withGoodChange(t, dir)), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		"configmap link swapped": {configMapBundle, swapConfigMap},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := tc.layout(t)
			e := obsStart(t, func(c *config.Config) {
				c.Bundle = dir
				c.Reload.Debounce = 20 * time.Millisecond
			}, Options{ReadinessInterval: -1})
			oldRev := e.srv.BundleRevision()
			added := toolBody("tool.added", nil)
			if a := e.mustCheck(t, added, nil); a.Status != 403 || a.Reason != "policy: unknown_tool_kind" {
				t.Fatalf("before the change tool.added got %+v", a)
			}

			h := startHammer(e, 8)
			h.waitRuns(t, 100)
			tc.change(t, dir)
			var last checkAnswer
			eventually(t, "tool.added to be allowed", func() bool {
				last = e.mustCheck(t, added, nil)
				return last.Status == 200
			})
			h.waitRuns(t, 100)
			runs, failures := h.stop()
			if len(failures) > 0 {
				t.Fatalf("%d of %d checks in flight failed during the reload, first: %s", len(failures), runs, failures[0])
			}
			newRev := e.srv.BundleRevision()
			if newRev == oldRev {
				t.Fatal("revision unchanged after a reload that changed the policy's data")
			}
			if got := frameRevision(t, e, last.AuditID); got != newRev {
				t.Errorf("decision frame after the reload has bundle_revision %q, want %q", got, newRev)
			}
			fams := e.scrape(t)
			if v := sample(fams, "autonomy_bundle_reloads_total", map[string]string{"result": metrics.ReloadOK}); v < 1 {
				t.Errorf("autonomy_bundle_reloads_total{result=ok} = %v", v)
			}
			if v := sample(fams, "autonomy_bundle_info", map[string]string{"revision": newRev}); v != 1 {
				t.Errorf("autonomy_bundle_info{revision=%s} = %v, want 1", newRev, v)
			}
			if n := len(fams["autonomy_bundle_info"].GetMetric()); n != 1 {
				t.Errorf("autonomy_bundle_info has %d series, want 1", n)
			}
			var reloaded bool
			for _, l := range withMsg(e.logs.lines(t), "bundle reloaded") {
				reloaded = reloaded || (l["trigger"] == TriggerFileChange && l["bundle_revision"] == newRev &&
					l["old_bundle_revision"] == oldRev)
			}
			if !reloaded {
				t.Errorf("no bundle reloaded line naming both revisions:\n%s", e.logs)
			}
			t.Logf("%d checks answered across the reload", runs)
		})
	}
}

// TestReloadOnChmod: a permission change in the bundle directory is a
// change: it can make a file that was refused as unreadable readable, and
// the bundle it completes must then be loaded. (Tests run as root here, who
// reads any file, so the test watches the reload the chmod starts: the
// contents are the same, so it is "unchanged".)
func TestReloadOnChmod(t *testing.T) {
	dir := copyDefaultBundle(t)
	e := obsStart(t, func(c *config.Config) {
		c.Bundle = dir
		c.Reload.Debounce = 20 * time.Millisecond
	}, Options{ReadinessInterval: -1})
	// The watch starts alongside the listeners, so the mode is changed
	// again every 50th poll (each change restarts the debounce) until a
	// reload is seen.
	modes := []os.FileMode{0o400, 0o600}
	polls := 0
	eventually(t, "a reload after a chmod", func() bool {
		if polls%50 == 0 {
			if err := os.Chmod(filepath.Join(dir, "data.yaml"), modes[polls/50%2]); err != nil {
				t.Fatal(err)
			}
		}
		polls++
		return sample(e.scrape(t), "autonomy_bundle_reloads_total", map[string]string{"result": metrics.ReloadUnchanged}) >= 1
	})
}

// TestReloadWatchesLinkedDirectories: a directory linked into the bundle
// is read as part of it, so a change inside it reloads the bundle too.
func TestReloadWatchesLinkedDirectories(t *testing.T) {
	dir := copyDefaultBundle(t)
	shared := filepath.Join(t.TempDir(), "shared")
	if err := os.MkdirAll(shared, 0o750); err != nil {
		t.Fatal(err)
	}
	writeAtomically(t, filepath.Join(shared, "data.json"), `{"v": 1}`)
	if err := os.Symlink(shared, filepath.Join(dir, "shared")); err != nil {
		t.Fatal(err)
	}
	e := obsStart(t, func(c *config.Config) {
		c.Bundle = dir
		c.Reload.Debounce = 20 * time.Millisecond
	}, Options{ReadinessInterval: -1})
	old := e.srv.BundleRevision()
	// As in TestReloadOnChmod, the change is made again every 50th poll
	// until the watch, which starts alongside the listeners, has seen it.
	polls := 0
	eventually(t, "a reload after a change in the linked directory", func() bool {
		if polls%50 == 0 {
			writeAtomically(t, filepath.Join(shared, "data.json"), fmt.Sprintf(`{"v": %d}`, 2+polls/50))
		}
		polls++
		return e.srv.BundleRevision() != old
	})
}

// TestReloadRefusesBadBundle writes bundles that do not load: each is
// refused, the refusal is logged with the reason, and the old bundle keeps
// answering every check, in flight or after.
func TestReloadRefusesBadBundle(t *testing.T) {
	tests := map[string]struct {
		file, content string
		wantInErr     string
	}{
		"rego syntax error":      {"policy.rego", "package autonomy\n\nallow if {\n", "policy.rego"},
		"unknown governance key": {"data.yaml", "autonomy:\n  capabilitiez: {}\n", "capabilitiez"},
		"clause does not compile": {"data.yaml", "autonomy:\n  capabilities:\n    tool.echo:\n      zones: [\"*\"]\n" +
			"      contract: {preconditions: [\"args.x >\"]}\n", "tool.echo"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := copyDefaultBundle(t)
			e := obsStart(t, func(c *config.Config) {
				c.Bundle = dir
				c.Reload.Debounce = 20 * time.Millisecond
			}, Options{ReadinessInterval: -1})
			oldRev := e.srv.BundleRevision()
			h := startHammer(e, 4)
			h.waitRuns(t, 50)
			writeAtomically(t, filepath.Join(dir, tc.file), tc.content)
			var refusal map[string]any
			eventually(t, "the reload to be refused", func() bool {
				lines := withMsg(e.logs.lines(t), "bundle reload refused; the loaded bundle keeps serving")
				if len(lines) > 0 {
					refusal = lines[0]
				}
				return refusal != nil
			})
			h.waitRuns(t, 50)
			runs, failures := h.stop()
			if len(failures) > 0 {
				t.Fatalf("%d of %d checks failed while a bad bundle was refused, first: %s", len(failures), runs, failures[0])
			}
			if errText, _ := refusal["err"].(string); !strings.Contains(errText, tc.wantInErr) {
				t.Errorf("refusal logged err %q, want it to name %q", errText, tc.wantInErr)
			}
			if refusal["level"] != "ERROR" || refusal["bundle_revision"] != oldRev {
				t.Errorf("refusal line %v, want ERROR naming the kept revision %s", refusal, oldRev)
			}
			if got := e.srv.BundleRevision(); got != oldRev {
				t.Fatalf("revision moved to %s after a refused reload", got)
			}
			a := e.mustCheck(t, toolBody("tool.echo", nil), nil)
			if a.Status != 200 {
				t.Fatalf("check after a refused reload: %+v", a)
			}
			if got := frameRevision(t, e, a.AuditID); got != oldRev {
				t.Errorf("decision frame records revision %q, want the kept %q", got, oldRev)
			}
			if status, body := e.get(t, "/readyz"); status != 200 {
				t.Errorf("/readyz after a refused reload: %d %s", status, body)
			}
			fams := e.scrape(t)
			if v := sample(fams, "autonomy_bundle_reloads_total", map[string]string{"result": metrics.ReloadFailed}); v < 1 {
				t.Errorf("autonomy_bundle_reloads_total{result=failed} = %v", v)
			}
			if v := sample(fams, "autonomy_bundle_info", map[string]string{"revision": oldRev}); v != 1 {
				t.Errorf("autonomy_bundle_info{revision=%s} = %v, want 1", oldRev, v)
			}
		})
	}
}

// TestReloadCall covers Reload as SIGHUP drives it, without the watcher.
func TestReloadCall(t *testing.T) {
	dir := copyDefaultBundle(t)
	e := obsStart(t, func(c *config.Config) {
		c.Bundle = dir
		c.Reload.Watch = false
	}, Options{ReadinessInterval: -1})
	steps := []struct {
		name       string
		change     func()
		wantErr    bool
		wantResult string
		wantSame   bool
	}{
		{"nothing changed", func() {}, false, metrics.ReloadUnchanged, true},
		{"bad rego", func() { writeAtomically(t, filepath.Join(dir, "broken.rego"), "package autonomy\nallow if {") },
			true, metrics.ReloadFailed, true},
		{"fixed and changed", func() {
			os.Remove(filepath.Join(dir, "broken.rego"))
			writeAtomically(t, filepath.Join(dir, "data.yaml"), withGoodChange(t, dir))
		}, false, metrics.ReloadOK, false},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			before, beforeRev := e.scrape(t), e.srv.BundleRevision()
			s.change()
			err := e.srv.Reload(context.Background(), TriggerSignal)
			if (err != nil) != s.wantErr {
				t.Fatalf("Reload: %v, want error %v", err, s.wantErr)
			}
			after := e.scrape(t)
			l := map[string]string{"result": s.wantResult}
			if d := sample(after, "autonomy_bundle_reloads_total", l) - sample(before, "autonomy_bundle_reloads_total", l); d != 1 {
				t.Errorf("reloads{result=%s} moved by %v, want 1", s.wantResult, d)
			}
			if same := e.srv.BundleRevision() == beforeRev; same != s.wantSame {
				t.Errorf("revision unchanged = %v, want %v", same, s.wantSame)
			}
		})
	}
}

// TestReadinessFollowsAPolicyThatCannotDecide: a reloaded policy that
// fails on every call (two values for a complete rule; 1/0 under strict
// builtin errors) makes /readyz 503 and grpc.health.v1 NOT_SERVING at
// once, where they said ready while every check was a 503; a policy that
// decides again makes them ready again.
func TestReadinessFollowsAPolicyThatCannotDecide(t *testing.T) {
	dir := copyDefaultBundle(t)
	good, err := os.ReadFile(filepath.Join(dir, "policy.rego"))
	if err != nil {
		t.Fatal(err)
	}
	e := obsStart(t, func(c *config.Config) {
		c.Bundle = dir
		c.Reload.Watch = false
	}, Options{ReadinessInterval: -1})
	ready := func() (int, healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		status, _ := e.get(t, "/readyz")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h, err := e.health.Check(ctx, &healthpb.HealthCheckRequest{Service: authzServiceName})
		if err != nil {
			t.Fatal(err)
		}
		return status, h.Status
	}
	if status, h := ready(); status != http.StatusOK || h != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("with the default policy: /readyz %d, health %v", status, h)
	}
	for name, policy := range map[string]string{
		"conflict in a complete rule": "package autonomy\nimport rego.v1\nallow := true\nallow := false if true\n",
		"1/0 on every call":           "package autonomy\nimport rego.v1\nallow if 1 / 0 > 0\n",
	} {
		t.Run(name, func(t *testing.T) {
			writeAtomically(t, filepath.Join(dir, "policy.rego"), policy)
			if err := e.srv.Reload(context.Background(), TriggerSignal); err != nil {
				t.Fatalf("Reload: %v", err)
			}
			if status, h := ready(); status != http.StatusServiceUnavailable || h != healthpb.HealthCheckResponse_NOT_SERVING {
				t.Fatalf("/readyz %d, health %v; want 503 and NOT_SERVING", status, h)
			}
			a := e.mustCheck(t, toolBody("tool.echo", map[string]any{"msg": "hi"}), nil)
			if a.Status != http.StatusServiceUnavailable {
				t.Fatalf("check under the policy: %+v, want a 503 deny", a)
			}
			writeAtomically(t, filepath.Join(dir, "policy.rego"), string(good))
			if err := e.srv.Reload(context.Background(), TriggerSignal); err != nil {
				t.Fatalf("Reload: %v", err)
			}
			if status, h := ready(); status != http.StatusOK || h != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("with the default policy again: /readyz %d, health %v", status, h)
			}
		})
	}
}
