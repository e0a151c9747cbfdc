package explain_test

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/internal/config"
	"github.com/contractrefine/autonomy/internal/server"
	"github.com/contractrefine/autonomy/preflight"
)

// startRecordedServer runs a real service (enforce mode, offline chain
// verification, embedded bundle, real WAL) on loopback ports and records,
// through its own HTTP API and HTTP check, a preflight whose decision chain
// names an audit id this WAL has never seen, so decision_chain_complete is
// an advisory failure, then one allowed tool call and one replay deny.
func startRecordedServer(t *testing.T) (base, auditID string) {
	t.Helper()
	cfg := config.Default()
	cfg.HTTPAddr, cfg.GRPCAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
	cfg.ContractRefine.Mode = config.ModeEnforce
	cfg.ContractRefine.Offline = true
	base = runServer(t, cfg)

	plan := `{"intent":{"summary":"Echo the refund status for case 882","plan_hash":"plan-explain-1"},
	  "plan":{"steps":[{"id":"s1","kind":"tool.echo","zone":"any","args":{"text":"status of case 882"}}]},
	  "context":{"actor":{"id":"user:example","session_id":"session:explain"},
	             "decision_chain":["au_from_another_region_0001"]}}`
	status, body := post(t, base+"/v1/preflight", nil, plan)
	if status != http.StatusOK {
		t.Fatalf("preflight: %d %s", status, body)
	}
	var d preflight.Decision
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatal(err)
	}
	if d.Outcome != preflight.OutcomePass || d.ContractResults[6].Reason != preflight.ReasonChainUnverifiableOffline {
		t.Fatalf("preflight decision: %s", body)
	}
	call := `{"kind":"tool.echo","args":{"text":"status of case 882"}}`
	// In order: the first call is allowed and consumes the step, the second
	// is a replay.
	for _, c := range []struct {
		requestID string
		status    int
	}{{"req-explain-1", http.StatusOK}, {"req-explain-2", http.StatusForbidden}} {
		status, body := post(t, base+"/v1/authz/v1/tool", map[string]string{
			"X-Autonomy-Preflight-Id": d.PreflightID, "X-Request-Id": c.requestID}, call)
		if status != c.status {
			t.Fatalf("tool call %s: %d %s, want %d", c.requestID, status, body, c.status)
		}
	}
	return base, d.AuditID
}

func post(t *testing.T, url string, headers map[string]string, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// chromiumPath finds Debian's chromium. Without it the test skips, except
// under CI=true, where .ci/run installs it and its absence is a failure.
func chromiumPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed; .ci/run installs Debian's chromium package for this test")
		}
		t.Skip("chromium is not installed (apt-get install chromium): the explain page's browser test needs it")
	}
	return p
}

// runChromium runs headless chromium once with its own profile directory
// and returns its stdout.
func runChromium(t *testing.T, chromium string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir=" + profileDir(t)}
	cmd := exec.CommandContext(ctx, chromium, append(base, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\nstderr (tail): %s", strings.Join(args, " "), err, tail(stderr.String(), 2000))
	}
	return stdout.Bytes()
}

// profileDir is a Chromium profile directory removed when the test ends.
// Chromium's helper processes (crashpad, the zygote) can still be writing
// into it for a moment after the browser itself has exited, so, unlike
// t.TempDir, the removal tries again until the directory is gone, for up
// to ten seconds, and only then fails the test.
func profileDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "autonomy-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := os.RemoveAll(dir)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("removing the chromium profile: %v", err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return dir
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// artifactDir is where the screenshot goes: $TEST_ARTIFACTS when CI sets
// it, else the test's artifact directory (kept with go test -artifacts).
func artifactDir(t *testing.T) string {
	if dir := os.Getenv("TEST_ARTIFACTS"); dir != "" {
		dir = filepath.Join(dir, "explain")
		if err := os.MkdirAll(dir, 0o750); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.ArtifactDir()
}

func TestExplainPageInChromium(t *testing.T) {
	chromium := chromiumPath(t)
	base, auditID := startRecordedServer(t)
	url := base + "/ui/audit/" + auditID

	// The DOM as the browser built it, with no script involved.
	doc := parseHTML(t, bytes.NewReader(runChromium(t, chromium, "--dump-dom", url)))
	assertSelfContained(t, doc)
	if got := text(byID(doc, "audit-id")); got != auditID {
		t.Fatalf("page shows audit id %q, want %q", got, auditID)
	}
	rows := all(byID(doc, "contracts"), tagClass("tr", "row"))
	if len(rows) != 7 {
		t.Fatalf("%d contract rows in the browser's DOM, want 7", len(rows))
	}
	for i, r := range rows {
		if got := attr(r, "data-contract"); got != preflight.Catalog()[i] {
			t.Errorf("row %d is %s, want %s", i, got, preflight.Catalog()[i])
		}
	}
	adv := all(doc, tagClass("tr", "row", "advisory"))
	if len(adv) != 1 || attr(adv[0], "data-contract") != preflight.ContractDecisionChainComplete {
		t.Fatalf("%d advisory rows, want decision_chain_complete alone", len(adv))
	}
	if labels := all(adv[0], tagClass("span", "advisory-label")); len(labels) != 1 || text(labels[0]) != "advisory" {
		t.Fatal("the advisory row has no visible advisory label")
	}
	if !strings.Contains(text(adv[0]), preflight.ReasonChainUnverifiableOffline) {
		t.Errorf("advisory row text %q", text(adv[0]))
	}
	if got := text(byID(doc, "intent-summary")); got != "Echo the refund status for case 882" {
		t.Errorf("intent shown as %q", got)
	}
	events := all(byID(doc, "timeline"), tagClass("li", "event"))
	if len(events) != 2 || attr(events[0], "class") != "event allow enforced" || attr(events[1], "class") != "event deny enforced" ||
		!strings.Contains(text(events[1]), preflight.ReasonReplay) {
		t.Fatalf("timeline: %d events", len(events))
	}

	// The screenshot, for a person to look at.
	shot := filepath.Join(artifactDir(t), "explain.png")
	runChromium(t, chromium, "--screenshot="+shot, "--window-size=1280,1600", "--hide-scrollbars", url)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot %s is not a PNG: %v", shot, err)
	}
	if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 1600 {
		t.Fatalf("screenshot is %dx%d, want 1280x1600", b.Dx(), b.Dy())
	}
	if n := distinctColors(img, 64); n < 8 {
		t.Fatalf("screenshot has %d distinct colours: the page did not render", n)
	}
	fi, _ := f.Stat()
	t.Logf("explain page screenshot: %s (%d bytes)", shot, fi.Size())
}

// distinctColors counts the colours in img, stopping at limit: a blank or
// error page has very few.
func distinctColors(img image.Image, limit int) int {
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 4 {
		for x := b.Min.X; x < b.Max.X; x += 4 {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[[4]uint32{r, g, bl, a}] = true
			if len(seen) >= limit {
				return len(seen)
			}
		}
	}
	return len(seen)
}

// runServer runs the service on cfg in-process until the test ends and
// returns the base URL of its HTTP API.
func runServer(t *testing.T, cfg config.Config) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan server.Addrs, 1)
	srv, err := server.New(ctx, cfg, server.Options{Listening: func(a server.Addrs) { addrs <- a }})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server run: %v", err)
		}
	})
	select {
	case a := <-addrs:
		return "http://" + a.HTTP
	case err := <-done:
		t.Fatalf("server stopped before listening: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("server did not listen within 30s")
	}
	return ""
}
