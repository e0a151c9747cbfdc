package etcdtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Kind says how a member runs.
type Kind int

// The kinds of member.
const (
	// InProcess members run embedded in the calling process.
	InProcess Kind = iota
	// Process members run the embedded server in a helper process (the
	// calling binary run again; see RunMemberIfAsked), so they can be
	// killed with SIGKILL.
	Process
	// Binary members are an etcd server started from its own binary.
	Binary
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case InProcess:
		return "in-process"
	case Process:
		return "process"
	case Binary:
		return "binary"
	}
	return "unknown"
}

// Timeouts of the harness: they bound waits for a member that never comes
// up or never goes down.
const (
	readyTimeout = 30 * time.Second
	stopTimeout  = 15 * time.Second
	startTries   = 3
)

// memberEnv carries a helper process's MemberSpec as JSON.
const memberEnv = "ETCDTEST_MEMBER"

// Options says what cluster to start. Zero values mean the defaults.
type Options struct {
	// Members is the cluster size; 0 means 1.
	Members int
	Kind    Kind
	// Dir holds the members' data directories; "" means a new temporary
	// directory that Close removes.
	Dir string
	// BinaryPath is the etcd binary of Binary members; "" means etcd on
	// the PATH.
	BinaryPath string
	// QuotaBackendBytes is etcd's --quota-backend-bytes; 0 keeps etcd's
	// default (2 GiB).
	QuotaBackendBytes int64
	// Log receives the members' own logs (errors only); nil discards them.
	Log io.Writer
}

// MemberSpec is what one member is started with, in the terms of etcd's
// own flags.
type MemberSpec struct {
	Name              string `json:"name"`
	Dir               string `json:"data_dir"`
	ClientURL         string `json:"client_url"`
	PeerURL           string `json:"peer_url"`
	InitialCluster    string `json:"initial_cluster"`
	State             string `json:"initial_cluster_state"`
	Token             string `json:"initial_cluster_token"`
	QuotaBackendBytes int64  `json:"quota_backend_bytes,omitempty"`
}

// Cluster is a running etcd cluster on loopback.
type Cluster struct {
	Members []*Member
	opts    Options
	dir     string
	ownDir  bool
}

// Member is one etcd member of a Cluster.
type Member struct {
	Spec MemberSpec
	c    *Cluster

	mu       sync.Mutex
	embedded *embed.Etcd
	cmd      *exec.Cmd
	exited   chan struct{}
	// reserved holds the ports of a stopped member until it starts
	// again: another test's listener or connection on this machine could
	// otherwise be given them, and the member could not come back.
	reserved []io.Closer
}

// Start starts a cluster and returns once every member answers a
// linearizable read, which needs a leader and so a quorum.
func Start(o Options) (*Cluster, error) {
	if o.Members <= 0 {
		o.Members = 1
	}
	if o.Kind == Binary && o.BinaryPath == "" {
		p, err := exec.LookPath("etcd")
		if err != nil {
			return nil, fmt.Errorf("etcdtest: no etcd binary: %w", err)
		}
		o.BinaryPath = p
	}
	c := &Cluster{opts: o, dir: o.Dir}
	if c.dir == "" {
		d, err := os.MkdirTemp("", "etcdtest-")
		if err != nil {
			return nil, err
		}
		c.dir, c.ownDir = d, true
	}
	var err error
	for try := 0; try < startTries; try++ {
		if err = c.startOnce(try); err == nil {
			return c, nil
		}
		c.stopAll()
	}
	c.Close()
	return nil, err
}

// startOnce starts every member on fresh ports, in a fresh directory.
func (c *Cluster) startOnce(try int) error {
	ports, err := freePorts(2 * c.opts.Members)
	if err != nil {
		return err
	}
	token := fmt.Sprintf("etcdtest-%d-%d", os.Getpid(), try)
	c.Members = make([]*Member, c.opts.Members)
	var initial []string
	for i := range c.Members {
		m := &Member{c: c, Spec: MemberSpec{
			Name:              fmt.Sprintf("m%d", i),
			Dir:               filepath.Join(c.dir, fmt.Sprintf("try%d-m%d", try, i)),
			ClientURL:         fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
			PeerURL:           fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			State:             embed.ClusterStateFlagNew,
			Token:             token,
			QuotaBackendBytes: c.opts.QuotaBackendBytes,
		}}
		initial = append(initial, m.Spec.Name+"="+m.Spec.PeerURL)
		c.Members[i] = m
	}
	for _, m := range c.Members {
		m.Spec.InitialCluster = strings.Join(initial, ",")
		if err := m.start(); err != nil {
			return err
		}
	}
	for _, m := range c.Members {
		if err := m.WaitReady(readyTimeout); err != nil {
			return err
		}
	}
	return nil
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.Members))
	for i, m := range c.Members {
		out[i] = m.Spec.ClientURL
	}
	return out
}

// Client returns a client of every member; the caller closes it.
func (c *Cluster) Client() (*clientv3.Client, error) {
	return newClient(c.Endpoints())
}

func newClient(endpoints []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

// Close stops every member and removes the data directory Start made.
func (c *Cluster) Close() {
	c.stopAll()
	if c.ownDir {
		os.RemoveAll(c.dir)
	}
}

func (c *Cluster) stopAll() {
	var wg sync.WaitGroup
	for _, m := range c.Members {
		if m == nil {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); m.Stop(); m.unreserve() }()
	}
	wg.Wait()
}

// Endpoint is the member's client URL.
func (m *Member) Endpoint() string { return m.Spec.ClientURL }

// Pid is the process id of a running Process or Binary member, 0 for one
// that runs in this process or is not running.
func (m *Member) Pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil || m.cmd.Process == nil || !m.runningLocked() {
		return 0
	}
	return m.cmd.Process.Pid
}

// Running reports whether the member was started and has not stopped.
func (m *Member) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runningLocked()
}

func (m *Member) runningLocked() bool {
	if m.embedded != nil {
		return true
	}
	if m.exited == nil {
		return false
	}
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

// Start starts a stopped member again on its data directory and ports; it
// returns once the member answers a linearizable read.
func (m *Member) Start() error {
	m.mu.Lock()
	// Its data directory now holds the cluster: it rejoins what it knew.
	m.Spec.State = embed.ClusterStateFlagExisting
	m.mu.Unlock()
	if err := m.start(); err != nil {
		return err
	}
	return m.WaitReady(readyTimeout)
}

func (m *Member) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.runningLocked() {
		return fmt.Errorf("etcdtest: member %s is running", m.Spec.Name)
	}
	if err := os.MkdirAll(m.Spec.Dir, 0o700); err != nil {
		return err
	}
	m.unreserveLocked()
	switch m.c.opts.Kind {
	case InProcess:
		e, err := startEmbedded(m.Spec, m.c.opts.Log)
		if err != nil {
			return fmt.Errorf("etcdtest: start member %s: %w", m.Spec.Name, err)
		}
		m.embedded = e
		return nil
	case Process:
		self, err := os.Executable()
		if err != nil {
			return err
		}
		spec, _ := json.Marshal(m.Spec)
		// A binary whose TestMain does not call RunMemberIfAsked runs no
		// test and exits, which WaitReady then reports.
		m.cmd = exec.Command(self, "-test.run=^$")
		m.cmd.Env = append(os.Environ(), memberEnv+"="+string(spec))
	case Binary:
		m.cmd = exec.Command(m.c.opts.BinaryPath, m.Spec.flags()...)
	}
	out := m.c.opts.Log
	if out == nil {
		out = io.Discard
	}
	m.cmd.Stdout, m.cmd.Stderr = out, out
	m.cmd.SysProcAttr = childAttr()
	if err := m.cmd.Start(); err != nil {
		return fmt.Errorf("etcdtest: start member %s: %w", m.Spec.Name, err)
	}
	exited := make(chan struct{})
	m.exited = exited
	cmd := m.cmd
	go func() { cmd.Wait(); close(exited) }()
	return nil
}

// flags are the spec as etcd's own command line (3.4 and later).
func (s *MemberSpec) flags() []string {
	f := []string{"--name", s.Name, "--data-dir", s.Dir,
		"--listen-client-urls", s.ClientURL, "--advertise-client-urls", s.ClientURL,
		"--listen-peer-urls", s.PeerURL, "--initial-advertise-peer-urls", s.PeerURL,
		"--initial-cluster", s.InitialCluster, "--initial-cluster-state", s.State,
		"--initial-cluster-token", s.Token, "--logger", "zap", "--log-level", "error"}
	if s.QuotaBackendBytes > 0 {
		f = append(f, "--quota-backend-bytes", fmt.Sprint(s.QuotaBackendBytes))
	}
	return f
}

// embedConfig is the spec as an embedded server's configuration.
func (s *MemberSpec) embedConfig() (*embed.Config, error) {
	cfg := embed.NewConfig()
	cfg.Name = s.Name
	cfg.Dir = s.Dir
	cu, err := url.Parse(s.ClientURL)
	if err != nil {
		return nil, err
	}
	pu, err := url.Parse(s.PeerURL)
	if err != nil {
		return nil, err
	}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = s.InitialCluster
	cfg.ClusterState = s.State
	cfg.InitialClusterToken = s.Token
	cfg.QuotaBackendBytes = s.QuotaBackendBytes
	cfg.LogLevel = "error"
	return cfg, nil
}

func startEmbedded(s MemberSpec, log io.Writer) (*embed.Etcd, error) {
	cfg, err := s.embedConfig()
	if err != nil {
		return nil, err
	}
	if log == nil {
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	return e, nil
}

// WaitReady waits until the member answers a linearizable read.
func (m *Member) WaitReady(timeout time.Duration) error {
	cli, err := newClient([]string{m.Spec.ClientURL})
	if err != nil {
		return err
	}
	defer cli.Close()
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		if !m.Running() {
			return fmt.Errorf("etcdtest: member %s exited before it was ready (a Process member needs RunMemberIfAsked in TestMain)", m.Spec.Name)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, last = cli.Get(ctx, "etcdtest-ready")
		cancel()
		if last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("etcdtest: member %s not ready within %s: %v", m.Spec.Name, timeout, last)
}

// Stop stops the member gracefully; a stopped member stays stopped.
func (m *Member) Stop() {
	m.stop(syscall.SIGTERM)
}

// Kill ends the member at once: SIGKILL for a process; an embedded member
// is stopped without waiting for its requests.
func (m *Member) Kill() {
	m.stop(syscall.SIGKILL)
}

func (m *Member) stop(sig syscall.Signal) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.runningLocked() {
		return
	}
	if e := m.embedded; e != nil {
		m.embedded = nil
		if sig == syscall.SIGKILL {
			e.Server.HardStop()
		}
		e.Close()
	} else {
		m.cmd.Process.Signal(sig)
		select {
		case <-m.exited:
		case <-time.After(stopTimeout):
			m.cmd.Process.Kill()
			<-m.exited
		}
	}
	m.reserveLocked()
}

// reserveLocked holds the member's client and peer ports. A port that
// cannot be held (taken in the instant since the member let it go) is
// left: Start then fails and says so.
func (m *Member) reserveLocked() {
	for _, u := range []string{m.Spec.ClientURL, m.Spec.PeerURL} {
		pu, err := url.Parse(u)
		if err != nil {
			continue
		}
		port, err := strconv.Atoi(pu.Port())
		if err != nil {
			continue
		}
		if r, err := reservePort(port); err == nil {
			m.reserved = append(m.reserved, r)
		}
	}
}

func (m *Member) unreserve() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unreserveLocked()
}

func (m *Member) unreserveLocked() {
	for _, r := range m.reserved {
		r.Close()
	}
	m.reserved = nil
}

// RunMemberIfAsked runs an etcd member and exits when the process was
// started as a Process member; otherwise it returns at once. Call it first
// in TestMain (or main) of a binary whose tests start Process members.
func RunMemberIfAsked() {
	v := os.Getenv(memberEnv)
	if v == "" {
		return
	}
	var s MemberSpec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		fmt.Fprintln(os.Stderr, "etcdtest member:", err)
		os.Exit(2)
	}
	e, err := startEmbedded(s, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdtest member:", err)
		os.Exit(1)
	}
	sigs := make(chan os.Signal, 1)
	signalNotify(sigs)
	select {
	case <-sigs:
		e.Close()
		os.Exit(0)
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcdtest member:", err)
		os.Exit(1)
	}
}

// freePorts returns n distinct loopback ports the system had free.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, errors.Join(errors.New("etcdtest: no free port"), err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
