package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
	"gopkg.in/yaml.v3"

	"github.com/contractrefine/autonomy/preflight"
)

// Mode is contract_refine.mode, the catalog's type (preflight.Mode).
type Mode = preflight.Mode

// The three modes.
const (
	ModeDisabled = preflight.ModeDisabled
	ModeAdvisory = preflight.ModeAdvisory
	ModeEnforce  = preflight.ModeEnforce
)

// ParseMode validates a mode name.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeDisabled, ModeAdvisory, ModeEnforce:
		return m, nil
	}
	return "", fmt.Errorf("%q is not one of disabled, advisory, enforce", s)
}

// Limits of README.md#configuration.
const (
	MaxRepairAttemptsLimit = 3
	// MaxBodyBytesLimit bounds http.max_body_bytes: a body is read whole
	// into memory for the check, and a larger bound overflows readers.
	MaxBodyBytesLimit      = 1 << 30
	BindingCacheTTLCeiling = 60 * time.Second
)

// Config is the whole service configuration.
type Config struct {
	HTTPAddr string `yaml:"http_addr"`
	GRPCAddr string `yaml:"grpc_addr"`
	DataDir  string `yaml:"data_dir"`
	// Bundle is the policy bundle directory; "" means the embedded default.
	Bundle string `yaml:"bundle"`
	// Upstream and GatewayAddr enable the built-in gateway.
	Upstream    string `yaml:"upstream"`
	GatewayAddr string `yaml:"gateway_addr"`

	ContractRefine ContractRefine `yaml:"contract_refine"`
	HTTP           HTTP           `yaml:"http"`
	GRPC           GRPC           `yaml:"grpc"`
	Gate           Gate           `yaml:"gate"`
	WAL            WAL            `yaml:"wal"`
	Log            Log            `yaml:"log"`
	Policy         Policy         `yaml:"policy"`
	Clauses        Clauses        `yaml:"clauses"`
	Access         Access         `yaml:"access"`
	TLS            TLS            `yaml:"tls"`
	Tracing        Tracing        `yaml:"tracing"`
	Reload         Reload         `yaml:"reload"`
	Gateway        Gateway        `yaml:"gateway"`
	Store          Store          `yaml:"store"`
	// ReplicaID names this replica in its frames and in the shared store;
	// "" means the host name (see Replica).
	ReplicaID string    `yaml:"replica_id"`
	Approvals Approvals `yaml:"approvals"`

	// src is where each key was in the loaded file, so errors name lines.
	src *source
}

// ContractRefine holds the contract_refine keys.
type ContractRefine struct {
	Mode              Mode          `yaml:"mode"`
	BindingWindow     time.Duration `yaml:"binding_window"`
	MaxRepairAttempts int           `yaml:"max_repair_attempts"`
	BindingCacheTTL   time.Duration `yaml:"binding_cache_ttl"`
	BindingCacheSize  int           `yaml:"binding_cache_size"`
	Offline           bool          `yaml:"offline"`
}

// HTTP holds the http keys.
type HTTP struct {
	MaxBodyBytes      int64         `yaml:"max_body_bytes"`
	MaxHeaderBytes    int           `yaml:"max_header_bytes"`
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	ReadTimeout       time.Duration `yaml:"read_timeout"`
	WriteTimeout      time.Duration `yaml:"write_timeout"`
	IdleTimeout       time.Duration `yaml:"idle_timeout"`
	// MaxBodyRequests bounds the requests carrying a body that are read
	// or decided at once; MaxBytesInFlight bounds the body bytes they may
	// hold between them (each reserves its Content-Length, or
	// max_body_bytes when it declares none). Past either: 503 overloaded.
	MaxBodyRequests  int   `yaml:"max_body_requests"`
	MaxBytesInFlight int64 `yaml:"max_bytes_in_flight"`
}

// GRPC holds the gRPC listener's keys.
type GRPC struct {
	// Reflection serves grpc.reflection.v1 (and v1alpha) so that grpcurl
	// and similar clients can call the Check without a protoset. Off by
	// default: it tells any client that reaches the port what it serves.
	Reflection bool `yaml:"reflection"`
	// MaxConcurrentStreams bounds the streams of one connection.
	MaxConcurrentStreams uint32 `yaml:"max_concurrent_streams"`
	// MaxConnections bounds the connections open at once; more wait in
	// the listen backlog.
	MaxConnections int `yaml:"max_connections"`
	// MaxBytesInFlight bounds the request messages being received at once:
	// each stream reserves the largest message the listener takes
	// (http.max_body_bytes + 1 MiB) from its headers until its message is
	// in; a stream past the budget is refused with RESOURCE_EXHAUSTED.
	MaxBytesInFlight int64 `yaml:"max_bytes_in_flight"`
	// ReceiveTimeout bounds how long a stream may take to send its request
	// message; one still sending then is cancelled.
	ReceiveTimeout time.Duration `yaml:"receive_timeout"`
	// KeepaliveMinTime is the shortest interval between client pings the
	// listener accepts; a client pinging more often is disconnected.
	KeepaliveMinTime time.Duration `yaml:"keepalive_min_time"`
	// MaxConnectionIdle closes a connection with no stream for that long.
	MaxConnectionIdle time.Duration `yaml:"max_connection_idle"`
}

// Gate protocols (gate.protocol, docs/MCP.md).
const (
	// ProtocolTool gates POST gate.path bodies that name a kind and args.
	ProtocolTool = "tool"
	// ProtocolMCP gates MCP's tools/call over Streamable HTTP at gate.path.
	ProtocolMCP = "mcp"
)

// Gate holds the gate keys (docs/API.md and docs/MCP.md).
type Gate struct {
	// Protocol is tool or mcp.
	Protocol    string `yaml:"protocol"`
	Path        string `yaml:"path"`
	KindPointer string `yaml:"kind_pointer"`
	ArgsPointer string `yaml:"args_pointer"`
	KindHeader  string `yaml:"kind_header"`
	ActorHeader string `yaml:"actor_header"`
}

// WAL holds the wal keys (docs/OPERATIONS.md).
type WAL struct {
	Retention          time.Duration `yaml:"retention"`
	StoreRawRequests   bool          `yaml:"store_raw_requests"`
	CompactionInterval time.Duration `yaml:"compaction_interval"`
}

// Log holds the log keys.
type Log struct {
	// Level is debug, info, warn or error.
	Level string `yaml:"level"`
	// Decisions writes one info line per decision (a Check's `decision`,
	// a preflight's `preflight decided`). The WAL holds every decision
	// durably either way; off saves the line's formatting and write.
	Decisions bool `yaml:"decisions"`
}

// Policy holds the policy evaluation keys.
type Policy struct {
	Timeout time.Duration `yaml:"timeout"`
}

// Clauses holds the clause evaluation keys (docs/CLAUSES.md).
type Clauses struct {
	CostLimit uint64 `yaml:"cost_limit"`
}

// Access holds the read-endpoint access keys (docs/SECURITY.md).
type Access struct {
	// TokensFile is a YAML file of bearer tokens; empty means no tokens.
	TokensFile string `yaml:"tokens_file"`
	// AllowRemoteReads opens the read endpoints to non-loopback clients when
	// no tokens are configured.
	AllowRemoteReads bool `yaml:"allow_remote_reads"`
}

// Approvals holds the approvals keys (docs/API.md).
type Approvals struct {
	// WebhookURL, when set, receives a JSON POST for each preflight with
	// new pending approvals.
	WebhookURL string `yaml:"webhook_url"`
	// WebhookTimeout bounds each delivery attempt.
	WebhookTimeout time.Duration `yaml:"webhook_timeout"`
	// WebhookRetries is how many times a failed delivery is tried again.
	WebhookRetries int `yaml:"webhook_retries"`
}

// MaxWebhookRetries bounds approvals.webhook_retries.
const MaxWebhookRetries = 10

// Gateway holds the built-in gateway's keys beside upstream and
// gateway_addr.
type Gateway struct {
	// TrustedProxies are the addresses or CIDR prefixes of proxies in front
	// of the gateway that authenticate the caller and set gate.actor_header
	// themselves; from any other peer the header is removed.
	TrustedProxies []string `yaml:"trusted_proxies"`
}

// TrustedProxyPrefixes parses Gateway.TrustedProxies; a bare address is a
// prefix of its full length.
func (g Gateway) TrustedProxyPrefixes() ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(g.TrustedProxies))
	for _, v := range g.TrustedProxies {
		if a, err := netip.ParseAddr(v); err == nil {
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return nil, fmt.Errorf("%q is not an IP address or CIDR prefix", v)
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			// Peers are compared unmapped: ::ffff:10.0.0.0/104 is 10.0.0.0/8.
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		if p.Bits() == 0 {
			return nil, fmt.Errorf("%q trusts every peer: list the proxies' addresses", v)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// TLS holds the listener TLS keys.
type TLS struct {
	CertFile     string `yaml:"cert_file"`
	KeyFile      string `yaml:"key_file"`
	ClientCAFile string `yaml:"client_ca_file"`
}

// Tracing holds the OpenTelemetry keys.
type Tracing struct {
	OTLPEndpoint string  `yaml:"otlp_endpoint"`
	SampleRatio  float64 `yaml:"sample_ratio"`
}

// Reload holds the bundle reload keys. SIGHUP always reloads the bundle;
// these govern reloading when its files change.
type Reload struct {
	// Watch reloads the bundle directory when a file in it changes.
	Watch bool `yaml:"watch"`
	// Debounce is how long the directory must stay quiet after a change
	// before the reload, so a multi-file update loads once, whole.
	Debounce time.Duration `yaml:"debounce"`
}

// Default returns the configuration with every default of README.md#configuration.
func Default() Config {
	return Config{
		HTTPAddr: "127.0.0.1:8181",
		GRPCAddr: "127.0.0.1:9191",
		DataDir:  "./data",
		ContractRefine: ContractRefine{
			Mode:              ModeAdvisory,
			BindingWindow:     5 * time.Minute,
			MaxRepairAttempts: 1,
			BindingCacheTTL:   60 * time.Second,
			BindingCacheSize:  100000,
		},
		HTTP: HTTP{MaxBodyBytes: 1 << 20, MaxHeaderBytes: 64 << 10, ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 120 * time.Second,
			MaxBodyRequests: 64, MaxBytesInFlight: 64 << 20},
		GRPC: GRPC{MaxConcurrentStreams: 100, MaxConnections: 256, MaxBytesInFlight: 256 << 20,
			ReceiveTimeout: 10 * time.Second, KeepaliveMinTime: 10 * time.Second, MaxConnectionIdle: 5 * time.Minute},
		Gate:      Gate{Protocol: ProtocolTool, Path: "/v1/tool", KindPointer: "/kind", ArgsPointer: "/args"},
		WAL:       WAL{Retention: 720 * time.Hour, CompactionInterval: time.Hour},
		Log:       Log{Level: "info", Decisions: true},
		Policy:    Policy{Timeout: 250 * time.Millisecond},
		Tracing:   Tracing{SampleRatio: 1},
		Reload:    Reload{Watch: true, Debounce: 250 * time.Millisecond},
		Store:     defaultStore(),
		Approvals: Approvals{WebhookTimeout: 5 * time.Second, WebhookRetries: 3},
	}
}

// Load reads the YAML file at path over the defaults. An empty path gives
// the defaults. The result is not yet validated: apply flags, then Validate.
func Load(path string) (Config, error) {
	cfg := Default()
	if path == "" {
		return cfg, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	cfg.src = indexLines(b)
	if err := Decode(bytes.NewReader(b), &cfg); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, cfg.src.nameKeys(err))
	}
	if err := cfg.src.nullKeys(); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	// Left out, bundle means the embedded default bundle; written empty it
	// is a directory the file forgot to name (a template whose variable was
	// unset), which must not quietly run another policy. So for the tokens
	// and TLS files, which would quietly turn protection off.
	if err := cfg.src.emptyKeys(); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Decode reads YAML into cfg strictly: an unknown key is an error naming the
// key and its line, and a second document with content is an error (it
// would otherwise be dropped unread, with the settings it holds).
func Decode(r io.Reader, cfg *Config) error {
	dec := yaml.NewDecoder(r)
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file keeps the defaults
		}
		return DecodeError(err, cfg)
	}
	if err := NoMoreDocuments(dec); errors.Is(err, ErrMoreDocuments) {
		return fmt.Errorf("%w: put every setting in the first one", err)
	} else if err != nil {
		return err
	}
	return nil
}

// ErrMoreDocuments reports a YAML file with more than one document.
var ErrMoreDocuments = errors.New("the file holds more than one YAML document")

// NoMoreDocuments reads what dec has left after its first document:
// ErrMoreDocuments when that is another document with content ("---"
// followed by keys), nil when it is nothing or empty documents.
func NoMoreDocuments(dec *yaml.Decoder) error {
	for {
		var more yaml.Node
		err := dec.Decode(&more)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, c := range more.Content {
			if c.Kind != yaml.ScalarNode || c.Tag != "!!null" {
				return ErrMoreDocuments
			}
		}
	}
}

var pointerRE = regexp.MustCompile(`^(/([^/~]|~[01])*)*$`)

// integerKeys are the keys whose values are whole numbers.
var integerKeys = []string{"contract_refine.max_repair_attempts", "contract_refine.binding_cache_size",
	"http.max_body_bytes", "http.max_header_bytes", "clauses.cost_limit", "approvals.webhook_retries",
	"grpc.max_concurrent_streams", "grpc.max_connections", "grpc.max_bytes_in_flight",
	"http.max_body_requests", "http.max_bytes_in_flight"}

// notInPath reports a character gate.path cannot hold.
func notInPath(r rune) bool { return r == '?' || r == '#' || r <= ' ' || r == 0x7f }

// SocketPath returns the Unix socket path a listen address names:
// "unix:/path" or "unix:///path"; ok is false for a TCP address.
func SocketPath(addr string) (path string, ok bool) {
	path, ok = strings.CutPrefix(addr, "unix:")
	return strings.TrimPrefix(path, "//"), ok
}

// CheckListenAddr checks a listen address the way serve will use it:
// a Unix socket (SocketPath), anything else host:port with a port number
// or service name.
func CheckListenAddr(a string) error {
	if a == "" {
		return errors.New("must not be empty")
	}
	if path, ok := SocketPath(a); ok {
		if path == "" {
			return fmt.Errorf("%q names no socket path", a)
		}
		return nil
	}
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q is not host:port or unix:/path: %v", a, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("%q has no usable port: %v", a, err)
	}
	return nil
}

// sameListener reports whether two checked listen addresses would take the
// same socket: one unix path, or one port (not 0, which picks a free one)
// on the same host or where either host is a wildcard.
func sameListener(a, b string) bool {
	pa, aUnix := SocketPath(a)
	pb, bUnix := SocketPath(b)
	if aUnix || bUnix {
		return aUnix && bUnix && filepath.Clean(pa) == filepath.Clean(pb)
	}
	ha, porta, _ := net.SplitHostPort(a)
	hb, portb, _ := net.SplitHostPort(b)
	na, _ := net.LookupPort("tcp", porta)
	nb, _ := net.LookupPort("tcp", portb)
	if na == 0 || na != nb {
		return false
	}
	wildcard := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || wildcard(ha) || wildcard(hb)
}

// Validate checks every value and returns an error naming the first bad key.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		if line := c.src.line(key); line > 0 {
			key = fmt.Sprintf("line %d: %s", line, key)
		}
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	// Each part checks its keys in a fixed order, and the parts run in a
	// fixed order, so the joined error text is the same on every run.
	c.validateBasics(bad)
	c.validateLimits(bad)
	c.validateGate(bad)
	c.validateEdges(bad)
	c.validateStore(bad)
	return errors.Join(errs...)
}

// badKey records one invalid key; Validate joins what its parts record.
type badKey = func(key, format string, args ...any)

// together refuses a pair of keys with one half set. The error names the
// half that is set, so it points at the line the file wrote; more is
// added to the message.
func together(bad badKey, keyA, a, keyB, b, more string) {
	switch {
	case a == "" && b != "":
		bad(keyB, "%s and %s go together%s", keyA, keyB, more)
	case a != "" && b == "":
		bad(keyA, "%s and %s go together%s", keyA, keyB, more)
	}
}

// validateBasics checks the listeners' and data directory's presence and
// the contract_refine keys.
func (c *Config) validateBasics(bad badKey) {
	if c.HTTPAddr == "" {
		bad("http_addr", "must not be empty")
	}
	if c.GRPCAddr == "" {
		bad("grpc_addr", "must not be empty")
	}
	if c.DataDir == "" {
		bad("data_dir", "must not be empty")
	}
	if _, err := ParseMode(string(c.ContractRefine.Mode)); err != nil {
		bad("contract_refine.mode", "%v", err)
	}
	cr := c.ContractRefine
	if cr.BindingWindow <= 0 {
		bad("contract_refine.binding_window", "must be positive, got %s", cr.BindingWindow)
	}
	if cr.MaxRepairAttempts < 0 || cr.MaxRepairAttempts > MaxRepairAttemptsLimit {
		bad("contract_refine.max_repair_attempts", "must be between 0 and %d, got %d", MaxRepairAttemptsLimit, cr.MaxRepairAttempts)
	}
	if cr.BindingCacheTTL <= 0 || cr.BindingCacheTTL > BindingCacheTTLCeiling {
		bad("contract_refine.binding_cache_ttl", "must be positive and at most %s, got %s", BindingCacheTTLCeiling, cr.BindingCacheTTL)
	}
	if cr.BindingCacheSize <= 0 {
		bad("contract_refine.binding_cache_size", "must be positive, got %d", cr.BindingCacheSize)
	}
}

// validateLimits checks the size, count and duration limits of the
// listeners and the WAL.
func (c *Config) validateLimits(bad badKey) {
	if c.HTTP.MaxBodyBytes <= 0 || c.HTTP.MaxBodyBytes > MaxBodyBytesLimit {
		bad("http.max_body_bytes", "must be positive and at most %d (1 GiB), got %d", int64(MaxBodyBytesLimit), c.HTTP.MaxBodyBytes)
	}
	if c.HTTP.MaxHeaderBytes <= 0 {
		bad("http.max_header_bytes", "must be positive, got %d", c.HTTP.MaxHeaderBytes)
	}
	if c.HTTP.MaxBodyRequests <= 0 {
		bad("http.max_body_requests", "must be positive, got %d", c.HTTP.MaxBodyRequests)
	}
	if c.HTTP.MaxBytesInFlight < c.HTTP.MaxBodyBytes {
		// Named where the file wrote the pair: a raised max_body_bytes over
		// the default budget is the key the operator wrote.
		if c.src.line("http.max_bytes_in_flight") == 0 && c.src.line("http.max_body_bytes") > 0 {
			bad("http.max_body_bytes", "%d is over http.max_bytes_in_flight (%d, its default): raise http.max_bytes_in_flight with it",
				c.HTTP.MaxBodyBytes, c.HTTP.MaxBytesInFlight)
		} else {
			bad("http.max_bytes_in_flight", "must be at least http.max_body_bytes (%d), got %d", c.HTTP.MaxBodyBytes, c.HTTP.MaxBytesInFlight)
		}
	}
	if c.GRPC.MaxConcurrentStreams == 0 {
		bad("grpc.max_concurrent_streams", "must be positive, got 0")
	}
	if c.GRPC.MaxConnections <= 0 {
		bad("grpc.max_connections", "must be positive, got %d", c.GRPC.MaxConnections)
	}
	if c.GRPC.MaxBytesInFlight < c.HTTP.MaxBodyBytes+1<<20 {
		bad("grpc.max_bytes_in_flight", "must be at least one message (http.max_body_bytes + 1 MiB = %d), got %d",
			c.HTTP.MaxBodyBytes+1<<20, c.GRPC.MaxBytesInFlight)
	}
	// A slice, not a map: keys are checked in a fixed order.
	for _, kd := range []struct {
		key string
		d   time.Duration
	}{{"http.read_header_timeout", c.HTTP.ReadHeaderTimeout},
		{"http.read_timeout", c.HTTP.ReadTimeout}, {"http.write_timeout", c.HTTP.WriteTimeout},
		{"http.idle_timeout", c.HTTP.IdleTimeout}, {"policy.timeout", c.Policy.Timeout},
		{"wal.retention", c.WAL.Retention}, {"wal.compaction_interval", c.WAL.CompactionInterval},
		{"grpc.receive_timeout", c.GRPC.ReceiveTimeout}, {"grpc.keepalive_min_time", c.GRPC.KeepaliveMinTime},
		{"grpc.max_connection_idle", c.GRPC.MaxConnectionIdle}} {
		if kd.d <= 0 {
			bad(kd.key, "must be positive, got %s", kd.d)
		}
	}
	for _, key := range integerKeys {
		if v, ok := c.src.float(key); ok {
			bad(key, "must be written as an integer, got %s", v)
		}
	}
}

// validateGate checks the gated path, its protocol, the header names and
// pointers the gate reads, and the listen addresses.
func (c *Config) validateGate(bad badKey) {
	if !strings.HasPrefix(c.Gate.Path, "/") || strings.ContainsFunc(c.Gate.Path, notInPath) {
		// A query or fragment in it would never equal a request's path,
		// and nothing would be gated.
		bad("gate.path", "must be a path starting with / with no query, fragment, space or control character, got %q", c.Gate.Path)
	}
	switch c.Gate.Protocol {
	case ProtocolTool:
	case ProtocolMCP:
		// A tools/call always has a body: its name and arguments are in it.
		if c.Gate.KindHeader != "" {
			bad("gate.kind_header", "is not used with gate.protocol: mcp (the tool name is params.name)")
		}
	default:
		bad("gate.protocol", "%q is not one of tool, mcp", c.Gate.Protocol)
	}
	for _, kv := range [][2]string{{"gate.kind_header", c.Gate.KindHeader}, {"gate.actor_header", c.Gate.ActorHeader}} {
		if h := kv[1]; h != "" && !httpguts.ValidHeaderFieldName(h) {
			bad(kv[0], "%q is not an HTTP header name: no request could carry it", h)
		}
	}
	var listening [][2]string // the keys and addresses checked so far
	for _, kv := range [][2]string{{"http_addr", c.HTTPAddr}, {"grpc_addr", c.GRPCAddr}, {"gateway_addr", c.GatewayAddr}} {
		a := kv[1]
		if a == "" {
			continue
		}
		if err := CheckListenAddr(a); err != nil {
			bad(kv[0], "%v", err)
			continue
		}
		for _, prev := range listening {
			if sameListener(prev[1], a) {
				bad(kv[0], "%q is also %s: each listener needs its own address", a, prev[0])
			}
		}
		listening = append(listening, kv)
	}
	// "" is a JSON Pointer to the whole body, which names no member: the
	// kind and the args are members of the call's body.
	if !pointerRE.MatchString(c.Gate.KindPointer) || c.Gate.KindPointer == "" {
		bad("gate.kind_pointer", "%q is not a JSON Pointer to a member of the body", c.Gate.KindPointer)
	}
	if !pointerRE.MatchString(c.Gate.ArgsPointer) || c.Gate.ArgsPointer == "" {
		bad("gate.args_pointer", "%q is not a JSON Pointer to a member of the body", c.Gate.ArgsPointer)
	}
}

// validateEdges checks what the service talks to: logging, the gateway
// and its upstream, TLS, tracing, approvals' webhook and reloads.
func (c *Config) validateEdges(bad badKey) {
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "%q is not one of debug, info, warn, error", c.Log.Level)
	}
	if _, err := c.Gateway.TrustedProxyPrefixes(); err != nil {
		bad("gateway.trusted_proxies", "%v", err)
	}
	if len(c.Gateway.TrustedProxies) > 0 && c.Gate.ActorHeader == "" {
		bad("gateway.trusted_proxies", "trusts proxies to set gate.actor_header, which is not set")
	}
	together(bad, "upstream", c.Upstream, "gateway_addr", c.GatewayAddr, ": give both, or neither")
	if c.Upstream != "" {
		if u, err := url.Parse(c.Upstream); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("upstream", "%q is not an http(s) URL", c.Upstream)
		} else if u.User != nil {
			// The gateway never sends them, and the URL is logged.
			bad("upstream", "carries credentials (user:password@), which the gateway does not send; remove them")
		}
	}
	together(bad, "tls.cert_file", c.TLS.CertFile, "tls.key_file", c.TLS.KeyFile, "")
	if c.TLS.ClientCAFile != "" && c.TLS.CertFile == "" {
		bad("tls.client_ca_file", "needs tls.cert_file and tls.key_file")
	}
	if e := c.Tracing.OTLPEndpoint; e != "" {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("tracing.otlp_endpoint", "%q is not an http:// or https:// URL (http for plaintext OTLP/gRPC, https for TLS)", e)
		}
	}
	if u := c.Approvals.WebhookURL; u != "" {
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
			bad("approvals.webhook_url", "%q is not an http(s) URL", u)
		}
	}
	if c.Approvals.WebhookTimeout <= 0 {
		bad("approvals.webhook_timeout", "must be positive, got %s", c.Approvals.WebhookTimeout)
	}
	if r := c.Approvals.WebhookRetries; r < 0 || r > MaxWebhookRetries {
		bad("approvals.webhook_retries", "must be between 0 and %d, got %d", MaxWebhookRetries, r)
	}
	if c.Reload.Debounce <= 0 {
		bad("reload.debounce", "must be positive, got %s", c.Reload.Debounce)
	}
	if c.Tracing.SampleRatio < 0 || c.Tracing.SampleRatio > 1 {
		bad("tracing.sample_ratio", "must be between 0 and 1, got %v", c.Tracing.SampleRatio)
	}
}
