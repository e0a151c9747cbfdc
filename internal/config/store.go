package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The store backends (docs/DEPLOY.md).
const (
	BackendBBolt = "bbolt"
	BackendEtcd  = "etcd"
)

// Store holds the store keys: where the state that decides answers lives.
type Store struct {
	// Backend is bbolt or etcd; "" means etcd when endpoints are given,
	// else bbolt.
	Backend string `yaml:"backend"`
	Etcd    Etcd   `yaml:"etcd"`
}

// Etcd holds the store.etcd keys.
type Etcd struct {
	Endpoints      []string      `yaml:"endpoints"`
	Prefix         string        `yaml:"prefix"`
	DialTimeout    time.Duration `yaml:"dial_timeout"`
	RequestTimeout time.Duration `yaml:"request_timeout"`
	TLS            EtcdTLS       `yaml:"tls"`
	// RecordTTL is how long any replica can read the records another
	// replica wrote; never below contract_refine.binding_window.
	RecordTTL time.Duration `yaml:"record_ttl"`
}

// EtcdTLS holds the etcd client's TLS files.
type EtcdTLS struct {
	CAFile   string `yaml:"ca_file"`
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Enabled reports whether any TLS file is set.
func (t EtcdTLS) Enabled() bool { return t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" }

// ClientConfig is the etcd client's TLS configuration from the files; nil
// when none is set (serve, check-config and wal check-store load it alike).
func (t EtcdTLS) ClientConfig() (*tls.Config, error) {
	if !t.Enabled() {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("store.etcd.tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("store.etcd.tls.ca_file %s: no PEM certificate in it", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("store.etcd.tls.cert_file %s and key_file %s: %w", t.CertFile, t.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// MinEtcdTimeout and MaxEtcdTimeout bound store.etcd.dial_timeout and
// request_timeout. Above the maximum a stalled etcd would hold each tool
// call (which may wait twice request_timeout), /readyz and the gRPC
// health answer for longer than any proxy or probe waits.
const (
	MinEtcdTimeout = 10 * time.Millisecond
	MaxEtcdTimeout = 30 * time.Second
)

// MaxEtcdPrefixBytes bounds store.etcd.prefix: it starts every key, each
// of which etcd keeps in its in-memory index, and etcd refuses a request
// over 1.5 MiB.
const MaxEtcdPrefixBytes = 256

// MaxEtcdRecordTTL bounds store.etcd.record_ttl: ten years, well inside
// the longest lease etcd grants (9,000,000,000 s).
const MaxEtcdRecordTTL = 10 * 365 * 24 * time.Hour

// Defaults of the store keys.
const (
	DefaultEtcdPrefix         = "/contractrefine/"
	DefaultEtcdDialTimeout    = 5 * time.Second
	DefaultEtcdRequestTimeout = 2 * time.Second
	DefaultEtcdRecordTTL      = 24 * time.Hour
)

func defaultStore() Store {
	return Store{Etcd: Etcd{Prefix: DefaultEtcdPrefix, DialTimeout: DefaultEtcdDialTimeout,
		RequestTimeout: DefaultEtcdRequestTimeout, RecordTTL: DefaultEtcdRecordTTL}}
}

// StoreBackend is the backend in use: store.backend, or etcd when
// endpoints are given and the key is unset.
func (c *Config) StoreBackend() string {
	if c.Store.Backend != "" {
		return c.Store.Backend
	}
	if len(c.Store.Etcd.Endpoints) > 0 {
		return BackendEtcd
	}
	return BackendBBolt
}

// Replica is this replica's name: replica_id, or the host name.
func (c *Config) Replica() string {
	if c.ReplicaID != "" {
		return c.ReplicaID
	}
	if h, err := os.Hostname(); err == nil && replicaRE.MatchString(h) {
		return h
	}
	return "replica"
}

// replicaRE is what a replica name may be: a host name's characters, so
// it can stand in keys and log lines unescaped.
var replicaRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,126}[A-Za-z0-9])?$`)

// CheckReplicaID checks a replica name (--replica-id, replica_id).
func CheckReplicaID(v string) error {
	if !replicaRE.MatchString(v) {
		return fmt.Errorf("%q is not a replica name: 1 to 128 letters, digits, '.', '_' or '-', starting and ending with a letter or digit", v)
	}
	return nil
}

// CheckPrefix refuses an etcd key prefix that is empty, longer than
// MaxEtcdPrefixBytes, holds a control character or does not end in "/".
func CheckPrefix(p string) error {
	if len(p) > MaxEtcdPrefixBytes {
		return fmt.Errorf("must be at most %d bytes, got %d", MaxEtcdPrefixBytes, len(p))
	}
	if p == "" || strings.ContainsFunc(p, func(r rune) bool { return r < ' ' || r == 0x7f }) || !strings.HasSuffix(p, "/") {
		return fmt.Errorf("must be non-empty text without control characters, ending in \"/\", got %q", p)
	}
	return nil
}

// ParseEndpoints splits --etcd-endpoints (URL[,URL…]) and checks each.
func ParseEndpoints(v string) ([]string, error) {
	var out []string
	for _, e := range strings.Split(v, ",") {
		e = strings.TrimSpace(e)
		if err := checkEndpoint(e); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// checkEndpoint accepts what the etcd client dials: http(s)://host:port,
// unix(s)://path, or host:port.
func checkEndpoint(e string) error {
	if e == "" {
		return fmt.Errorf("an endpoint is empty")
	}
	written := e
	if !strings.Contains(e, "://") {
		e = "http://" + e
	}
	u, err := url.Parse(e)
	if err != nil {
		return fmt.Errorf("%q is not an endpoint URL: %v", written, err)
	}
	if u.User != nil {
		// The client does not send them; etcd's own users are not
		// supported (client certificates are: store.etcd.tls).
		return fmt.Errorf("%q carries credentials (user:password@), which are not sent; remove them", written)
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return fmt.Errorf("%q is not http(s)://host:port or host:port", written)
		}
		if n, err := strconv.Atoi(u.Port()); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%q has no usable port: 1 to 65535", written)
		}
	case "unix", "unixs":
		if u.Host == "" && u.Path == "" {
			return fmt.Errorf("%q names no socket", e)
		}
	default:
		return fmt.Errorf("%q: the scheme must be http, https, unix or unixs", e)
	}
	return nil
}

// validateStore checks the store keys and replica_id.
func (c *Config) validateStore(bad badKey) {
	s := &c.Store
	switch s.Backend {
	case "", BackendBBolt, BackendEtcd:
	default:
		bad("store.backend", "%q is not one of bbolt, etcd", s.Backend)
	}
	if s.Backend == BackendEtcd && len(s.Etcd.Endpoints) == 0 {
		bad("store.backend", "etcd needs store.etcd.endpoints (or --etcd-endpoints)")
	}
	if s.Backend == BackendBBolt && len(s.Etcd.Endpoints) > 0 {
		// Endpoints the file does not name came from --etcd-endpoints.
		set := "store.etcd.endpoints are set"
		if c.src.line("store.etcd.endpoints") == 0 {
			set = "--etcd-endpoints is given"
		}
		bad("store.backend", "bbolt, yet %s: name one backend", set)
	}
	if len(s.Etcd.Endpoints) == 0 && c.src.line("store.etcd.endpoints") > 0 {
		// A template that renders an empty list would otherwise turn a
		// replica into a lone bbolt one that shares nothing.
		bad("store.etcd.endpoints", "is an empty list: name at least one endpoint, or remove the key for the bbolt backend")
	}
	for _, e := range s.Etcd.Endpoints {
		if err := checkEndpoint(e); err != nil {
			bad("store.etcd.endpoints", "%v", err)
		}
	}
	// The store's keys follow the prefix directly (<prefix>b/<id>): without
	// a closing "/", a prefix such as /foo would share its key space with a
	// deployment on /foob/.
	if err := CheckPrefix(s.Etcd.Prefix); err != nil {
		bad("store.etcd.prefix", "%v", err)
	}
	// Under a few milliseconds no etcd request can answer: the replica
	// would never be ready. Over MaxEtcdTimeout a stalled etcd holds every
	// call past what any proxy waits.
	for _, kv := range []struct {
		key string
		d   time.Duration
	}{{"store.etcd.dial_timeout", s.Etcd.DialTimeout}, {"store.etcd.request_timeout", s.Etcd.RequestTimeout}} {
		switch {
		case kv.d <= 0:
			bad(kv.key, "must be positive, got %s", kv.d)
		case kv.d < MinEtcdTimeout:
			bad(kv.key, "must be positive and at least %s, got %s", MinEtcdTimeout, kv.d)
		case kv.d > MaxEtcdTimeout:
			bad(kv.key, "must be at most %s (a stalled etcd would hold every tool call that long), got %s", MaxEtcdTimeout, kv.d)
		}
	}
	etcd := s.Backend == BackendEtcd || (s.Backend == "" && len(s.Etcd.Endpoints) > 0)
	// record_ttl bounds what etcd keeps: a bbolt replica keeps its records
	// in its WAL, so a binding window past the etcd default is no error there.
	if etcd && (s.Etcd.RecordTTL < c.ContractRefine.BindingWindow || s.Etcd.RecordTTL < time.Second) {
		bad("store.etcd.record_ttl", "must be at least contract_refine.binding_window (%s) and 1s, got %s",
			c.ContractRefine.BindingWindow, s.Etcd.RecordTTL)
	}
	if s.Etcd.RecordTTL > MaxEtcdRecordTTL {
		bad("store.etcd.record_ttl", "must be at most %s (etcd refuses longer leases), got %s", MaxEtcdRecordTTL, s.Etcd.RecordTTL)
	}
	together(bad, "store.etcd.tls.cert_file", s.Etcd.TLS.CertFile, "store.etcd.tls.key_file", s.Etcd.TLS.KeyFile, "")
	if s.Etcd.TLS.Enabled() {
		// The etcd client dials an http:// endpoint in plain text, the TLS
		// files unused (a bare host:port or unix:// uses them).
		for _, e := range s.Etcd.Endpoints {
			if u, err := url.Parse(e); err == nil && u.Scheme == "http" { // url.Parse lower-cases the scheme
				bad("store.etcd.endpoints", "store.etcd.tls is set, yet %q is http://, which the etcd client dials without TLS: use https://", e)
			}
		}
	}
	if c.ReplicaID != "" {
		if err := CheckReplicaID(c.ReplicaID); err != nil {
			bad("replica_id", "%v", err)
		}
	}
}
