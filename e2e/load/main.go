package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/grpc/codes"

	"github.com/contractrefine/autonomy/internal/benchutil"
	"github.com/contractrefine/autonomy/internal/etcdtest"
	"github.com/contractrefine/autonomy/preflight"
	"github.com/contractrefine/autonomy/wal"
)

// Scenario names, as printed and in the JSON report.
const (
	scFloorCheck = "check (floor)"
	scFloorHTTP  = "http (floor)"
	scPreflight  = "preflight"
	scConsume    = "check consume"
	scReplay     = "check replay"
	scNoHeader   = "check no-header"
)

// Targets.
const (
	targetFloor   = "floor"
	targetService = "service"
	targetFilled  = "service, filled wal"
)

// settings is the command line.
type settings struct {
	bin      string
	duration time.Duration
	conc     []int
	fill     int
	cached   int
	frames   int
	maxIDs   int
	jsonPath string
	// serviceEnv is added to the service's environment (GOGC=400, say).
	serviceEnv []string
	// opaEnvoy is the opa-envoy-plugin binary measured beside the service;
	// "" skips those rows.
	opaEnvoy string
	// noDecisionLog runs the service with log.decisions off.
	noDecisionLog bool
	// etcd adds the runs on the etcd backend (etcd.go).
	etcd bool
	// serviceArgs are more flags of the service's serve.
	serviceArgs []string
	// rounds splits every scenario of the main run into this many slices
	// of duration/rounds, the targets taking turns slice by slice.
	rounds int
}

// report is everything one run measured.
type report struct {
	Machine string   `json:"machine"`
	Runs    []result `json:"runs"`
	// Memory of the service after the main scenarios.
	Memory memory `json:"memory"`
	// Fill: the -fill run.
	FillFrames  int     `json:"fill_frames,omitempty"`
	FillSeconds float64 `json:"fill_seconds,omitempty"`
	// Cached: the -cached run.
	Cached           int     `json:"cached,omitempty"`
	CachedBefore     memory  `json:"cached_memory_before"`
	CachedMemory     memory  `json:"cached_memory"`
	CachedLookupSecs float64 `json:"cached_lookup_seconds,omitempty"`
	// Frames: the -frames run.
	FramePreflights int     `json:"frame_preflights,omitempty"`
	FileBytes       int64   `json:"file_bytes,omitempty"`
	FileBytesPer    float64 `json:"file_bytes_per_preflight,omitempty"`
	UsedBytes       int64   `json:"used_bytes,omitempty"`
	UsedBytesPer    float64 `json:"used_bytes_per_preflight,omitempty"`
	FrameBytesPer   float64 `json:"stored_frame_bytes_per_preflight,omitempty"`
	// OPADecisionLogBytes is what OPA-Envoy with its decision log wrote.
	OPADecisionLogBytes int64  `json:"opa_envoy_decision_log_bytes,omitempty"`
	Goals               []goal `json:"goals"`
}

// goal is one of issue 7's ratios.
type goal struct {
	Name  string  `json:"name"`
	Got   float64 `json:"got"`
	Want  string  `json:"want"`
	Met   bool    `json:"met"`
	Notes string  `json:"notes,omitempty"`
}

func main() {
	etcdtest.RunMemberIfAsked() // the etcd member of -etcd, when this is its process
	if os.Getenv(floorEnv) != "" {
		if err := serveFloors(); err != nil {
			fmt.Fprintln(os.Stderr, "load floors:", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (settings, error) {
	var cfg settings
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.StringVar(&cfg.bin, "bin", "", "autonomy binary to measure (default: build ./cmd/autonomy)")
	fs.DurationVar(&cfg.duration, "duration", 3*time.Second, "how long each scenario runs at each concurrency")
	fs.IntVar(&cfg.rounds, "rounds", 3, "main run: split each scenario into this many slices, every target taking its turn in each round")
	conc := fs.String("conc", "1,64", "comma-separated concurrencies")
	fs.IntVar(&cfg.fill, "fill", 0, "also run the service scenarios on a WAL pre-filled with this many frames")
	fs.IntVar(&cfg.cached, "cached", 0, "also measure RSS with this many bindings in the binding cache")
	fs.IntVar(&cfg.frames, "frames", 5000, "one-step preflights for the bytes-per-frame check (0 skips it)")
	fs.IntVar(&cfg.maxIDs, "max-ids", 30000, "most fresh preflight ids made (untimed) for one consume run")
	fs.StringVar(&cfg.jsonPath, "json", "", "also write the report as JSON to this file")
	fs.StringVar(&cfg.opaEnvoy, "opa-envoy", "", "opa-envoy-plugin binary to measure beside the service, without and with its decision log")
	fs.BoolVar(&cfg.etcd, "etcd", false, "also run the service scenarios on etcd: one replica, then three, on a local one-member etcd (etcd.go)")
	fs.BoolVar(&cfg.noDecisionLog, "no-decision-log", false, "run the service with log.decisions: false (no log line per decision; the WAL still holds each)")
	env := fs.String("service-env", "", "comma-separated NAME=VALUE pairs added to the service's environment (GOGC=400,GOMEMLIMIT=120MiB)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	for _, s := range strings.Split(*conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return cfg, fmt.Errorf("-conc %q: want positive integers", *conc)
		}
		cfg.conc = append(cfg.conc, n)
	}
	for _, kv := range strings.Split(*env, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		if name, _, ok := strings.Cut(kv, "="); !ok || name == "" {
			return cfg, fmt.Errorf("-service-env %q: want NAME=VALUE pairs", *env)
		}
		cfg.serviceEnv = append(cfg.serviceEnv, kv)
	}
	if cfg.duration <= 0 {
		return cfg, errors.New("-duration must be positive")
	}
	if cfg.rounds < 1 || cfg.duration/time.Duration(cfg.rounds) < 10*time.Millisecond {
		return cfg, fmt.Errorf("-rounds %d: want 1 or more, each slice of -duration at least 10ms", cfg.rounds)
	}
	return cfg, nil
}

// run measures everything cfg asks for, printing as it goes to out.
func run(ctx context.Context, cfg settings, out io.Writer) (*report, error) {
	work, err := os.MkdirTemp("", "autonomy-load-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	if cfg.bin == "" {
		fmt.Fprintln(out, "building ./cmd/autonomy ...")
		if cfg.bin, err = buildService(work); err != nil {
			return nil, err
		}
	}
	rep := &report{Machine: fmt.Sprintf("%s/%s, %d CPUs (GOMAXPROCS %d)", runtime.GOOS, runtime.GOARCH,
		runtime.NumCPU(), runtime.GOMAXPROCS(0))}
	printSettings(out, cfg, rep)

	cl := newClient()
	if err := mainRun(ctx, cfg, cl, rep, out, work); err != nil {
		return nil, err
	}

	// The runs each on a service of its own, in this order.
	for _, x := range []struct {
		on  bool
		dir string
		run func(context.Context, settings, *client, *report, io.Writer, string) error
	}{
		{cfg.etcd, "etcd", etcdRun},
		{cfg.fill > 0, "filled", fillRun},
		{cfg.cached > 0, "cached", cachedRun},
		{cfg.frames > 0, "frames", framesRun},
	} {
		if !x.on {
			continue
		}
		if err := x.run(ctx, cfg, cl, rep, out, filepath.Join(work, x.dir)); err != nil {
			return nil, err
		}
	}
	rep.judge(cfg)
	rep.judgeEtcd(cfg)
	rep.print(out)
	if cfg.jsonPath != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(cfg.jsonPath, b, 0o644); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// mainRun measures the floors, OPA-Envoy when given, and the service on an
// empty WAL, concurrency by concurrency, with the least durable write
// measured between the serial consumes; then the service's memory.
func mainRun(ctx context.Context, cfg settings, cl *client, rep *report, out io.Writer, work string) error {
	// The store's floor, measured between the serial consumes.
	least, err := benchutil.NewLeastWriter(filepath.Join(work, "least"))
	if err != nil {
		return err
	}
	defer least.Close()

	floors, faddrs, err := startFloors()
	if err != nil {
		return err
	}
	defer floors.stop()
	floorAC, floorConn, err := cl.dial(faddrs.GRPC)
	if err != nil {
		return err
	}
	defer floorConn.Close()

	var opa *opaPair
	if cfg.opaEnvoy != "" {
		if opa, err = startOPAPair(ctx, cl, cfg.opaEnvoy, filepath.Join(work, "opa-envoy")); err != nil {
			return err
		}
		defer opa.close()
	} else {
		fmt.Fprintln(out, "opa-envoy rows skipped: no -opa-envoy binary given")
	}

	// The main run: floors, OPA-Envoy and the service on an empty WAL,
	// taking turns in rounds (inRounds) so that every ratio compares
	// figures taken over the same stretches of the machine's time.
	svc, err := newService(ctx, cfg, cl, filepath.Join(work, "empty"), true)
	if err != nil {
		return err
	}
	svc.between = &sampler{op: least.Write}
	floorHTTP := "http://" + faddrs.HTTP
	for _, conc := range cfg.conc {
		fmt.Fprintf(out, "concurrency %d: %d rounds of %s a scenario ...\n", conc, cfg.rounds, cfg.duration/time.Duration(cfg.rounds))
		err := inRounds(rep, out, cfg.rounds, cfg.duration, func(part *report, d time.Duration) error {
			measureFloors(ctx, part, io.Discard, cl, floors, floorAC, floorHTTP, conc, d)
			if opa != nil {
				opa.measure(ctx, part, io.Discard, cl, conc, d)
			}
			floorRate := part.find(targetFloor, scFloorCheck, conc).PerSecond
			return svc.scenarios(ctx, part, io.Discard, targetService, conc, floorRate, d)
		})
		if err != nil {
			svc.close()
			return err
		}
	}
	if svc.between.samples() > 0 {
		rep.add(out, targetStore, scBoltWrite, svc.between.result())
	}
	rep.Memory, err = rss(svc.proc.pid())
	if err != nil {
		svc.close()
		return err
	}
	fmt.Fprintf(out, "service memory after the runs: %s\n", rep.Memory)
	if opa != nil {
		rep.OPADecisionLogBytes = opa.decisionLogBytes()
		fmt.Fprintf(out, "opa-envoy's decision log: %d bytes written\n", rep.OPADecisionLogBytes)
	}
	return svc.close()
}

// printSettings prints what the run measures on: the machine and the
// service's settings.
func printSettings(out io.Writer, cfg settings, rep *report) {
	fmt.Fprintf(out, "machine: %s; %s per scenario; concurrency %v\n", rep.Machine, cfg.duration, cfg.conc)
	if len(cfg.serviceEnv) > 0 {
		fmt.Fprintf(out, "service environment: %s\n", strings.Join(cfg.serviceEnv, " "))
	}
	if cfg.noDecisionLog {
		fmt.Fprintln(out, "service: log.decisions false (no decision log lines)")
	} else {
		fmt.Fprintln(out, "service: one decision log line per decision, to a file (the default)")
	}
}

// measureFloors runs the trivial gRPC Check and HTTP servers' scenarios at
// conc, with the CPU their process spent per call.
func measureFloors(ctx context.Context, rep *report, out io.Writer, cl *client, floors *proc,
	floorAC authv3.AuthorizationClient, floorHTTP string, conc int, d time.Duration) {
	r := withCPU(floors.pid(), func() result {
		return drive(ctx, conc, d, 0, func(ctx context.Context, i int) error {
			return check(ctx, floorAC, cl.checkRequest("tool.echo", "pf_floorfloorfloorfloor"), codes.OK, "")
		})
	})
	rep.add(out, targetFloor, scFloorCheck, r)
	r = withCPU(floors.pid(), func() result {
		return drive(ctx, conc, d, 0, func(ctx context.Context, i int) error {
			_, err := cl.preflight(ctx, floorHTTP)
			if err != nil && strings.Contains(err.Error(), "want pass") {
				err = nil
			}
			return err
		})
	})
	rep.add(out, targetFloor, scFloorHTTP, r)
}

// service is a running autonomy serve with a client on it.
type service struct {
	cfg   settings
	cl    *client
	proc  *proc
	base  string
	ac    authv3.AuthorizationClient
	conn  io.Closer
	pool  idPool
	spent string // an id already consumed, for replays
	// between, when set, samples a store's floor after each serial
	// consume: the least durable bbolt write (boltfloor.go), or on etcd a
	// put-if-absent transaction (etcd.go).
	between *sampler
	// others are more replicas sharing the service's store (etcd.go): the
	// scenarios spread their calls over all of them.
	others []*service
	// etcd, when set, is the client URL of the etcd the replicas share:
	// measure reads its request counters from its /metrics.
	etcd string
}

// at is the replica call i goes to: calls spread round-robin.
func (s *service) at(i int) *service {
	if len(s.others) == 0 {
		return s
	}
	if i %= len(s.others) + 1; i == 0 {
		return s
	}
	return s.others[i-1]
}

// newService starts the service on dir; warm makes 50 preflights and
// consumes them first.
func newService(ctx context.Context, cfg settings, cl *client, dir string, warm bool) (*service, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	p, addrs, err := startService(cfg.bin, dir, cfg.serviceEnv, !cfg.noDecisionLog, cfg.serviceArgs...)
	if err != nil {
		return nil, err
	}
	s := &service{cfg: cfg, cl: cl, proc: p, base: "http://" + addrs.HTTP}
	if err := cl.waitReady(ctx, s.base, p.exited); err != nil {
		p.stop()
		return nil, err
	}
	if s.ac, s.conn, err = cl.dial(addrs.GRPC); err != nil {
		p.stop()
		return nil, err
	}
	// Warm up (untimed): connections, the policy, the first commits; and
	// spend one id for the replay scenario.
	for n := 0; warm && n < 50; n++ {
		id, err := cl.preflight(ctx, s.base)
		if err != nil {
			s.close()
			return nil, err
		}
		if err := check(ctx, s.ac, cl.checkRequest("tool.echo", id), codes.OK, ""); err != nil {
			s.close()
			return nil, err
		}
		s.spent = id
	}
	return s, nil
}

func (s *service) close() error {
	if s.conn != nil {
		s.conn.Close()
	}
	return s.proc.stop()
}

// scenarios runs the four service scenarios at conc. floorRate bounds how
// many fresh ids the consume run can use.
func (s *service) scenarios(ctx context.Context, rep *report, out io.Writer, target string, conc int, floorRate float64, d time.Duration) error {
	r := s.measure(ctx, func() result {
		return drive(ctx, conc, d, 0, func(ctx context.Context, i int) error {
			id, err := s.cl.preflight(ctx, s.at(i).base)
			if err == nil {
				s.pool.add(id)
			}
			return err
		})
	})
	rep.add(out, target, scPreflight, r)

	// Fresh ids for the consume run, made now and not timed.
	want := min(s.cfg.maxIDs, int(floorRate*d.Seconds()*1.2)+100)
	if err := s.topUp(ctx, want); err != nil {
		return err
	}
	fresh := s.pool.take()
	var between func() error
	if s.between != nil && conc == 1 {
		between = s.between.sample
	}
	r = s.measure(ctx, func() result {
		return driveBetween(ctx, conc, d, len(fresh), func(ctx context.Context, i int) error {
			// On several replicas, most ids are consumed on another
			// replica than the one that made them.
			return check(ctx, s.at(i+1).ac, s.cl.checkRequest("tool.echo", fresh[i]), codes.OK, "")
		}, between)
	})
	rep.add(out, target, scConsume, r)

	r = s.measure(ctx, func() result {
		return drive(ctx, conc, d, 0, func(ctx context.Context, i int) error {
			return check(ctx, s.at(i).ac, s.cl.checkRequest("tool.echo", s.spent), codes.PermissionDenied, preflight.ReasonReplay)
		})
	})
	rep.add(out, target, scReplay, r)

	r = s.measure(ctx, func() result {
		return drive(ctx, conc, d, 0, func(ctx context.Context, i int) error {
			return check(ctx, s.at(i).ac, s.cl.checkRequest("tool.shell", ""), codes.PermissionDenied, preflight.ReasonPreflightRequired)
		})
	})
	rep.add(out, target, scNoHeader, r)
	return nil
}

// measure runs one scenario against the service and adds the CPU it spent
// per call and what its WAL's group commit did meanwhile (read from its own
// /metrics), so a figure can be traced to commits as well as to CPU.
func (s *service) measure(ctx context.Context, run func() result) result {
	if s.etcd != "" {
		e0, err0 := etcdRequests(ctx, s.cl.http, s.etcd)
		b0 := s.between.samples()
		r := s.measureService(ctx, run)
		e1, err1 := etcdRequests(ctx, s.cl.http, s.etcd)
		// Each sample between the calls is one request and one entry
		// of the load's own, not the service's.
		if b := float64(s.between.samples() - b0); err0 == nil && err1 == nil && r.Calls > 0 {
			r.EtcdRequestsPerCall = (e1.requests - e0.requests - b) / float64(r.Calls)
			r.EtcdProposalsPerCall = (e1.proposals - e0.proposals - b) / float64(r.Calls)
		}
		return r
	}
	return s.measureService(ctx, run)
}

// measureService is measure's part read from the service's process and
// /metrics.
func (s *service) measureService(ctx context.Context, run func() result) result {
	if len(s.others) > 0 {
		return run() // one process's CPU and commits would not be the call's
	}
	w0, err0 := walCommits(ctx, s.cl.http, s.base)
	r := withCPU(s.proc.pid(), run)
	if r.Errors > 0 {
		r.FirstError += s.proc.errorLines(3)
	}
	w1, err1 := walCommits(ctx, s.cl.http, s.base)
	if commits := w1.commits - w0.commits; err0 == nil && err1 == nil && commits > 0 && r.Calls > 0 {
		r.WritesPerCommit = (w1.writes - w0.writes) / commits
		r.CommitsPerCall = commits / float64(r.Calls)
		r.CommitMicros = (w1.seconds - w0.seconds) / commits * 1e6
	}
	return r
}

// topUp makes preflights at concurrency 64 until the pool holds want ids.
func (s *service) topUp(ctx context.Context, want int) error {
	need := want - s.pool.len()
	if need <= 0 {
		return nil
	}
	r := drive(ctx, 64, time.Hour, need, func(ctx context.Context, i int) error {
		id, err := s.cl.preflight(ctx, s.at(i).base)
		if err == nil {
			s.pool.add(id)
		}
		return err
	})
	if r.Errors > 0 {
		return fmt.Errorf("load: making fresh preflight ids: %d errors, first: %s", r.Errors, r.FirstError)
	}
	return ctx.Err()
}

// fillRun repeats the service scenarios on a WAL pre-filled with cfg.fill
// frames.
func fillRun(ctx context.Context, cfg settings, cl *client, rep *report, out io.Writer, dir string) error {
	fmt.Fprintf(out, "filling a WAL with %d frames ...\n", cfg.fill)
	start := time.Now()
	if _, err := fillWAL(ctx, dir, cfg.fill, 0); err != nil {
		return err
	}
	rep.FillFrames, rep.FillSeconds = cfg.fill, time.Since(start).Seconds()
	fmt.Fprintf(out, "filled in %.1f s\n", rep.FillSeconds)
	svc, err := newService(ctx, cfg, cl, dir, true)
	if err != nil {
		return err
	}
	for _, conc := range cfg.conc {
		floorRate := rep.find(targetFloor, scFloorCheck, conc).PerSecond
		if err := svc.scenarios(ctx, rep, out, targetFilled, conc, floorRate, cfg.duration); err != nil {
			svc.close()
			return err
		}
	}
	return svc.close()
}

// cachedRun puts cfg.cached bindings in the service's binding cache and
// reads its RSS. Each binding is looked up once by a Check naming another
// kind: the lookup caches the binding, the mismatch consumes nothing and
// its deny is the gate's cheapest answer, so the run stays well inside the
// cache's 60 s TTL.
func cachedRun(ctx context.Context, cfg settings, cl *client, rep *report, out io.Writer, dir string) error {
	fmt.Fprintf(out, "writing %d live bindings ...\n", cfg.cached)
	live, err := fillWAL(ctx, dir, 0, cfg.cached)
	if err != nil {
		return err
	}
	svc, err := newService(ctx, cfg, cl, dir, true)
	if err != nil {
		return err
	}
	defer svc.close()
	if rep.CachedBefore, err = rss(svc.proc.pid()); err != nil {
		return err
	}
	r := drive(ctx, 64, time.Hour, len(live), func(ctx context.Context, i int) error {
		return check(ctx, svc.ac, cl.checkRequest("tool.sleep", live[i]), codes.PermissionDenied, preflight.ReasonBindingMismatch)
	})
	if r.Errors > 0 {
		return fmt.Errorf("load: caching bindings: %d errors, first: %s", r.Errors, r.FirstError)
	}
	rep.Cached, rep.CachedLookupSecs = r.Calls, r.Seconds
	if rep.CachedMemory, err = rss(svc.proc.pid()); err != nil {
		return err
	}
	fmt.Fprintf(out, "memory with %d bindings cached: %s\n  before the lookups (which took %.1f s): %s\n",
		rep.Cached, rep.CachedMemory, rep.CachedLookupSecs, rep.CachedBefore)
	return nil
}

// usedBytes is the part of a bbolt file holding data: its high-water mark
// less its free pages. The file itself grows in steps of bbolt's AllocSize.
func usedBytes(path string) (int64, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var size int64
	if err := db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil }); err != nil {
		return 0, err
	}
	st := db.Stats()
	return size - int64(st.FreePageN+st.PendingPageN)*int64(db.Info().PageSize), nil
}

// framesRun makes cfg.frames one-step preflights on a fresh WAL, stops the
// service and measures the file.
func framesRun(ctx context.Context, cfg settings, cl *client, rep *report, out io.Writer, dir string) error {
	svc, err := newService(ctx, cfg, cl, dir, false)
	if err != nil {
		return err
	}
	r := drive(ctx, 64, time.Hour, cfg.frames, func(ctx context.Context, i int) error {
		_, err := cl.preflight(ctx, svc.base)
		return err
	})
	if err := svc.close(); err != nil {
		return err
	}
	if r.Errors > 0 {
		return fmt.Errorf("load: preflights for the frame size: %d errors, first: %s", r.Errors, r.FirstError)
	}
	st, err := os.Stat(filepath.Join(dir, wal.FileName))
	if err != nil {
		return err
	}
	db, err := wal.Open(dir, nil)
	if err != nil {
		return err
	}
	stats, err := db.Stats(ctx)
	db.Close()
	if err != nil {
		return err
	}
	n := stats.ByKind[wal.KindPreflight]
	if n == 0 {
		return errors.New("load: no preflight frames in the WAL")
	}
	used, err := usedBytes(filepath.Join(dir, wal.FileName))
	if err != nil {
		return err
	}
	rep.FramePreflights, rep.FileBytes, rep.UsedBytes = n, st.Size(), used
	rep.FileBytesPer = float64(st.Size()) / float64(n)
	rep.UsedBytesPer = float64(used) / float64(n)
	rep.FrameBytesPer = float64(stats.FrameBytes) / float64(stats.Frames)
	fmt.Fprintf(out, "after %d one-step preflights (%d frames): file %d bytes (%.0f per preflight; bbolt grows it in 16 MB steps), "+
		"pages in use %d bytes (%.0f per preflight), stored frame %.0f bytes\n",
		n, stats.Frames, st.Size(), rep.FileBytesPer, used, rep.UsedBytesPer, rep.FrameBytesPer)
	return nil
}

func (rep *report) add(out io.Writer, target, scenario string, r result) {
	r.Target, r.Scenario = target, scenario
	rep.Runs = append(rep.Runs, r)
	note := ""
	if r.Errors > 0 {
		note = fmt.Sprintf("  %d ERRORS, first: %s", r.Errors, r.FirstError)
	}
	if r.RanOutOfIDs {
		note += "  (ran out of fresh ids)"
	}
	cpu := ""
	if r.CPUMicros > 0 {
		cpu = fmt.Sprintf("  cpu %5.0f µs/call", r.CPUMicros)
	}
	if r.SwitchesPerCall > 0 {
		cpu += fmt.Sprintf("  %.1f cs/call", r.SwitchesPerCall)
	}
	if r.CommitsPerCall > 0 {
		cpu += fmt.Sprintf("  wal %.2f commits/call, %.1f writes/commit, %.0f µs/commit", r.CommitsPerCall, r.WritesPerCommit, r.CommitMicros)
	}
	if r.EtcdRequestsPerCall > 0 {
		cpu += fmt.Sprintf("  etcd %.2f requests/call, %.2f raft entries/call", r.EtcdRequestsPerCall, r.EtcdProposalsPerCall)
	}
	fmt.Fprintf(out, "%-20s %-17s conc %3d  %8d calls  %9.0f/s  p50 %8.0f µs  p99 %8.0f µs%s%s\n",
		target, scenario, r.Conc, r.Calls, r.PerSecond, r.P50Micros, r.P99Micros, cpu, note)
}

func (rep *report) find(target, scenario string, conc int) result {
	for _, r := range rep.Runs {
		if r.Target == target && r.Scenario == scenario && r.Conc == conc {
			return r
		}
	}
	return result{}
}

// judge works out the goals of issue 22 (and the scale goals of issue 7)
// that this run measured.
func (rep *report) judge(cfg settings) {
	has := func(c int) bool {
		for _, x := range cfg.conc {
			if x == c {
				return true
			}
		}
		return false
	}
	// ratio judges the service's throughput on sc at c against peer's on
	// peerSc, both of this run.
	ratio := func(sc, peer, peerSc string, c int, want float64) {
		s, p := rep.find(targetService, sc, c), rep.find(peer, peerSc, c)
		if p.PerSecond == 0 {
			return
		}
		got := s.PerSecond / p.PerSecond
		rep.Goals = append(rep.Goals, goal{Name: fmt.Sprintf("%s at %d: throughput / %s %s", sc, c, peer, peerSc),
			Got: got, Want: fmt.Sprintf(">= %.1f", want), Met: got >= want})
	}
	if has(64) {
		ratio(scConsume, targetOPALog, scOPAAllow, 64, 1.0)
		ratio(scConsume, targetOPA, scOPAAllow, 64, 0.6)
		ratio(scReplay, targetOPA, scOPAAllow, 64, 0.9)
		ratio(scNoHeader, targetOPA, scOPAAllow, 64, 0.9)
		ratio(scPreflight, targetFloor, scFloorHTTP, 64, 0.3)
	}
	if has(1) {
		s, f := rep.find(targetService, scConsume, 1), rep.find(targetFloor, scFloorCheck, 1)
		least := rep.find(targetStore, scBoltWrite, 1)
		if f.P50Micros > 0 && least.P50Micros > 0 {
			bound := f.P50Micros + least.P50Micros
			got := s.P50Micros / bound
			g := goal{Name: "check consume at 1: p50 / (check floor p50 + least bbolt write p50)",
				Got: got, Want: "<= 1.5", Met: got <= 1.5,
				Notes: fmt.Sprintf("consume p50 %.0f µs; floor %.0f µs + least write %.0f µs = %.0f µs",
					s.P50Micros, f.P50Micros, least.P50Micros, bound)}
			if s.CommitMicros > 0 {
				g.Notes += fmt.Sprintf("; the service's commits took %.0f µs each (%.2f × the least write)",
					s.CommitMicros, s.CommitMicros/least.P50Micros)
			}
			for _, peer := range []string{targetOPA, targetOPALog} {
				if p := rep.find(peer, scOPAAllow, 1); p.P50Micros > 0 {
					g.Notes += fmt.Sprintf("; %s p50 %.0f µs (consume %.2f ×)", peer, p.P50Micros, s.P50Micros/p.P50Micros)
				}
			}
			rep.Goals = append(rep.Goals, g)
		}
	}
	if cfg.fill > 0 {
		for _, sc := range []string{scConsume, scPreflight} {
			for _, c := range cfg.conc {
				e, f := rep.find(targetService, sc, c), rep.find(targetFilled, sc, c)
				if e.P50Micros == 0 {
					continue
				}
				got := f.P50Micros / e.P50Micros
				rep.Goals = append(rep.Goals, goal{Name: fmt.Sprintf("%s at %d: p50 with %d frames / empty", sc, c, cfg.fill),
					Got: got, Want: "<= 1.5", Met: got <= 1.5})
			}
		}
	}
	if cfg.cached > 0 {
		got := mb(rep.CachedMemory.RSS)
		rep.Goals = append(rep.Goals, goal{Name: fmt.Sprintf("RSS MB with %d bindings cached", rep.Cached),
			Got: got, Want: "<= 150", Met: got <= 150,
			Notes: fmt.Sprintf("anonymous %.1f MB, mapped files %.1f MB of which the WAL %.1f MB",
				mb(rep.CachedMemory.Anon), mb(rep.CachedMemory.File), mb(rep.CachedMemory.WAL))})
	}
	if cfg.frames > 0 {
		rep.Goals = append(rep.Goals, goal{Name: "bytes on disk per one-step preflight (pages in use)",
			Got: rep.UsedBytesPer, Want: "<= 2048", Met: rep.UsedBytesPer <= 2048})
	}
}

func (rep *report) print(out io.Writer) {
	fmt.Fprintln(out, "\ngoals (issue 22; scale goals of issue 7):")
	for _, g := range rep.Goals {
		mark := "met"
		if !g.Met {
			mark = "MISSED"
		}
		fmt.Fprintf(out, "  %-62s %8.2f  want %-7s %s\n", g.Name, g.Got, g.Want, mark)
		if g.Notes != "" {
			fmt.Fprintf(out, "    (%s)\n", g.Notes)
		}
	}
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

func (m memory) String() string {
	return fmt.Sprintf("RSS %.1f MB (anonymous %.1f MB, mapped files %.1f MB of which the WAL %.1f MB; peak %.1f MB)",
		mb(m.RSS), mb(m.Anon), mb(m.File), mb(m.WAL), mb(m.Peak))
}
