package e2e

// `autonomy demo contract-refine` run as the real binary: in-process, and
// with --target against deployments that behave and ones that do not. A
// demo that cannot tell a broken deployment from a working one proves
// nothing, so the wrong targets matter as much as the right ones.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// dpDemoTitles are the demo's steps in order (title prefixes).
var dpDemoTitles = []string{
	"Preflight a plan whose first step names the wrong zone",
	"Resubmit with the hint applied",
	"Call tool.shell with X-Autonomy-Preflight-Id",
	"Call it again with the same preflight id (a replay)",
	"Call tool.shell without a preflight id",
	"Read the audit join for",
}

// dpOutcomeTitles are the steps the in-process demo adds: the gateway
// judges the runtime's result, and the buggy tool's wrong one is replaced
// by the 502 of docs/API.md.
var dpOutcomeTitles = []string{
	"Debit 25 USD with ledger.debit.v1",
	"Debit it with ledger.debit.buggy.v1",
}

// dpApprovalTitles are the steps the demo adds when it holds an approver
// token (always in-process): a payment that waits, is approved, runs once.
var dpApprovalTitles = []string{
	"Preflight a payment of 480 USD",
	"Call it before anyone approved",
	"An approver approves step s1",
	"Call it again, now approved",
	"Call it a third time",
}

// dpDemoStep is one step as the demo printed it.
type dpDemoStep struct {
	n      int
	title  string
	ok     bool
	detail string
}

var dpDemoStepLine = regexp.MustCompile(`^(\d+)\. (.+)$`)

// dpDemoSteps reads the walkthrough: "N. title" then "   ok: ..." or
// "   MISBEHAVED: ...".
func dpDemoSteps(out string) []dpDemoStep {
	var steps []dpDemoStep
	lines := strings.Split(out, "\n")
	for i, line := range lines {
		m := dpDemoStepLine.FindStringSubmatch(line)
		if m == nil || i+1 >= len(lines) {
			continue
		}
		n, _ := strconv.Atoi(m[1])
		next := strings.TrimSpace(lines[i+1])
		switch {
		case strings.HasPrefix(next, "ok: "):
			steps = append(steps, dpDemoStep{n: n, title: m[2], ok: true, detail: next})
		case strings.HasPrefix(next, "MISBEHAVED: "):
			steps = append(steps, dpDemoStep{n: n, title: m[2], detail: next})
		}
	}
	return steps
}

// dpCheckDemo holds a demo run against what it must have printed: every
// step, in order, each ok unless listed in misbehaved (step numbers), and
// an exit code of 0 exactly when nothing misbehaved.
func dpCheckDemo(t *testing.T, res Result, misbehaved []int, titles []string) {
	t.Helper()
	steps := dpDemoSteps(res.Stdout)
	if len(steps) != len(titles) {
		t.Fatalf("demo printed %d steps, want %d:\n%s\nstderr:\n%s", len(steps), len(titles), res.Stdout, res.Stderr)
	}
	for i, s := range steps {
		if s.n != i+1 || !strings.HasPrefix(s.title, titles[i]) {
			t.Errorf("step %d is %d. %q, want %q", i+1, s.n, s.title, titles[i])
		}
		if want := !slices.Contains(misbehaved, s.n); s.ok != want {
			t.Errorf("step %d (%s): ok=%v, want %v: %s", s.n, s.title, s.ok, want, s.detail)
		}
	}
	if len(misbehaved) == 0 {
		if want := fmt.Sprintf("All %d steps behaved.", len(titles)); res.Code != 0 || !strings.Contains(res.Stdout, want) {
			t.Errorf("demo: want exit 0 and %q, got %d:\n%s\nstderr:\n%s", want, res.Code, res.Stdout, res.Stderr)
		}
	} else if res.Code == 0 || !strings.Contains(res.Stdout, fmt.Sprintf("%d of %d steps misbehaved.", len(misbehaved), len(titles))) {
		t.Errorf("demo: want a non-zero exit and %d misbehaved steps, got %d:\n%s\nstderr:\n%s", len(misbehaved), res.Code, res.Stdout, res.Stderr)
	}
}

// TestDemoInProcess runs the demo with no flags: service, runtime and
// gateway in-process on loopback.
func TestDemoInProcess(t *testing.T) {
	t.Parallel()
	res := RunAutonomy(t, "demo", "contract-refine")
	dpCheckDemo(t, res, nil, slices.Concat(dpDemoTitles, dpOutcomeTitles, dpApprovalTitles))
	if !strings.Contains(res.Stdout, `502 postcondition_violated, clause "result.balanceUsd == old(args.balanceUsd) - args.amountUsd"`) {
		t.Errorf("the demo does not show the buggy tool's violation:\n%s", res.Stdout)
	}
	if !strings.Contains(res.Stdout, "in-process (enforce mode") || !strings.Contains(res.Stdout, "autonomy serve starts in advisory mode") {
		t.Errorf("the in-process demo does not say what it started:\n%s", res.Stdout)
	}
}

// TestDemoTargets runs the demo with --target against real deployments
// (the runtime's log counting what reached it) and against wrong ones.
func TestDemoTargets(t *testing.T) {
	t.Parallel()
	gateway := func(mode string) func(t *testing.T) (string, *dpRuntime) {
		return func(t *testing.T) (string, *dpRuntime) {
			rt := dpStartRuntime(t)
			s := StartServer(t, ServeOptions{Mode: mode, Args: []string{"--upstream", rt.URL(), "--gateway-addr", "127.0.0.1:0"}})
			return "http://" + s.GatewayAddr, rt
		}
	}
	tests := map[string]struct {
		target func(t *testing.T) (string, *dpRuntime)
		// misbehaved are the step numbers that must fail.
		misbehaved []int
		// reached is how many tool calls the runtime must have logged.
		reached int
	}{
		"the built-in gateway in enforce mode": {target: gateway("enforce"), reached: 1},
		// docker compose's service config, reached from another host as
		// Envoy's container reaches the service: the audit read at the end
		// must be served.
		"the compose service config, from another host": {
			target: func(t *testing.T) (string, *dpRuntime) {
				remote := accessNonLoopbackIP(t)
				rt := dpStartRuntime(t)
				s := StartServer(t, ServeOptions{Config: filepath.Join("..", "envoy", "autonomy.yaml"),
					Args: []string{"--http-addr", "0.0.0.0:0", "--upstream", rt.URL(), "--gateway-addr", "0.0.0.0:0"}})
				_, port, err := net.SplitHostPort(s.GatewayAddr)
				if err != nil {
					t.Fatal(err)
				}
				return "http://" + net.JoinHostPort(remote.String(), port), rt
			},
			reached: 1},
		// Advisory mode records the replay and the missing header but lets
		// both through: a demo that passed here would prove nothing.
		"the built-in gateway in advisory mode, which lets replays through": {
			target: gateway("advisory"), misbehaved: []int{4, 5}, reached: 3},
		"a server that answers 200 to everything": {
			target: func(t *testing.T) (string, *dpRuntime) {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					w.Write([]byte(`{}`))
				}))
				t.Cleanup(srv.Close)
				return srv.URL, nil
			},
			misbehaved: []int{1, 2, 3, 4, 5, 6}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			target, rt := tc.target(t)
			res := RunAutonomy(t, "demo", "contract-refine", "--target", target)
			dpCheckDemo(t, res, tc.misbehaved, dpDemoTitles)
			if strings.Contains(name, "advisory") && strings.Count(res.Stdout, "serve with --mode enforce") != 2 {
				t.Errorf("the demo against an advisory service does not say twice why the calls went through:\n%s", res.Stdout)
			}
			if rt == nil {
				return
			}
			calls := rt.calls(t)
			if len(calls) != tc.reached {
				t.Errorf("the runtime logged %d calls, want %d: %+v", len(calls), tc.reached, calls)
			}
			for _, c := range calls {
				if c.AuditID == "" || c.Kind != dpShellKind {
					t.Errorf("the runtime logged %+v, want tool.shell with an audit id", c)
				}
			}
		})
	}
}

// TestDemoInterruptedCleansUp: a demo interrupted while it runs (SIGINT)
// still removes its temporary data directory, which holds a WAL and the
// in-process approver's bearer token.
func TestDemoInterruptedCleansUp(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	cmd := exec.Command(Binary(t), "demo", "contract-refine")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The first step's line: the in-process service is up, its directory made.
	sc := bufio.NewScanner(out)
	for sc.Scan() && !strings.HasPrefix(strings.TrimSpace(sc.Text()), "1.") {
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, out)
	if err := cmd.Wait(); err == nil {
		t.Error("an interrupted demo exited 0")
	}
	left, err := filepath.Glob(filepath.Join(tmp, "autonomy-demo-*"))
	if err != nil || len(left) != 0 {
		t.Fatalf("left behind: %v %v", left, err)
	}
}

// TestDemoRefusesABadTarget: a --target that is not the base URL of a
// deployment is refused before any step, naming the flag.
func TestDemoRefusesABadTarget(t *testing.T) {
	t.Parallel()
	for _, target := range []string{"localhost:10000", "127.0.0.1:10000", "ftp://127.0.0.1:1", "http://127.0.0.1:1/?x=1", "http://127.0.0.1:1/#f", "http:///v1"} {
		res := RunAutonomy(t, "demo", "contract-refine", "--target", target)
		if res.Code == 0 || !strings.Contains(res.Stderr, "--target") || strings.Contains(res.Stdout, "1.") {
			t.Errorf("--target %q: exit %d, stdout %q, stderr %q", target, res.Code, res.Stdout, res.Stderr)
		}
	}
}
