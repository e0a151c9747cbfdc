package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/extauthz"
	"github.com/contractrefine/autonomy/internal/benchutil"
	"github.com/contractrefine/autonomy/internal/config"
	"github.com/contractrefine/autonomy/internal/etcdtest"
	"github.com/contractrefine/autonomy/internal/server"
)

// benchServer is the whole service in process (the WAL fsyncs, the default
// bundle, enforce mode), without its listeners: the benchmarks below call
// its HTTP handler and its gate directly, so a CPU profile of them shows the
// service's own work and nothing of the network or of a client.
func benchServer(b *testing.B) *server.Server {
	b.Helper()
	return benchServerOn(b, nil)
}

// benchServerOn is benchServer on the etcd endpoints given; on bbolt when
// there are none.
func benchServerOn(b *testing.B, endpoints []string) *server.Server {
	b.Helper()
	cfg := config.Default()
	cfg.DataDir = b.TempDir()
	cfg.ContractRefine.Mode = "enforce"
	cfg.Store.Etcd.Endpoints = endpoints
	s, err := server.New(context.Background(), cfg, server.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	// On etcd the store settles what a crash may have left before its log
	// writes: the service answers 503 until /readyz says it is ready.
	for deadline := time.Now().Add(30 * time.Second); len(endpoints) > 0; time.Sleep(10 * time.Millisecond) {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if rec.Code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the service on etcd is not ready within 30s: %d %s", rec.Code, rec.Body)
		}
	}
	return s
}

func postPreflight(h http.Handler, session string) (string, error) {
	req := httptest.NewRequest(http.MethodPost, "/v1/preflight", bytes.NewReader(preflightBody(session)))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return "", fmt.Errorf("POST /v1/preflight: %d %s", rec.Code, rec.Body)
	}
	var d struct {
		PreflightID string `json:"preflight_id"`
	}
	err := json.Unmarshal(rec.Body.Bytes(), &d)
	return d.PreflightID, err
}

// BenchmarkServicePreflight is POST /v1/preflight of a one-step plan, fresh
// session each, through the service's handler, by 1 and 64 callers.
func BenchmarkServicePreflight(b *testing.B) {
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("conc=%d", conc), func(b *testing.B) {
			h := benchServer(b).Handler()
			b.ReportAllocs()
			b.ResetTimer()
			benchutil.Parallel(b, conc, func(i int) error {
				_, err := postPreflight(h, fmt.Sprintf("session:bench-%d", i))
				return err
			})
		})
	}
}

// BenchmarkServiceCheck is the gRPC Check through the service's gate and the
// ext_authz translation, by 1 and 64 callers: consume (a fresh preflight id
// each, made beforehand and not timed), replay (an id already consumed) and
// no_header (tool.shell without the header).
func BenchmarkServiceCheck(b *testing.B) {
	cases := []struct {
		name  string
		fresh bool   // a fresh id per call
		kind  string // the tool kind called
		code  int32
	}{
		{"consume", true, "tool.echo", 0},
		{"replay", false, "tool.echo", 7},
		{"no_header", false, "tool.shell", 7},
	}
	for _, tc := range cases {
		for _, conc := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/conc=%d", tc.name, conc), func(b *testing.B) {
				s := benchServer(b)
				h := s.Handler()
				srv := extauthz.NewServer(s.Gate())
				cl := newClient()
				ctx := context.Background()
				n := 1
				if tc.fresh {
					n = b.N
				}
				idList := make([]string, n)
				for i := range idList {
					id, err := postPreflight(h, fmt.Sprintf("session:bench-%d", i))
					if err != nil {
						b.Fatal(err)
					}
					idList[i] = id
				}
				if !tc.fresh && tc.kind == "tool.echo" {
					if _, err := srv.Check(ctx, cl.checkRequest("tool.echo", idList[0])); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				benchutil.Parallel(b, conc, func(i int) error {
					id := ""
					switch {
					case tc.fresh:
						id = idList[i]
					case tc.kind == "tool.echo":
						id = idList[0]
					}
					resp, err := srv.Check(ctx, cl.checkRequest(tc.kind, id))
					if err == nil && resp.GetStatus().GetCode() != tc.code {
						err = fmt.Errorf("check %d: %v", i, resp.GetStatus())
					}
					return err
				})
			})
		}
	}
}

// benchEtcdServer is benchServer on a one-member etcd of its own, run in a
// helper process, so a CPU profile shows the service and its etcd client
// and nothing of the member; it returns the member's process id too.
func benchEtcdServer(b *testing.B) (*server.Server, int) {
	b.Helper()
	c, err := etcdtest.Start(etcdtest.Options{Kind: etcdtest.Process, Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return benchServerOn(b, c.Endpoints()), c.Members[0].Pid()
}

// BenchmarkServiceEtcd is BenchmarkServicePreflight and the consume of
// BenchmarkServiceCheck on etcd (one replica), by 1 and 64 callers.
func BenchmarkServiceEtcd(b *testing.B) {
	for _, conc := range []int{1, 64} {
		b.Run(fmt.Sprintf("preflight/conc=%d", conc), func(b *testing.B) {
			s, member := benchEtcdServer(b)
			h := s.Handler()
			b.ReportAllocs()
			b.ResetTimer()
			withProcCounts(b, member, func() {
				benchutil.Parallel(b, conc, func(i int) error {
					_, err := postPreflight(h, fmt.Sprintf("session:bench-%d", i))
					return err
				})
			})
		})
		b.Run(fmt.Sprintf("consume/conc=%d", conc), func(b *testing.B) {
			s, member := benchEtcdServer(b)
			h := s.Handler()
			srv := extauthz.NewServer(s.Gate())
			cl := newClient()
			ctx := context.Background()
			idList := make([]string, b.N)
			err := func() error {
				var mu sync.Mutex
				var first error
				var wg sync.WaitGroup
				for w := range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := w; i < b.N; i += 16 {
							id, err := postPreflight(h, fmt.Sprintf("session:bench-%d", i))
							if err != nil {
								mu.Lock()
								first = cmp.Or(first, err)
								mu.Unlock()
								return
							}
							idList[i] = id
						}
					}()
				}
				wg.Wait()
				return first
			}()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			withProcCounts(b, member, func() {
				benchutil.Parallel(b, conc, func(i int) error {
					resp, err := srv.Check(ctx, cl.checkRequest("tool.echo", idList[i]))
					if err == nil && resp.GetStatus().GetCode() != 0 {
						err = fmt.Errorf("check %d: %v", i, resp.GetStatus())
					}
					return err
				})
			})
		})
	}
}

// withProcCounts runs the timed part of a benchmark and reports the CPU
// and the context switches this process spent per op, and the CPU the
// etcd member's process (member) spent per op: figures the machine's
// other load moves less than the time per op.
func withProcCounts(b *testing.B, member int, run func()) {
	pid := os.Getpid()
	cpu0, err0 := cpuTime(pid)
	sw0, err1 := switches(pid)
	m0, err2 := cpuTime(member)
	run()
	cpu1, err3 := cpuTime(pid)
	sw1, err4 := switches(pid)
	m1, err5 := cpuTime(member)
	if err := cmp.Or(err0, err1, err2, err3, err4, err5); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cpu1-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(sw1-sw0)/float64(b.N), "cs/op")
	b.ReportMetric(float64(m1-m0)/float64(time.Microsecond)/float64(b.N), "member-cpu-µs/op")
}
