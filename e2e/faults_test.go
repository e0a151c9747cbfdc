package e2e

// Fault tests on real files (issue 6): the WAL file moved away, removed or
// truncated under a running server, the disk full (a real tmpfs when this
// host lets the test mount one), storage errors injected through the
// gate's and the API's Store interfaces, and a policy or clause that runs
// away. In each the service answers deny or 503 in enforce, logs a line
// that says what is wrong, and recovers when the fault clears; each test
// fails if anything is allowed during the fault that should not be.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/contractrefine/autonomy/binding"
	"github.com/contractrefine/autonomy/extauthz"
	"github.com/contractrefine/autonomy/internal/bundle"
	"github.com/contractrefine/autonomy/internal/httpapi"
	"github.com/contractrefine/autonomy/internal/ids"
	"github.com/contractrefine/autonomy/internal/state"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/preflight/submit"
	"github.com/contractrefine/autonomy/wal"
)

// fltWait bounds polls for a condition (readiness flipping, a process
// dying); no test asserts how long they take.
const fltWait = 30 * time.Second

const reasonUnavailable = "contract: verifier_unavailable"

// fltFixture is a running server in enforce mode with one preflight whose
// step was used (allowed to request id usedReq) and one not yet used.
type fltFixture struct {
	s       *Server
	c       *soakClient
	used    string
	usedReq string
	fresh   string
	walPath string
}

func newFltFixture(t *testing.T, o ServeOptions) *fltFixture {
	t.Helper()
	o.Mode = "enforce"
	s := StartServer(t, o)
	f := &fltFixture{s: s, c: newSoakClient(t, s), usedReq: "req-used", walPath: filepath.Join(s.DataDir, wal.FileName)}
	f.used = f.mustPreflight(t, "flt-used")
	if allowed, reason, err := f.c.check(f.used, f.usedReq); err != nil || !allowed {
		t.Fatalf("first use of a passing preflight: allowed=%v %q %v", allowed, reason, err)
	}
	f.fresh = f.mustPreflight(t, "flt-fresh")
	return f
}

func (f *fltFixture) mustPreflight(t *testing.T, session string) string {
	t.Helper()
	status, body, _, err := f.c.post(soakEchoRequest(session+"-"+ids.New(""), 1))
	var d soakDecision
	if err != nil || status != http.StatusOK || json.Unmarshal(body, &d) != nil || d.Outcome != "pass" {
		t.Fatalf("preflight: %d %s %v", status, body, err)
	}
	return d.PreflightID
}

// duringFault sends the traffic a fault that stops writes must not let
// through: a new preflight, the used preflight under a new and under its
// own request id, and the unused one under fresh request ids (last, so a
// fault that leaks writes leaves the most frames behind). Nothing may be
// allowed and no preflight answered 200. It returns how many answers came
// back.
func (f *fltFixture) duringFault(t *testing.T, tag string, rounds int) (answered int) {
	t.Helper()
	for i := range rounds {
		status, body, _, err := f.c.post(soakEchoRequest(fmt.Sprintf("flt-%s-%d", tag, i), 1))
		if err == nil {
			answered++
			if status == http.StatusOK {
				t.Errorf("%s: preflight answered 200 during the fault: %s", tag, body)
			}
		}
		for _, call := range f.faultCalls(tag, i) {
			allowed, _, err := f.c.check(call.id, call.req)
			if err != nil {
				continue // the process may have died: that is a deny too
			}
			answered++
			if allowed {
				t.Errorf("%s: check %s under %s allowed during the fault", tag, call.req, call.id)
			}
		}
	}
	return answered
}

type fltCall struct{ id, req string }

func (f *fltFixture) faultCalls(tag string, i int) []fltCall {
	return []fltCall{
		{f.used, fmt.Sprintf("req-%s-used-%d", tag, i)},
		{f.used, f.usedReq},
		{f.fresh, fmt.Sprintf("req-%s-fresh-%d", tag, i)},
	}
}

// wantUnavailable checks one check and one preflight answer 503 with the
// fail-closed codes.
func (f *fltFixture) wantUnavailable(t *testing.T, tag string) {
	t.Helper()
	if allowed, reason, err := f.c.check(f.fresh, "req-"+tag+"-503"); err != nil || allowed || reason != reasonUnavailable {
		t.Errorf("%s: check answered allowed=%v %q (%v), want %s", tag, allowed, reason, err, reasonUnavailable)
	}
	status, body, _, err := f.c.post(soakEchoRequest("flt-"+tag+"-503", 1))
	if err != nil || status != http.StatusServiceUnavailable || !strings.Contains(string(body), preflight.CodeVerifierUnavailable) {
		t.Errorf("%s: preflight answered %d %s (%v), want 503 %s", tag, status, body, err, preflight.CodeVerifierUnavailable)
	}
}

// wantLog checks that the process logged an error line with msg whose
// text contains each of parts.
func wantLog(t *testing.T, s *Server, msg string, parts ...string) {
	t.Helper()
	for _, rec := range s.WaitLog(msg) {
		line, _ := json.Marshal(rec)
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(string(line), p)
		}
		if ok {
			return
		}
	}
	t.Errorf("no %q log line mentioning %q in:\n%s", msg, parts, s.Logs())
}

// TestFaultWALFileMovedAwayAndBack renames wal.db away under the running
// server and back: while it is away nothing is allowed, preflights get 503
// and /readyz is unready; once it is back the service recovers by itself,
// and the log's hash chain still verifies.
func TestFaultWALFileMovedAwayAndBack(t *testing.T) {
	f := newFltFixture(t, ServeOptions{})
	away := f.walPath + ".away"
	if err := os.Rename(f.walPath, away); err != nil {
		t.Fatal(err)
	}
	body := f.s.WaitReadyz(http.StatusServiceUnavailable, "the fault")
	if !strings.Contains(body, "removed or replaced") {
		t.Errorf("/readyz while the file is away: %s, want it to say the file was removed or replaced", body)
	}
	f.wantUnavailable(t, "away")
	if n := f.duringFault(t, "away", 5); n == 0 {
		t.Fatal("the server stopped answering when its WAL file was moved")
	}
	wantLog(t, f.s, "wal commit failed", "removed or replaced")

	if err := os.Rename(away, f.walPath); err != nil {
		t.Fatal(err)
	}
	f.s.WaitReadyz(http.StatusOK, "the fault")
	// One frame, fewer than the fault's last attempt would have left: a
	// log that let writes through while away, or lost its place in the
	// chain, fails wal verify here.
	if allowed, reason, _ := f.c.check(f.used, "req-used-again"); allowed || reason != "contract: preflight_replay" {
		t.Errorf("used preflight after recovery: allowed=%v %q, want a replay deny", allowed, reason)
	}
	if code := f.s.Stop(); code != 0 {
		t.Fatalf("stop: exit %d", code)
	}
	if res := RunAutonomy(t, "wal", "verify", "--data-dir", f.s.DataDir); res.Code != 0 {
		t.Fatalf("wal verify after the file came back: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	f.s = f.s.Restart()
	f.c = newSoakClient(t, f.s)
	p := f.mustPreflight(t, "flt-after")
	if allowed, reason, err := f.c.check(p, "req-after"); err != nil || !allowed {
		t.Fatalf("after the file came back: check allowed=%v %q %v", allowed, reason, err)
	}
	// Whatever the fault left, the unused preflight's step goes to at most
	// one request id.
	allowedTo := map[string]bool{}
	for i := range 5 {
		for _, call := range f.faultCalls("away", i) {
			if allowed, _, _ := f.c.check(call.id, call.req); allowed && call.id == f.fresh {
				allowedTo[call.req] = true
			} else if allowed && call.req != f.usedReq {
				t.Errorf("used preflight allowed to %s after recovery", call.req)
			}
		}
	}
	if len(allowedTo) > 1 {
		t.Errorf("the unused preflight's one step went to %d request ids: %v", len(allowedTo), allowedTo)
	}
}

// TestFaultWALFileRemoved unlinks wal.db under the running server: nothing
// is allowed and /readyz is unready until a restart, which starts on a new
// empty log where every old id is unknown (denied, never allowed).
func TestFaultWALFileRemoved(t *testing.T) {
	f := newFltFixture(t, ServeOptions{})
	if err := os.Remove(f.walPath); err != nil {
		t.Fatal(err)
	}
	f.s.WaitReadyz(http.StatusServiceUnavailable, "the fault")
	f.wantUnavailable(t, "removed")
	f.duringFault(t, "removed", 5)
	wantLog(t, f.s, "wal commit failed", "removed or replaced")

	f.s.Kill()
	f.s = f.s.Restart()
	f.c = newSoakClient(t, f.s)
	f.s.WaitReadyz(http.StatusOK, "the fault")
	for _, id := range []string{f.used, f.fresh} {
		if allowed, reason, err := f.c.check(id, "req-after-restart"); err != nil || allowed || reason != "contract: preflight_required" {
			t.Errorf("id from the removed log after restart: allowed=%v %q %v, want contract: preflight_required", allowed, reason, err)
		}
	}
	p := f.mustPreflight(t, "flt-new-log")
	if allowed, reason, err := f.c.check(p, "req-new-log"); err != nil || !allowed {
		t.Fatalf("new preflight on the new log: allowed=%v %q %v", allowed, reason, err)
	}
}

// TestFaultWALTruncated truncates wal.db under the running server. bbolt
// reads the file through mmap, so a read of a page past the new end faults;
// the WAL turns that into ErrCorrupt and answers 503 from then on (and had
// the process died instead, a crash is a deny for Envoy,
// failure_mode_allow: false). Nothing may be allowed twice, `wal verify`
// must name the damage rather than crash, and a restart on the damaged
// file either refuses to start, naming the damage, or starts and still
// allows none of the old ids.
func TestFaultWALTruncated(t *testing.T) {
	tests := map[string]struct{ size func(int64) int64 }{
		"to zero":   {size: func(int64) int64 { return 0 }},
		"to half":   {size: func(n int64) int64 { return n / 2 }},
		"last page": {size: func(n int64) int64 { return n - 4096 }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f := newFltFixture(t, ServeOptions{})
			for i := range 50 { // give the file some pages to lose
				f.mustPreflight(t, fmt.Sprintf("flt-filler-%d", i))
			}
			st, err := os.Stat(f.walPath)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(f.walPath, tc.size(st.Size())); err != nil {
				t.Fatal(err)
			}
			// Pages cut from the end may have held records (the process
			// dies on reading them) or only free space (it goes on). Either
			// way a step is never allowed twice.
			ledger := fltLedger{}
			answered := 0
			for i := range 5 {
				for _, call := range f.faultCalls("truncated", i) {
					allowed, _, err := f.c.check(call.id, call.req)
					if err == nil {
						answered++
						ledger.record(t, call, allowed, f)
					}
				}
			}
			alive := f.s.running()
			t.Logf("after truncating %d bytes to %d: %d answers, process alive: %v, allowed %v", st.Size(),
				tc.size(st.Size()), answered, alive, ledger)
			f.s.Kill()

			res := RunAutonomy(t, "wal", "verify", "--data-dir", f.s.DataDir)
			t.Logf("wal verify on the truncated file: exit %d: %s%s", res.Code, res.Stdout, firstLine(res.Stderr))
			if strings.Contains(res.Stderr, "goroutine ") {
				t.Errorf("wal verify crashed instead of reporting the damage:\n%s", res.Stderr)
			}
			s2, err := TryStartServer(t, ServeOptions{DataDir: f.s.DataDir, Mode: "enforce"})
			if err != nil {
				if strings.Contains(s2.Logs(), "goroutine ") || !strings.Contains(s2.Logs(), "wal") {
					t.Errorf("restart on the damaged file crashed instead of naming it:\n%s", s2.Logs())
				}
				t.Logf("restart refused: %s", firstLine(s2.Logs()))
				return
			}
			c2 := newSoakClient(t, s2)
			for _, call := range []fltCall{{f.used, "req-after-restart"}, {f.fresh, "req-after-restart"}} {
				if allowed, _, err := c2.check(call.id, call.req); err == nil {
					ledger.record(t, call, allowed, f)
				}
			}
		})
	}
}

// fltLedger is the request ids each preflight was allowed to. The used
// preflight was allowed once (to usedReq) before the fault; the fresh one
// may be allowed to one request id.
type fltLedger map[string]map[string]bool

func (l fltLedger) record(t *testing.T, call fltCall, allowed bool, f *fltFixture) {
	t.Helper()
	if !allowed {
		return
	}
	if l[call.id] == nil {
		l[call.id] = map[string]bool{}
		if call.id == f.used {
			l[call.id][f.usedReq] = true
		}
	}
	l[call.id][call.req] = true
	if len(l[call.id]) > 1 {
		t.Errorf("one-step preflight %s allowed to %d request ids: %v", call.id, len(l[call.id]), l[call.id])
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// TestFaultDiskFull puts the data dir on a small tmpfs and fills it. While
// the disk is full /readyz is unready, writes fail with 503, nothing is
// allowed once the log has failed a write, and one line per failed commit
// names ENOSPC; freeing the space brings the service back. Mounting needs
// root: elsewhere the test skips, and TestFaultInjectedStorage covers
// ENOSPC through the storage interface.
func TestFaultDiskFull(t *testing.T) {
	mnt := filepath.Join(t.TempDir(), "fs")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s); TestFaultInjectedStorage covers ENOSPC", err, bytes.TrimSpace(out))
	}
	var f *fltFixture
	t.Cleanup(func() {
		if f != nil {
			f.s.Kill()
		}
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", mnt, err, out)
		}
	})
	f = newFltFixture(t, ServeOptions{DataDir: filepath.Join(mnt, "data")})
	filler := filepath.Join(mnt, "filler")
	fill(t, filler)

	f.s.WaitReadyz(http.StatusServiceUnavailable, "the fault")
	// bbolt may still reuse pages it freed earlier; the fault is established
	// once a write has failed, and from then on nothing is allowed.
	failed := false
	for i := 0; i < 200 && !failed; i++ {
		status, _, _, err := f.c.post(soakEchoRequest(fmt.Sprintf("flt-full-%d", i), 1))
		failed = err == nil && status == http.StatusServiceUnavailable
	}
	if !failed {
		t.Fatal("no write failed on a full disk")
	}
	f.wantUnavailable(t, "full")
	f.duringFault(t, "full", 5)
	wantLog(t, f.s, "wal commit failed", "no space left on device")

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	f.s.WaitReadyz(http.StatusOK, "the fault")
	p := f.mustPreflight(t, "flt-space-back")
	if allowed, reason, err := f.c.check(p, "req-space-back"); err != nil || !allowed {
		t.Fatalf("after freeing space: allowed=%v %q %v", allowed, reason, err)
	}
	if allowed, _, _ := f.c.check(f.used, "req-used-after-full"); allowed {
		t.Error("the used preflight was allowed again after the disk-full episode")
	}
	if code := f.s.Stop(); code != 0 {
		t.Fatalf("stop: exit %d", code)
	}
	if res := RunAutonomy(t, "wal", "verify", "--data-dir", f.s.DataDir); res.Code != 0 {
		t.Fatalf("wal verify after the disk-full episode: exit %d\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
}

// fill writes path until the filesystem is full.
func fill(t *testing.T, path string) {
	t.Helper()
	w, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	chunk := make([]byte, 64<<10)
	for {
		if _, err := w.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", path, err)
			}
			return
		}
	}
}

// fltStore wraps the real log and fails what fault selects with errno.
type fltStore struct {
	*wal.DB
	fault  atomic.Int32 // fltNone, fltWrites or fltReads
	errno  syscall.Errno
	writes atomic.Int64 // writes refused
}

const (
	fltNone int32 = iota
	fltWrites
	fltReads
)

var (
	_ state.Store = (*fltStore)(nil)
	_ binding.Log = (*fltStore)(nil)
	_ httpapi.Log = (*fltStore)(nil)
)

func (s *fltStore) fail(kind int32, op string) error {
	if s.fault.Load() != kind {
		return nil
	}
	if kind == fltWrites {
		s.writes.Add(1)
	}
	return fmt.Errorf("wal commit: %s %s: %w", op, s.Path(), s.errno)
}

func (s *fltStore) RecordPreflight(ctx context.Context, rec wal.PreflightRecord) (wal.Frame, error) {
	if err := s.fail(fltWrites, "write"); err != nil {
		return wal.Frame{}, err
	}
	return s.DB.RecordPreflight(ctx, rec)
}

func (s *fltStore) AppendDecision(ctx context.Context, in wal.FrameInput) (wal.Frame, error) {
	if err := s.fail(fltWrites, "write"); err != nil {
		return wal.Frame{}, err
	}
	return s.DB.AppendDecision(ctx, in)
}

// Consume reads the consumed markers and writes one in the same
// transaction, so it fails on either fault.
func (s *fltStore) Consume(ctx context.Context, r wal.ConsumeRequest) (wal.ConsumeResult, error) {
	if err := s.fail(fltWrites, "write"); err != nil {
		return wal.ConsumeResult{}, err
	}
	if err := s.fail(fltReads, "read"); err != nil {
		return wal.ConsumeResult{}, err
	}
	return s.DB.Consume(ctx, r)
}

func (s *fltStore) Binding(ctx context.Context, id string) (preflight.Binding, error) {
	if err := s.fail(fltReads, "read"); err != nil {
		return preflight.Binding{}, err
	}
	return s.DB.Binding(ctx, id)
}

func (s *fltStore) Decision(ctx context.Context, id string) ([]byte, error) {
	if err := s.fail(fltReads, "read"); err != nil {
		return nil, err
	}
	return s.DB.Decision(ctx, id)
}

func (s *fltStore) Peek(ctx context.Context, r wal.ConsumeRequest) (wal.ConsumeResult, error) {
	if err := s.fail(fltReads, "read"); err != nil {
		return wal.ConsumeResult{}, err
	}
	return s.DB.Peek(ctx, r)
}

// fltLog collects error lines.
type fltLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *fltLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, string(bytes.TrimSpace(p)))
	return len(p), nil
}

func (l *fltLog) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, `"level":"ERROR"`) && strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

// TestFaultInjectedStorage runs the gate and the preflight API in process
// on a real WAL wrapped so its writes (or reads) fail with EROFS, ENOSPC or
// EIO, served over real sockets: the gRPC check, the HTTP check and the
// preflight API. Every call during the fault is a 503 deny, each logs one
// error line naming the errno, and clearing the fault brings allows back.
func TestFaultInjectedStorage(t *testing.T) {
	tests := map[string]struct {
		errno syscall.Errno
		fault int32
	}{
		"read-only file system on write": {errno: syscall.EROFS, fault: fltWrites},
		"disk full on write":             {errno: syscall.ENOSPC, fault: fltWrites},
		"I/O error on write":             {errno: syscall.EIO, fault: fltWrites},
		"I/O error on read":              {errno: syscall.EIO, fault: fltReads},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			db, err := wal.Open(t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			store := &fltStore{DB: db, errno: tc.errno}
			logs := &fltLog{}
			svc := startInProcess(t, store, slog.New(slog.NewJSONHandler(logs, nil)))

			used := svc.preflight(t, "inj-used")
			if !svc.grpcCheck(t, used, "req-used").allowed {
				t.Fatal("first use not allowed")
			}
			fresh := svc.preflight(t, "inj-fresh")

			store.fault.Store(tc.fault)
			errText := tc.errno.Error()
			calls := []struct {
				name string
				run  func(i int) fltVerdict
			}{
				{"gRPC check, unused preflight", func(i int) fltVerdict { return svc.grpcCheck(t, fresh, fmt.Sprintf("req-g-%d", i)) }},
				{"HTTP check, unused preflight", func(i int) fltVerdict { return svc.httpCheck(t, fresh, fmt.Sprintf("req-h-%d", i)) }},
				{"gRPC check, used preflight, same request", func(int) fltVerdict { return svc.grpcCheck(t, used, "req-used") }},
			}
			for i := range 3 {
				for _, c := range calls {
					before := logs.count(errText)
					v := c.run(i)
					if v.allowed || v.status != http.StatusServiceUnavailable || v.reason != reasonUnavailable {
						t.Errorf("%s during %s: %+v, want a 503 deny %s", c.name, name, v, reasonUnavailable)
					}
					if n := logs.count(errText) - before; n != 1 {
						t.Errorf("%s during %s: %d error lines naming %q, want 1:\n%s", c.name, name, n, errText,
							strings.Join(logs.lines, "\n"))
					}
				}
				before := logs.count(errText)
				status, body := svc.postPreflight(t, soakEchoRequest(fmt.Sprintf("inj-during-%d", i), 1))
				if tc.fault == fltWrites && (status != http.StatusServiceUnavailable || !strings.Contains(string(body), preflight.CodeVerifierUnavailable)) {
					t.Errorf("preflight during %s: %d %s, want 503 %s", name, status, body, preflight.CodeVerifierUnavailable)
				}
				if tc.fault == fltWrites && logs.count(errText)-before != 1 {
					t.Errorf("preflight during %s: %d error lines naming %q, want 1", name, logs.count(errText)-before, errText)
				}
			}

			store.fault.Store(fltNone)
			if v := svc.grpcCheck(t, fresh, "req-after"); !v.allowed {
				t.Fatalf("after the fault cleared: %+v, want the unused preflight allowed", v)
			}
			if v := svc.grpcCheck(t, fresh, "req-after-2"); v.allowed || v.reason != "contract: preflight_replay" {
				t.Fatalf("second use after the fault: %+v, want a replay deny", v)
			}
			if v := svc.grpcCheck(t, used, "req-used-2"); v.allowed {
				t.Fatalf("used preflight after the fault: %+v", v)
			}
			rep, err := db.Verify(context.Background())
			if err != nil || !rep.OK() {
				t.Fatalf("wal verify: %+v %v", rep, err)
			}
		})
	}
}

// fltService is the gate and the preflight API served in process.
type fltService struct {
	httpURL string
	authz   authv3.AuthorizationClient
}

type fltVerdict struct {
	allowed bool
	status  int
	reason  string
}

func startInProcess(t *testing.T, store *fltStore, log *slog.Logger) *fltService {
	t.Helper()
	b, err := bundle.Load(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	gate := binding.New(binding.Options{Store: store, Log: store, Policy: func() binding.Policy { return b },
		Mode: binding.ModeEnforce, NewID: ids.Audit, Logger: log})
	api := httpapi.New(httpapi.Options{Store: store, Log: store, Logger: log,
		Submit: submit.New(submit.Options{
			Verifier: preflight.NewVerifier(preflight.Options{Chain: store.DB}), Store: store,
			Bundle: func() submit.Bundle { return b }, MaxRepairAttempts: 1,
			NewPreflightID: ids.Preflight, NewAuditID: ids.Audit, Logger: log})})
	mux := http.NewServeMux()
	mux.Handle("/v1/preflight", api)
	mux.Handle("/v1/preflight/", api)
	mux.Handle(extauthz.HTTPPrefix+"/", extauthz.NewHTTPHandler(gate, 1<<20))
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: mux}
	go hs.Serve(httpLn)
	t.Cleanup(func() { hs.Close() })

	grpcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	extauthz.NewServer(gate).Register(gs)
	go gs.Serve(grpcLn)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(grpcLn.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &fltService{httpURL: "http://" + httpLn.Addr().String(), authz: authv3.NewAuthorizationClient(conn)}
}

func (s *fltService) postPreflight(t *testing.T, body []byte) (int, []byte) {
	t.Helper()
	resp, err := http.Post(s.httpURL+"/v1/preflight", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func (s *fltService) preflight(t *testing.T, session string) string {
	t.Helper()
	status, body := s.postPreflight(t, soakEchoRequest(session, 1))
	var d soakDecision
	if status != http.StatusOK || json.Unmarshal(body, &d) != nil || d.Outcome != "pass" {
		t.Fatalf("preflight: %d %s", status, body)
	}
	return d.PreflightID
}

func (s *fltService) grpcCheck(t *testing.T, preflightID, requestID string) fltVerdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), fltWait)
	defer cancel()
	resp, err := s.authz.Check(ctx, ToolCheck("tool.echo", map[string]any{"msg": "soak"}, requestID,
		map[string]string{"x-autonomy-preflight-id": preflightID}))
	if err != nil {
		t.Fatal(err)
	}
	if codes.Code(resp.GetStatus().GetCode()) == codes.OK {
		return fltVerdict{allowed: true, status: http.StatusOK}
	}
	return fltVerdict{status: int(resp.GetDeniedResponse().GetStatus().GetCode()), reason: resp.GetStatus().GetMessage()}
}

func (s *fltService) httpCheck(t *testing.T, preflightID, requestID string) fltVerdict {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.httpURL+extauthz.HTTPPrefix+"/v1/tool",
		strings.NewReader(`{"kind":"tool.echo","args":{"msg":"soak"}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(binding.HeaderPreflightID, preflightID)
	req.Header.Set(binding.HeaderRequestID, requestID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Error struct{ Reason string } `json:"error"`
	}
	json.NewDecoder(resp.Body).Decode(&body)
	return fltVerdict{allowed: resp.StatusCode == http.StatusOK, status: resp.StatusCode, reason: body.Error.Reason}
}

// fltRunawayPolicy allows what the default policy allows, except tool.spin,
// which it evaluates through a cross product far past any policy.timeout.
const fltRunawayPolicy = `package autonomy

import rego.v1

default allow := false

allow if {
	input.action.kind != "tool.spin"
	input.action.kind == ""
}

allow if {
	input.action.kind != "tool.spin"
	data.autonomy.capabilities[input.action.kind]
}

allow if {
	input.action.kind == "tool.spin"
	count([1 | some i in numbers.range(1, 5000); some j in numbers.range(1, 5000)]) > 0
}
`

// fltRunawayData adds tool.spin and tool.sum, whose precondition walks
// args.items squared: a long list spends past the CEL cost limit.
const fltRunawayData = `
    tool.spin:
      zones: ["*"]
      side_effects: false
    tool.sum:
      zones: ["*"]
      side_effects: false
      contract:
        preconditions: ["args.items.all(x, args.items.all(y, x + y >= 0))"]
`

// TestFaultRunawayPolicyAndClause: a Rego policy that would loop for
// minutes is cut off by policy.timeout and a CEL clause that would walk a
// long list squared by the cost limit. Each denies (503 for the policy, 403
// for the clause, at the gate and at preflight) with a line in the log, and
// the next ordinary call is allowed: one bad input does not wedge the
// service.
func TestFaultRunawayPolicyAndClause(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join("..", "internal", "bundle", "default", "data.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	withCaps := strings.Replace(string(data), "  capabilities:\n", "  capabilities:"+fltRunawayData, 1)
	if withCaps == string(data) {
		t.Fatal("the default data.yaml has no capabilities: block to extend")
	}
	files := map[string]string{"bundle/policy.rego": fltRunawayPolicy, "bundle/data.yaml": withCaps,
		"autonomy.yaml": "policy:\n  timeout: 200ms\n"}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := StartServer(t, ServeOptions{Mode: "enforce", Config: filepath.Join(dir, "autonomy.yaml"),
		Args: []string{"--bundle", filepath.Join(dir, "bundle")}})
	authz := s.Authz(t)
	check := func(kind string, args map[string]any, req string) (bool, string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), fltWait)
		defer cancel()
		resp, err := authz.Check(ctx, ToolCheck(kind, args, req, nil))
		if err != nil {
			t.Fatal(err)
		}
		return codes.Code(resp.GetStatus().GetCode()) == codes.OK, resp.GetStatus().GetMessage(),
			int(resp.GetDeniedResponse().GetStatus().GetCode())
	}
	long := make([]any, 400)
	for i := range long {
		long[i] = i
	}
	tests := map[string]struct {
		kind   string
		args   map[string]any
		status int
		reason string
		log    []string // the msg of the line, then what its text mentions
	}{
		"rego loop past policy.timeout": {kind: "tool.spin", args: map[string]any{}, status: http.StatusServiceUnavailable,
			reason: reasonUnavailable, log: []string{"policy evaluation failed; denying", "deadline exceeded"}},
		"CEL walk past the cost limit": {kind: "tool.sum", args: map[string]any{"items": long}, status: http.StatusForbidden,
			reason: "clause: precondition_violated", log: []string{"decision", "clause: precondition_violated"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for i := range 3 {
				allowed, reason, status := check(tc.kind, tc.args, fmt.Sprintf("req-%s-%d", tc.kind, i))
				if allowed || status != tc.status || reason != tc.reason {
					t.Fatalf("allowed=%v %d %q, want a %d deny %q", allowed, status, reason, tc.status, tc.reason)
				}
				// The next ordinary calls are decided as usual.
				if allowed, reason, _ := check("tool.sum", map[string]any{"items": []any{1, 2}}, fmt.Sprintf("req-sum-%d", i)); !allowed {
					t.Fatalf("a small tool.sum after the runaway: denied %q", reason)
				}
				if allowed, reason, _ := check("tool.echo", map[string]any{"msg": "hi"}, fmt.Sprintf("req-echo-%d", i)); !allowed {
					t.Fatalf("tool.echo after the runaway: denied %q", reason)
				}
			}
			wantLog(t, s, tc.log[0], tc.log[1:]...)
		})
	}
	t.Run("CEL walk past the cost limit at preflight", func(t *testing.T) {
		body, _ := json.Marshal(map[string]any{
			"intent": map[string]any{"summary": "sum", "plan_hash": "plan-sum"},
			"plan": map[string]any{"steps": []any{map[string]any{"id": "s1", "kind": "tool.sum", "zone": "z",
				"args": map[string]any{"items": long}}}},
			"context": map[string]any{"actor": map[string]any{"id": "user:sum", "session_id": "session:sum"}},
		})
		status, out, _ := PostJSON(t, s.URL("/v1/preflight"), body)
		var d soakDecision
		if status != http.StatusOK || json.Unmarshal(out, &d) != nil || d.Outcome != "deny" || d.Reason != "clause: precondition_violated" {
			t.Fatalf("preflight with a clause past the cost limit: %d %s", status, out)
		}
		if !strings.Contains(string(out), "cost") {
			t.Errorf("the clause row does not say the cost limit was hit: %s", out)
		}
	})
	if status, body, err := newSoakClient(t, s).get("/readyz"); err != nil || status != http.StatusOK {
		t.Fatalf("/readyz after the runaways: %d %s %v", status, body, err)
	}
}
