package e2e

// The memory attacks of issue 21 against the built binary on loopback, with
// the process's resident memory read from /proc during and after them: the
// gRPC listener under many streams that each declare a large message and
// never finish it, and the HTTP listener under many bodies that never end.
// Each test asserts the peak (VmHWM) against a bound computed from the
// configured keys (docs/SECURITY.md has the formulas) and that the service
// still decides a normal call during and after the attack.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/contractrefine/autonomy/internal/benchutil"
)

const mib = 1 << 20

// memory reads the process's resident memory; it fails the test where
// /proc/<pid>/status cannot be read (not Linux).
func (s *Server) memory(t *testing.T) benchutil.Memory {
	t.Helper()
	m, err := benchutil.ReadMemory(s.cmd.Process.Pid)
	if err != nil {
		t.Fatalf("read the service's memory: %v", err)
	}
	return m
}

// stallOutcome counts how the streams of one attacking connection ended.
type stallOutcome struct {
	opened, refused, exhausted, cut, open int
	sent                                  int64
}

func (o *stallOutcome) add(p stallOutcome) {
	o.opened += p.opened
	o.refused += p.refused
	o.exhausted += p.exhausted
	o.cut += p.cut
	o.open += p.open
	o.sent += p.sent
}

// stallStream is one attacking stream's state on its connection.
type stallStream struct {
	window int64
	sent   int
	ended  string // "" while open; else how the server ended it
}

// stallStreams is one attacking connection: it opens n Check streams, each
// declaring a message of declared bytes, sends send bytes of each as fast
// as HTTP/2 flow control lets it and never finishes one. It holds the
// connection until ctx is done and reports how the streams ended.
func stallStreams(ctx context.Context, addr string, n, declared, send int) (stallOutcome, error) {
	var out stallOutcome
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return out, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	fr := http2.NewFramer(conn, conn)
	var (
		wmu      sync.Mutex // serialises writes
		mu       sync.Mutex // guards what follows
		cond     = sync.NewCond(&mu)
		connWin  = int64(65535)
		initWin  = int64(65535)
		streams  = map[uint32]*stallStream{}
		readErr  error
		readDone bool
	)
	write := func(f func() error) error { wmu.Lock(); defer wmu.Unlock(); return f() }
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		return out, err
	}
	if err := write(func() error { return fr.WriteSettings() }); err != nil {
		return out, err
	}
	go func() {
		dec := hpack.NewDecoder(4096, nil)
		end := func(id uint32, how string) {
			if s := streams[id]; s != nil && s.ended == "" {
				s.ended = how
			}
		}
		for {
			f, err := fr.ReadFrame()
			mu.Lock()
			if err != nil {
				readErr, readDone = err, true
				cond.Broadcast()
				mu.Unlock()
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
						for _, s := range streams {
							s.window += int64(v) - initWin
						}
						initWin = int64(v)
					}
					go write(func() error { return fr.WriteSettingsAck() })
				}
			case *http2.WindowUpdateFrame:
				if f.StreamID == 0 {
					connWin += int64(f.Increment)
				} else if s := streams[f.StreamID]; s != nil {
					s.window += int64(f.Increment)
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					data := f.Data
					go write(func() error { return fr.WritePing(true, data) })
				}
			case *http2.RSTStreamFrame:
				end(f.StreamID, "rst "+f.ErrCode.String())
			case *http2.HeadersFrame:
				fields, err := dec.DecodeFull(f.HeaderBlockFragment())
				if err == nil {
					for _, hf := range fields {
						if hf.Name == "grpc-status" {
							end(f.StreamID, "grpc-status "+hf.Value)
						}
					}
				}
			case *http2.GoAwayFrame:
				for _, s := range streams {
					if s.ended == "" {
						s.ended = "goaway"
					}
				}
			}
			cond.Broadcast()
			mu.Unlock()
		}
	}()
	go func() { <-ctx.Done(); mu.Lock(); cond.Broadcast(); mu.Unlock() }()

	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "autonomy"},
		{":path", "/envoy.service.auth.v3.Authorization/Check"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	mu.Lock()
	for i := range n {
		id := uint32(2*i + 1)
		streams[id] = &stallStream{window: initWin}
		out.opened++
		mu.Unlock()
		err := write(func() error {
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true})
		})
		mu.Lock()
		if err != nil {
			break
		}
	}
	// Send each stream's message, the 5-byte gRPC prefix first, in frames
	// the windows allow, until every stream has sent its part or ended.
	// The stream's bytes are the prefix, then zeros: data[off:off+n] for
	// an offset within the prefix, data[5:5+n] past it.
	data := make([]byte, 5+16<<10)
	binary.BigEndian.PutUint32(data[1:5], uint32(declared))
	const chunk = 16 << 10
	for ctx.Err() == nil && !readDone {
		var id uint32
		var s *stallStream
		pending := false
		for sid, st := range streams {
			if st.ended != "" || st.sent >= send {
				continue
			}
			pending = true
			if st.window > 0 && connWin > 0 {
				id, s = sid, st
				break
			}
		}
		if !pending {
			break
		}
		if s == nil {
			cond.Wait()
			continue
		}
		size := int(min(chunk, s.window, connWin, int64(send-s.sent)))
		off := min(s.sent, 5)
		s.window -= int64(size)
		connWin -= int64(size)
		s.sent += size
		out.sent += int64(size)
		mu.Unlock()
		err := write(func() error { return fr.WriteData(id, false, data[off:off+size]) })
		mu.Lock()
		if err != nil {
			break
		}
	}
	// Hold the connection, never finishing a message, until ctx is done.
	for ctx.Err() == nil && !readDone {
		cond.Wait()
	}
	for _, s := range streams {
		switch s.ended {
		case "":
			out.open++
		case "rst REFUSED_STREAM":
			out.refused++
		case fmt.Sprintf("grpc-status %d", codes.ResourceExhausted):
			out.exhausted++
		default: // cut at grpc.receive_timeout: CANCELLED or a reset
			out.cut++
		}
	}
	err = readErr
	mu.Unlock()
	if ctx.Err() != nil {
		err = nil // the connection was closed by us
	}
	return out, err
}

// sampleMemory reads the service's memory every 50 ms until stop is
// closed and returns the largest VmRSS it saw.
func sampleMemory(s *Server, stop <-chan struct{}) <-chan int64 {
	peak := make(chan int64, 1)
	go func() {
		var max int64
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if m, err := benchutil.ReadMemory(s.cmd.Process.Pid); err == nil && m.RSS > max {
				max = m.RSS
			}
			select {
			case <-stop:
				peak <- max
				return
			case <-tick.C:
			}
		}
	}()
	return peak
}

// checkDecided runs a Check under a fresh preflight until it is allowed:
// a stream refused for grpc.max_bytes_in_flight (RESOURCE_EXHAUSTED, a
// deny at Envoy) is retried until within, which bounds how long the
// attack may keep an honest call out. It returns how many refusals came
// first.
func checkDecided(t *testing.T, s *Server, within time.Duration, tag string) int {
	t.Helper()
	d := passPreflight(t, s, "mem-"+tag)
	c := s.Authz(t)
	deadline := time.Now().Add(within)
	for refused := 0; ; refused++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := c.Check(ctx, ToolCheck("tool.echo", map[string]any{"msg": "hi"}, "req-"+tag,
			map[string]string{"x-autonomy-preflight-id": d.PreflightID}))
		cancel()
		if err == nil {
			wantAllow(t, resp, d.AuditID)
			return refused
		}
		if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
			t.Fatalf("%s: Check after %d refusals: %v", tag, refused, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestGRPCMemoryUnderStalledStreams runs the attack that took the
// listener's RSS from 70 MB to 2.2 GB before it had bounds: 10 connections
// of 250 Check streams, each declaring a 2 MB message and sending 1.9 MB of
// it, never finishing. With the default keys the peak must stay within
// baseline + 2 × grpc.max_bytes_in_flight (the partial messages held, and
// as much again of garbage the Go collector lets build up before it runs)
// + 64 MiB (HTTP/2 frame buffers and goroutines of the streams), and a
// normal Check must be decided during the attack (after at most one
// grpc.receive_timeout of RESOURCE_EXHAUSTED refusals) and after it.
func TestGRPCMemoryUnderStalledStreams(t *testing.T) {
	const (
		conns      = 10
		perConn    = 250
		declared   = 2_000_000
		sent       = 1_900_000
		budget     = 256 * mib        // grpc.max_bytes_in_flight default
		recvWithin = 10 * time.Second // grpc.receive_timeout default
	)
	s := StartServer(t, ServeOptions{})
	s.WaitVerified()
	checkDecided(t, s, time.Second, "before") // warm: the baseline includes a decision's memory
	base := s.memory(t)

	stop := make(chan struct{})
	peakSeen := sampleMemory(s, stop)
	ctx, cancel := context.WithTimeout(context.Background(), recvWithin+5*time.Second)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total stallOutcome
		errs  []error
	)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := stallStreams(ctx, s.GRPCAddr, perConn, declared, sent)
			mu.Lock()
			total.add(o)
			if err != nil {
				errs = append(errs, err)
			}
			mu.Unlock()
		}()
	}
	// During: the attackers have had a second to fill the budget.
	time.Sleep(time.Second)
	during := s.memory(t)
	refusedDuring := checkDecided(t, s, recvWithin+5*time.Second, "during")
	wg.Wait()
	cancel()
	close(stop)
	peakSampled := <-peakSeen
	checkDecided(t, s, time.Second, "after")
	after := s.memory(t)
	if err := errors.Join(errs...); err != nil {
		t.Errorf("attacking connections: %v", err)
	}

	bound := base.RSS + 2*budget + 64*mib
	t.Logf("streams %d: refused by HTTP/2 %d, RESOURCE_EXHAUSTED %d, cut at the receive deadline %d, still open %d; %d MB sent",
		total.opened, total.refused, total.exhausted, total.cut, total.open, total.sent/1e6)
	t.Logf("RSS: baseline %d MB, during %d MB, peak %d MB (VmHWM; sampled %d MB), after %d MB; bound %d MB; honest Check refused %d times during",
		base.RSS/mib, during.RSS/mib, after.Peak/mib, peakSampled/mib, after.RSS/mib, bound/mib, refusedDuring)
	if after.Peak > bound {
		t.Errorf("peak RSS %d MB is past the bound %d MB (baseline %d MB + 2 × grpc.max_bytes_in_flight + 64 MiB)",
			after.Peak/mib, bound/mib, base.RSS/mib)
	}
	if total.open != 0 {
		t.Errorf("%d streams were still open %s after the attack began: grpc.receive_timeout did not cut them", total.open, recvWithin+5*time.Second)
	}
	// How many HTTP/2 refuses for grpc.max_concurrent_streams depends on
	// how fast the refusals for the budget close streams; it is logged.
	if total.exhausted == 0 || total.cut > budget/(2*mib) {
		t.Errorf("want streams past grpc.max_bytes_in_flight refused, and at most %d admitted: %+v", budget/(2*mib), total)
	}
}

// httpMemoryConfig shortens http.read_timeout, which bounds how long an
// admitted body that never ends is held, so the attack ends within the
// test; every other key keeps its default.
const httpMemoryConfig = `contract_refine:
  mode: enforce
http:
  read_timeout: 5s
`

// httpBound is the bound on resident memory under the HTTP attacks, from
// the default keys: the bodies held at once (http.max_bytes_in_flight, 64
// MiB), as much again of the buffers io.ReadAll outgrew while reading
// them, and 32 MiB for the connections' buffers and goroutines.
func httpBound(base int64) int64 { return base + 2*64*mib + 32*mib }

// TestHTTPMemoryUnderHugeArgs runs the first HTTP attack: 20
// concurrent 1 MB dry-run preflights whose args hold 70,000 keys, three
// times over. Before the args bound they peaked at 717 MB (34 MB each to
// decode); now each is a 400 naming the first value past the bound, and
// refusing it decodes nothing, so the peak stays within httpBound.
func TestHTTPMemoryUnderHugeArgs(t *testing.T) {
	const (
		concurrent = 20
		rounds     = 3
		keys       = 70000
	)
	var b bytes.Buffer
	b.WriteString(`{"intent":{"summary":"s","plan_hash":"p"},"plan":{"steps":[{"id":"s1","kind":"tool.echo","zone":"default","args":{`)
	for i := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%08d":%d`, i, i%10)
	}
	b.WriteString(`}}]},"context":{"actor":{"id":"user:example","session_id":"s"}}}`)
	body := b.Bytes()

	s := StartServer(t, ServeOptions{Config: writeFile(t, "autonomy.yaml", httpMemoryConfig)})
	s.WaitVerified()
	passPreflight(t, s, "warm")
	base := s.memory(t)
	statuses := map[string]int{}
	var mu sync.Mutex
	for range rounds {
		var wg sync.WaitGroup
		for range concurrent {
			wg.Add(1)
			go func() {
				defer wg.Done()
				how := postRaw(s.URL("/v1/preflight?dry_run=true"), body)
				mu.Lock()
				statuses[how]++
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	passPreflight(t, s, "after")
	m := s.memory(t)
	t.Logf("%d × %d preflights of %d KB: %v; RSS baseline %d MB, peak %d MB (VmHWM), bound %d MB",
		rounds, concurrent, len(body)>>10, statuses, base.RSS/mib, m.Peak/mib, httpBound(base.RSS)/mib)
	if want := "400 malformed-request /plan/steps/0/args/k00009999"; statuses[want] != rounds*concurrent {
		t.Errorf("want every preflight refused as %q: %v", want, statuses)
	}
	if m.Peak > httpBound(base.RSS) {
		t.Errorf("peak RSS %d MB is past the bound %d MB", m.Peak/mib, httpBound(base.RSS)/mib)
	}
}

// postRaw posts body as JSON and tells how it was answered: the status,
// the first error's code and path, or the transport error.
func postRaw(url string, body []byte) string {
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return "error " + err.Error()
	}
	defer resp.Body.Close()
	var e struct {
		Errors []struct{ Code, Path string } `json:"errors"`
	}
	raw, _ := io.ReadAll(resp.Body)
	if json.Unmarshal(raw, &e) != nil || len(e.Errors) == 0 {
		return strconv.Itoa(resp.StatusCode)
	}
	return fmt.Sprintf("%d %s %s", resp.StatusCode, e.Errors[0].Code, e.Errors[0].Path)
}

// endlessBody is one connection of the second HTTP attack: it declares a
// 1,000,000-byte preflight body, sends send bytes of it and never the
// rest, holding the connection until ctx is done. It returns how the
// server answered: the status with its error code and whether Retry-After
// came, or "none" when nothing came before ctx was done.
func endlessBody(ctx context.Context, addr string, chunk []byte, send int) string {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return "dial " + err.Error()
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	head := "POST /v1/preflight HTTP/1.1\r\nHost: autonomy\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n"
	if _, err := io.WriteString(conn, head); err != nil {
		return "write " + err.Error()
	}
	answered := make(chan string, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			answered <- "none"
			return
		}
		var e struct {
			Errors []struct{ Code string } `json:"errors"`
		}
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		how := strconv.Itoa(resp.StatusCode)
		if json.Unmarshal(raw, &e) == nil && len(e.Errors) > 0 {
			how += " " + e.Errors[0].Code
		}
		if resp.Header.Get("Retry-After") != "" {
			how += " Retry-After"
		}
		answered <- how
	}()
	for sent := 0; sent < send; sent += len(chunk) {
		if _, err := conn.Write(chunk[:min(len(chunk), send-sent)]); err != nil {
			break // refused and closed by the server
		}
	}
	select {
	case how := <-answered:
		return how
	case <-ctx.Done():
		conn.Close()
		return <-answered
	}
}

// TestHTTPMemoryUnderEndlessBodies runs the second HTTP attack:
// 500 connections each sending 900 KB of a 1 MB preflight body that never
// ends. Before http.max_body_requests and http.max_bytes_in_flight they
// held 1.07 GB; now at most 64 bodies are read at once and the rest are
// refused with 503 overloaded and Retry-After before their bodies are
// read, so the peak stays within httpBound. A gRPC Check and /healthz are
// answered during the attack, a preflight after it.
func TestHTTPMemoryUnderEndlessBodies(t *testing.T) {
	const (
		conns = 500
		send  = 900_000
	)
	s := StartServer(t, ServeOptions{Config: writeFile(t, "autonomy.yaml", httpMemoryConfig)})
	s.WaitVerified()
	d := passPreflight(t, s, "during")
	base := s.memory(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second) // past http.read_timeout
	defer cancel()
	chunk := bytes.Repeat([]byte(" "), 64<<10) // white space before a document that never comes
	statuses := map[string]int{}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			how := endlessBody(ctx, s.HTTPAddr, chunk, send)
			mu.Lock()
			statuses[how]++
			mu.Unlock()
		}()
	}
	time.Sleep(time.Second) // the connections are sending
	during := s.memory(t)
	wantAllow(t, checkEcho(t, s.Authz(t), d.PreflightID, "req-during"), d.AuditID)
	if resp, err := http.Get(s.URL("/healthz")); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz during the attack: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	wg.Wait()
	passPreflight(t, s, "after")
	m := s.memory(t)
	t.Logf("%d connections sending %d KB of a body that never ends: %v; RSS baseline %d MB, during %d MB, peak %d MB (VmHWM), bound %d MB",
		conns, send>>10, statuses, base.RSS/mib, during.RSS/mib, m.Peak/mib, httpBound(base.RSS)/mib)
	if statuses["503 overloaded Retry-After"] < conns-64 {
		t.Errorf("want at least %d connections refused with 503 overloaded and Retry-After: %v", conns-64, statuses)
	}
	if m.Peak > httpBound(base.RSS) {
		t.Errorf("peak RSS %d MB is past the bound %d MB", m.Peak/mib, httpBound(base.RSS)/mib)
	}
}

// TestServePacesTheGC: with GOGC unset (empty counts as unset) serve paces
// the collector, and a fresh service's small live heap gets more room than
// Go's default 100 (go_gc_gogc_percent, from the runtime); an operator's
// GOGC stands as written.
func TestServePacesTheGC(t *testing.T) {
	gogc := func(s *Server) float64 {
		t.Helper()
		ms := metricFamilies(t, s)["go_gc_gogc_percent"].GetMetric()
		if len(ms) != 1 {
			t.Fatalf("go_gc_gogc_percent: %d series on /metrics, want 1", len(ms))
		}
		return ms[0].GetGauge().GetValue()
	}
	set := StartServer(t, ServeOptions{Env: []string{"GOGC=150"}})
	if got := gogc(set); got != 150 {
		t.Errorf("GOGC=150: go_gc_gogc_percent %v, want 150", got)
	}
	set.Stop()

	paced := StartServer(t, ServeOptions{Env: []string{"GOGC="}})
	// The pacer sets the percentage after a collection; starting up, and
	// each scrape, allocate enough for one to come.
	deadline := time.Now().Add(20 * time.Second)
	got := gogc(paced)
	for got <= 100 && time.Now().Before(deadline) {
		got = gogc(paced)
	}
	if got <= 100 || got > 400 {
		t.Fatalf("GOGC unset: go_gc_gogc_percent %v, want in (100, 400]", got)
	}
}
