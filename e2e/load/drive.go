package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

// result is one scenario at one concurrency.
type result struct {
	Target      string  `json:"target"`
	Scenario    string  `json:"scenario"`
	Conc        int     `json:"conc"`
	Calls       int     `json:"calls"`
	Errors      int     `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	Seconds     float64 `json:"seconds"`
	PerSecond   float64 `json:"per_second"`
	P50Micros   float64 `json:"p50_us"`
	P99Micros   float64 `json:"p99_us"`
	RanOutOfIDs bool    `json:"ran_out_of_ids,omitempty"`
	// CPUMicros is the CPU the measured process (the floor's or the
	// service's) spent per call, user and system.
	CPUMicros float64 `json:"cpu_us_per_call,omitempty"`
	// SwitchesPerCall are the context switches of the measured process's
	// threads per call, voluntary and not: the wake-ups and hand-offs a
	// call costs, which the machine's other load moves little.
	SwitchesPerCall float64 `json:"switches_per_call,omitempty"`
	// WritesPerCommit is how many writes the service's WAL commits carried
	// on average during the scenario (group commit); 0 for the floors.
	WritesPerCommit float64 `json:"wal_writes_per_commit,omitempty"`
	// CommitsPerCall is the service's WAL commits per call.
	CommitsPerCall float64 `json:"wal_commits_per_call,omitempty"`
	// CommitMicros is how long the service's WAL commits took on average,
	// fsyncs included.
	CommitMicros float64 `json:"wal_us_per_commit,omitempty"`
	// EtcdRequestsPerCall is how many KV requests (Range, Put, Txn, …) etcd
	// answered per call during the scenario, from all replicas; 0 off etcd.
	EtcdRequestsPerCall float64 `json:"etcd_requests_per_call,omitempty"`
	// EtcdProposalsPerCall is how many raft entries etcd committed per
	// call (a write transaction is one, a read none).
	EtcdProposalsPerCall float64 `json:"etcd_proposals_per_call,omitempty"`
	// lat is every call's latency, sorted, for merging results (merge).
	lat []time.Duration
}

// call is one request; i numbers it within its scenario.
type call func(ctx context.Context, i int) error

// drive runs fn from conc goroutines until d has passed or limit calls
// (when limit > 0) were made, timing every call.
func drive(ctx context.Context, conc int, d time.Duration, limit int, fn call) result {
	return driveBetween(ctx, conc, d, limit, fn, nil)
}

// driveBetween is drive, calling between (when not nil) after each call,
// outside its timing; an error from between counts as the call's.
func driveBetween(ctx context.Context, conc int, d time.Duration, limit int, fn call, between func() error) result {
	var (
		next     atomic.Int64
		errs     atomic.Int64
		firstErr atomic.Value
		wg       sync.WaitGroup
	)
	lat := make([][]time.Duration, conc)
	start := time.Now()
	deadline := start.Add(d)
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, 4096)
			for ctx.Err() == nil && time.Now().Before(deadline) {
				i := int(next.Add(1)) - 1
				if limit > 0 && i >= limit {
					break
				}
				t0 := time.Now()
				err := fn(ctx, i)
				mine = append(mine, time.Since(t0))
				if between != nil && err == nil {
					err = between()
				}
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
			lat[w] = mine
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	r := summarize(conc, all, elapsed)
	r.Errors = int(errs.Load())
	if s, ok := firstErr.Load().(string); ok {
		r.FirstError = s
	}
	r.RanOutOfIDs = limit > 0 && int(next.Load()) >= limit && elapsed < d
	return r
}

// summarize is the result of the calls timed in lat (sorted here) over
// elapsed at conc.
func summarize(conc int, lat []time.Duration, elapsed time.Duration) result {
	slices.Sort(lat)
	r := result{Conc: conc, Calls: len(lat), Seconds: elapsed.Seconds(), lat: lat}
	if elapsed > 0 {
		r.PerSecond = float64(len(lat)) / elapsed.Seconds()
	}
	if len(lat) > 0 {
		r.P50Micros = micros(lat[len(lat)/2])
		r.P99Micros = micros(lat[min(len(lat)-1, len(lat)*99/100)])
	}
	return r
}

// sampler times a floor's operation made after each serial call of a
// scenario (driveBetween), outside the call's timing, so the floor and the
// call are measured at the same moments: on a disk or an etcd member shared
// with other work a sync's cost swings by several times within a minute.
type sampler struct {
	op  func() error
	lat []time.Duration
}

// sample makes one timed operation.
func (s *sampler) sample() error {
	t0 := time.Now()
	err := s.op()
	s.lat = append(s.lat, time.Since(t0))
	return err
}

// samples is how many operations were made so far; 0 for a nil sampler.
func (s *sampler) samples() int {
	if s == nil {
		return 0
	}
	return len(s.lat)
}

// result is the operations made so far; its rate is meaningless (they were
// spread over a scenario) and left out.
func (s *sampler) result() result {
	return summarize(1, s.lat, 0)
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// client is the one client every target is driven with.
type client struct {
	http *http.Client
	run  string // makes session ids and request ids unique per run
	seq  atomic.Int64
}

func newClient() *client {
	return &client{
		http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			MaxIdleConns: 1024, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute}},
		run: strconv.FormatInt(time.Now().UnixNano(), 36),
	}
}

func (c *client) dial(addr string) (authv3.AuthorizationClient, io.Closer, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	return authv3.NewAuthorizationClient(conn), conn, nil
}

// preflightBody is a one-step tool.echo PreflightRequest in its own session.
func preflightBody(session string) []byte {
	return []byte(`{"intent":{"summary":"load","plan_hash":"plan-load"},` +
		`"plan":{"steps":[{"id":"s1","kind":"tool.echo","zone":"default","args":{"msg":"hi"}}]},` +
		`"context":{"actor":{"id":"user:load","session_id":"` + session + `"}}}`)
}

// preflight posts one preflight to base and returns its id.
func (c *client) preflight(ctx context.Context, base string) (string, error) {
	session := fmt.Sprintf("session:%s-%d", c.run, c.seq.Add(1))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/preflight", bytes.NewReader(preflightBody(session)))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("POST /v1/preflight: %d %s", resp.StatusCode, body)
	}
	var d struct {
		PreflightID string `json:"preflight_id"`
		Outcome     string `json:"outcome"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		return "", fmt.Errorf("POST /v1/preflight: %w", err)
	}
	if d.Outcome != "pass" {
		return "", fmt.Errorf("POST /v1/preflight: outcome %q, want pass", d.Outcome)
	}
	return d.PreflightID, nil
}

// checkRequest is what Envoy sends for POST /v1/tool of kind with the
// preflight id header when id is not "".
func (c *client) checkRequest(kind, id string) *authv3.CheckRequest {
	h := map[string]string{"content-type": "application/json",
		"x-request-id": fmt.Sprintf("req-%s-%d", c.run, c.seq.Add(1))}
	if id != "" {
		h["x-autonomy-preflight-id"] = id
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{Address: &corev3.Address{}},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Method: http.MethodPost, Path: "/v1/tool", Host: "tools.local", Protocol: "HTTP/1.1",
			Headers: h, Body: `{"kind":"` + kind + `","args":{"msg":"hi"}}`,
		}},
	}}
}

var errUnexpected = errors.New("unexpected answer")

// check sends one Check and wants code and, on a deny, reason.
func check(ctx context.Context, ac authv3.AuthorizationClient, req *authv3.CheckRequest, code codes.Code, reason string) error {
	resp, err := ac.Check(ctx, req)
	if err != nil {
		return err
	}
	st := resp.GetStatus()
	if codes.Code(st.GetCode()) != code || (code != codes.OK && st.GetMessage() != reason) {
		return fmt.Errorf("%w: %s %q, want %s %q", errUnexpected, codes.Code(st.GetCode()), st.GetMessage(), code, reason)
	}
	return nil
}

// idPool hands out fresh preflight ids, each once.
type idPool struct {
	mu  sync.Mutex
	ids []string
}

func (p *idPool) add(id string) {
	p.mu.Lock()
	p.ids = append(p.ids, id)
	p.mu.Unlock()
}

func (p *idPool) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ids)
}

// take removes and returns all ids.
func (p *idPool) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.ids
	p.ids = nil
	return out
}
