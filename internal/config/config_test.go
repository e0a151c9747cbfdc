package config

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "autonomy.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultsMatchSpec(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != "127.0.0.1:8181" || c.GRPCAddr != "127.0.0.1:9191" || c.DataDir != "./data" ||
		c.ContractRefine.Mode != ModeAdvisory || c.ContractRefine.BindingWindow != 5*time.Minute ||
		c.ContractRefine.MaxRepairAttempts != 1 || c.ContractRefine.BindingCacheTTL != time.Minute ||
		c.ContractRefine.BindingCacheSize != 100000 || c.ContractRefine.Offline || c.HTTP.MaxBodyBytes != 1048576 ||
		c.Gate.Path != "/v1/tool" || c.Gate.KindPointer != "/kind" || c.Gate.ArgsPointer != "/args" ||
		c.Gate.KindHeader != "" || c.Gate.ActorHeader != "" || c.WAL.Retention != 720*time.Hour || c.WAL.StoreRawRequests {
		t.Fatalf("defaults differ from README.md#configuration: %+v", c)
	}
}

func TestLoad(t *testing.T) {
	tests := map[string]struct {
		yaml    string
		wantErr string
		check   func(Config) bool
	}{
		"every spec key": {yaml: `
http_addr: 0.0.0.0:1
grpc_addr: unix:/tmp/a.sock
data_dir: /var/lib/autonomy
bundle: /etc/bundle
contract_refine:
  mode: enforce
  binding_window: 2m
  max_repair_attempts: 3
  binding_cache_ttl: 30s
  binding_cache_size: 10
  offline: true
http: {max_body_bytes: 2048}
gate: {path: /tools/run, kind_pointer: /tool/name, args_pointer: /tool/input, kind_header: x-tool-kind, actor_header: x-actor}
wal: {retention: 24h, store_raw_requests: true}
`, check: func(c Config) bool {
			return c.ContractRefine.Mode == ModeEnforce && c.ContractRefine.BindingWindow == 2*time.Minute &&
				c.ContractRefine.MaxRepairAttempts == 3 && c.ContractRefine.Offline && c.HTTP.MaxBodyBytes == 2048 &&
				c.Gate.KindHeader == "x-tool-kind" && c.WAL.StoreRawRequests && c.Bundle == "/etc/bundle"
		}},
		"empty file keeps defaults": {yaml: "", check: func(c Config) bool { return c.HTTPAddr == "127.0.0.1:8181" }},
		// A pair with one half set names the half the file has, at its line.
		"gateway without upstream": {yaml: "http_addr: 127.0.0.1:9\ngateway_addr: 127.0.0.1:8\n",
			wantErr: "line 2: gateway_addr: upstream and gateway_addr go together"},
		"key without cert": {yaml: "http_addr: 127.0.0.1:9\ntls: {key_file: /k.pem}\n",
			wantErr: "line 2: tls.key_file: tls.cert_file and tls.key_file go together"},
		// A second document would be dropped unread: here the mode and
		// the tokens, leaving advisory mode and open read endpoints.
		"second document": {yaml: "http_addr: 127.0.0.1:9\n---\ncontract_refine: {mode: enforce}\n",
			wantErr: "more than one YAML document"},
		"empty documents after the first": {yaml: "---\nhttp_addr: 127.0.0.1:9\n---\n---\n",
			check: func(c Config) bool { return c.HTTPAddr == "127.0.0.1:9" }},
		"unknown top-level key":   {yaml: "http_adr: x\n", wantErr: `line 1: unknown key "http_adr"`},
		"unknown nested key":      {yaml: "contract_refine:\n  mode: enforce\n  modes: x\n", wantErr: `line 3: unknown key "modes"`},
		"bad mode":                {yaml: "contract_refine: {mode: strict}\n", wantErr: `contract_refine.mode: "strict" is not one of`},
		"bad duration":            {yaml: "contract_refine: {binding_window: soon}\n", wantErr: "line 1"},
		"cache ttl above ceiling": {yaml: "contract_refine: {binding_cache_ttl: 90s}\n", wantErr: "contract_refine.binding_cache_ttl: must be positive and at most 1m0s"},
		"too many repairs":        {yaml: "contract_refine: {max_repair_attempts: 4}\n", wantErr: "contract_refine.max_repair_attempts: must be between 0 and 3"},
		"bad pointer":             {yaml: "gate: {kind_pointer: kind}\n", wantErr: `gate.kind_pointer: "kind" is not a JSON Pointer`},
		"whole-body pointer":      {yaml: "gate: {args_pointer: \"\"}\n", wantErr: `gate.args_pointer: "" is not a JSON Pointer to a member`},
		// yaml leaves the default in place for a key with no value.
		"mode left empty":       {yaml: "contract_refine:\n  mode:\n", wantErr: "line 2: contract_refine.mode: no value (null)"},
		"mode ~":                {yaml: "contract_refine: {mode: ~}\n", wantErr: "line 1: contract_refine.mode: no value (null)"},
		"section null":          {yaml: "gate: null\n", wantErr: "line 1: gate: no value (null)"},
		"bundle named \"\"":     {yaml: "bundle: \"\"\n", wantErr: `line 1: bundle: "" names nothing`},
		"tokens file \"\"":      {yaml: "access:\n  tokens_file: \"\"\n", wantErr: `line 2: access.tokens_file: "" names nothing`},
		"client CA \"\"":        {yaml: "tls: {client_ca_file: \"\"}\n", wantErr: `line 1: tls.client_ca_file: "" names nothing`},
		"body over the budget":  {yaml: "http:\n  max_body_bytes: 100000000\n", wantErr: "line 2: http.max_body_bytes: 100000000 is over http.max_bytes_in_flight (67108864, its default): raise http.max_bytes_in_flight with it"},
		"budget under the body": {yaml: "http:\n  max_bytes_in_flight: 1000\n", wantErr: "line 2: http.max_bytes_in_flight: must be at least http.max_body_bytes (1048576), got 1000"},
		"actor header \"\"":     {yaml: "gate:\n  actor_header: \"\"\n", wantErr: `line 2: gate.actor_header: "" names nothing`},
		"kind header \"\"":      {yaml: "gate: {kind_header: \"\"}\n", wantErr: `line 1: gate.kind_header: "" names nothing`},
		"negative body limit":   {yaml: "http: {max_body_bytes: -1}\n", wantErr: "http.max_body_bytes: must be positive"},
		"body limit past 1 GiB": {yaml: "http: {max_body_bytes: 9223372036854775807}\n", wantErr: "http.max_body_bytes: must be positive and at most 1073741824"},
		"wrong type":            {yaml: "contract_refine: {offline: maybe}\n", wantErr: "line 1"},
		// yaml would truncate these into the integer fields without a word.
		"fractional repairs":    {yaml: "contract_refine: {max_repair_attempts: 2.9}\n", wantErr: "line 1: contract_refine.max_repair_attempts: must be written as an integer, got 2.9"},
		"fractional body limit": {yaml: "http:\n  max_body_bytes: 1e6\n", wantErr: "line 2: http.max_body_bytes: must be written as an integer, got 1e6"},
		"whole numbers":         {yaml: "contract_refine: {binding_cache_size: 5000}\nclauses: {cost_limit: 100}\n", check: func(c Config) bool { return c.ContractRefine.BindingCacheSize == 5000 }},
		// A query in gate.path would never match a request path: nothing gated.
		"gate path with a query":   {yaml: "gate: {path: \"/v1/tool?x\"}\n", wantErr: `gate.path: must be a path starting with /`},
		"gate path with a space":   {yaml: "gate: {path: \"/v1/to ol\"}\n", wantErr: `gate.path: must be a path`},
		"kind header not a name":   {yaml: "gate: {kind_header: \"bad header\"}\n", wantErr: `gate.kind_header: "bad header" is not an HTTP header name`},
		"mcp protocol":             {yaml: "gate: {protocol: mcp, path: /mcp}\n", check: func(c Config) bool { return c.Gate.Protocol == ProtocolMCP }},
		"unknown protocol":         {yaml: "gate: {protocol: grpc}\n", wantErr: `gate.protocol: "grpc" is not one of tool, mcp`},
		"mcp with a kind header":   {yaml: "gate: {protocol: mcp, kind_header: x-kind}\n", wantErr: `gate.kind_header: is not used with gate.protocol: mcp`},
		"actor header not a name":  {yaml: "gate: {actor_header: \"x:y\"}\n", wantErr: `gate.actor_header: "x:y" is not an HTTP header name`},
		"http addr without a port": {yaml: "http_addr: nohost\n", wantErr: `line 1: http_addr: "nohost" is not host:port`},
		"http addr a number":       {yaml: "http_addr: 5\n", wantErr: `http_addr: "5" is not host:port`},
		"grpc addr bad port":       {yaml: "grpc_addr: \"127.0.0.1:abc\"\n", wantErr: `grpc_addr: "127.0.0.1:abc" has no usable port`},
		"grpc addr port too high":  {yaml: "grpc_addr: \"127.0.0.1:70000\"\n", wantErr: `grpc_addr: "127.0.0.1:70000" has no usable port`},
		"grpc addr empty socket":   {yaml: "grpc_addr: \"unix:\"\n", wantErr: `grpc_addr: "unix:" names no socket path`},
		"upstream with credentials": {yaml: "gateway_addr: \"127.0.0.1:0\"\nupstream: \"http://u:secret@127.0.0.1:9\"\n",
			wantErr: `line 2: upstream: carries credentials`},
		"two listeners one port": {yaml: "http_addr: \"127.0.0.1:18999\"\ngrpc_addr: \"127.0.0.1:18999\"\n",
			wantErr: `line 2: grpc_addr: "127.0.0.1:18999" is also http_addr`},
		"a wildcard and a host on one port": {yaml: "http_addr: \":18999\"\ngateway_addr: \"127.0.0.1:18999\"\nupstream: http://127.0.0.1:1\n",
			wantErr: `gateway_addr: "127.0.0.1:18999" is also http_addr`},
		"one socket twice":         {yaml: "http_addr: \"unix:/tmp/a.sock\"\ngrpc_addr: \"unix:/tmp/./a.sock\"\n", wantErr: `grpc_addr: "unix:/tmp/./a.sock" is also http_addr`},
		"port 0 twice is no clash": {yaml: "http_addr: \"127.0.0.1:0\"\ngrpc_addr: \"127.0.0.1:0\"\n", check: func(c Config) bool { return c.GRPCAddr == "127.0.0.1:0" }},
		"trusted proxies": {yaml: "gate: {actor_header: x-autonomy-actor}\ngateway: {trusted_proxies: [10.0.0.7, \"192.168.0.0/16\", \"::1\"]}\n",
			check: func(c Config) bool {
				p, err := c.Gateway.TrustedProxyPrefixes()
				return err == nil && len(p) == 3 && p[0].Bits() == 32
			}},
		"trusted proxy not an address": {yaml: "gate: {actor_header: x-autonomy-actor}\ngateway: {trusted_proxies: [proxy.internal]}\n",
			wantErr: `gateway.trusted_proxies: "proxy.internal" is not an IP address or CIDR prefix`},
		"trusted proxies, every peer": {yaml: "gate: {actor_header: x-autonomy-actor}\ngateway: {trusted_proxies: [\"0.0.0.0/0\"]}\n",
			wantErr: `gateway.trusted_proxies: "0.0.0.0/0" trusts every peer`},
		"trusted proxies, every IPv4 peer as 4-in-6": {yaml: "gate: {actor_header: x-autonomy-actor}\ngateway: {trusted_proxies: [\"::ffff:0.0.0.0/96\"]}\n",
			wantErr: `trusts every peer`},
		"trusted proxies, 4-in-6": {yaml: "gate: {actor_header: x-autonomy-actor}\ngateway: {trusted_proxies: [\"::ffff:10.0.0.0/104\"]}\n",
			check: func(c Config) bool {
				p, err := c.Gateway.TrustedProxyPrefixes()
				return err == nil && len(p) == 1 && p[0] == netip.MustParsePrefix("10.0.0.0/8")
			}},
		"trusted proxies without an actor header": {yaml: "gateway: {trusted_proxies: [10.0.0.7]}\n",
			wantErr: "gateway.trusted_proxies: trusts proxies to set gate.actor_header, which is not set"},
		"listen addrs that serve takes": {yaml: "http_addr: \":0\"\ngrpc_addr: unix:///run/autonomy/grpc.sock\n", check: func(c Config) bool { return c.HTTPAddr == ":0" }},
		"reload and tracing keys": {yaml: "reload: {watch: false, debounce: 2s}\ntracing: {otlp_endpoint: http://collector:4317, sample_ratio: 0.5}\n",
			check: func(c Config) bool {
				return !c.Reload.Watch && c.Reload.Debounce == 2*time.Second &&
					c.Tracing.OTLPEndpoint == "http://collector:4317" && c.Tracing.SampleRatio == 0.5
			}},
		"reload defaults":      {yaml: "", check: func(c Config) bool { return c.Reload.Watch && c.Reload.Debounce > 0 && c.Tracing.OTLPEndpoint == "" }},
		"zero debounce":        {yaml: "reload: {debounce: 0s}\n", wantErr: "reload.debounce: must be positive"},
		"otlp endpoint no URL": {yaml: "tracing: {otlp_endpoint: collector:4317}\n", wantErr: `tracing.otlp_endpoint: "collector:4317" is not an http:// or https:// URL`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Load(writeFile(t, tc.yaml))
			if err == nil {
				err = c.Validate()
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(c) {
				t.Fatalf("loaded %+v", c)
			}
		})
	}
}

// TestValidateTextIsDeterministic: a config with every checked duration,
// header and address wrong gives the same error text on every run, its
// keys in the order Validate checks them.
func TestValidateTextIsDeterministic(t *testing.T) {
	c := Default()
	c.HTTP.ReadHeaderTimeout, c.HTTP.ReadTimeout, c.HTTP.WriteTimeout, c.HTTP.IdleTimeout = -1, -1, -1, -1
	c.Policy.Timeout, c.WAL.Retention, c.WAL.CompactionInterval = -1, -1, -1
	c.Gate.KindHeader, c.Gate.ActorHeader = "bad header", "bad header"
	c.HTTPAddr, c.GRPCAddr, c.GatewayAddr = "nope", "nope", "nope"
	first := c.Validate()
	if first == nil {
		t.Fatal("Validate accepted a config with every checked key wrong")
	}
	keys := []string{"http.read_header_timeout", "http.read_timeout", "http.write_timeout", "http.idle_timeout",
		"policy.timeout", "wal.retention", "wal.compaction_interval", "gate.kind_header", "gate.actor_header",
		"http_addr", "grpc_addr", "gateway_addr"}
	at := -1
	for _, k := range keys {
		i := strings.Index(first.Error(), k+":")
		if i <= at {
			t.Fatalf("%s at %d, after the previous key at %d, in:\n%s", k, i, at, first)
		}
		at = i
	}
	for range 50 {
		if err := c.Validate(); err == nil || err.Error() != first.Error() {
			t.Fatalf("Validate text changed between runs:\n%v\nthen\n%v", first, err)
		}
	}
}
