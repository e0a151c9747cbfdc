package config

import (
	"strings"
	"testing"
	"time"
)

func TestStoreDefaults(t *testing.T) {
	c := Default()
	e := c.Store.Etcd
	if c.StoreBackend() != BackendBBolt || e.Prefix != "/contractrefine/" || e.DialTimeout != 5*time.Second ||
		e.RequestTimeout != 2*time.Second || e.RecordTTL != 24*time.Hour || c.ReplicaID != "" || c.Replica() == "" {
		t.Fatalf("store defaults differ from docs/DEPLOY.md: %+v backend %s replica %q", c.Store, c.StoreBackend(), c.Replica())
	}
}

func TestStoreKeys(t *testing.T) {
	tests := map[string]struct {
		yaml        string
		wantErr     string
		wantBackend string
	}{
		"endpoints alone choose etcd": {yaml: "store: {etcd: {endpoints: [\"http://127.0.0.1:2379\"]}}", wantBackend: BackendEtcd},
		"every key": {yaml: `
replica_id: pod-a.example_1
store:
  backend: etcd
  etcd:
    endpoints: [https://etcd-0:2379, etcd-1:2379, "unix:///run/etcd.sock"]
    prefix: /cr/
    dial_timeout: 1s
    request_timeout: 500ms
    record_ttl: 1h
    tls: {ca_file: /ca.pem, cert_file: /c.pem, key_file: /k.pem}
`, wantBackend: BackendEtcd},
		"explicit bbolt":              {yaml: "store: {backend: bbolt}", wantBackend: BackendBBolt},
		"unknown backend":             {yaml: "store: {backend: redis}", wantErr: `line 1: store.backend: "redis" is not one of bbolt, etcd`},
		"etcd without endpoints":      {yaml: "store: {backend: etcd}", wantErr: "line 1: store.backend: etcd needs store.etcd.endpoints"},
		"bbolt with endpoints":        {yaml: "store: {backend: bbolt, etcd: {endpoints: [\"a:1\"]}}", wantErr: "store.backend: bbolt, yet"},
		"bad endpoint scheme":         {yaml: "store: {etcd: {endpoints: [\"ftp://a:1\"]}}", wantErr: "store.etcd.endpoints: \"ftp://a:1\": the scheme"},
		"endpoint port too high":      {yaml: "store: {etcd: {endpoints: [\"http://127.0.0.1:99999\"]}}", wantErr: `store.etcd.endpoints: "http://127.0.0.1:99999" has no usable port`},
		"empty endpoint list":         {yaml: "store:\n  etcd:\n    endpoints: []\n", wantErr: "line 3: store.etcd.endpoints: is an empty list"},
		"endpoint without port":       {yaml: "store: {etcd: {endpoints: [\"http://a\"]}}", wantErr: "is not http(s)://host:port"},
		"empty prefix":                {yaml: "store: {etcd: {prefix: \"\"}}", wantErr: "store.etcd.prefix: must be non-empty"},
		"prefix without its slash":    {yaml: "store: {etcd: {prefix: /foo}}", wantErr: `store.etcd.prefix: must be non-empty text without control characters, ending in "/", got "/foo"`},
		"zero request timeout":        {yaml: "store: {etcd: {request_timeout: 0s}}", wantErr: "store.etcd.request_timeout: must be positive"},
		"zero dial timeout":           {yaml: "store: {etcd: {dial_timeout: 0s}}", wantErr: "store.etcd.dial_timeout: must be positive"},
		"a nanosecond's timeout":      {yaml: "store: {etcd: {request_timeout: 1ns}}", wantErr: "store.etcd.request_timeout: must be positive and at least 10ms, got 1ns"},
		"an hour's request timeout":   {yaml: "store: {etcd: {request_timeout: 1h}}", wantErr: "line 1: store.etcd.request_timeout: must be at most 30s (a stalled etcd would hold every tool call that long), got 1h0m0s"},
		"a huge dial timeout":         {yaml: "store: {etcd: {dial_timeout: 1000000h}}", wantErr: "store.etcd.dial_timeout: must be at most 30s"},
		"the longest timeouts":        {yaml: "store: {etcd: {endpoints: [\"a:1\"], dial_timeout: 30s, request_timeout: 30s}}", wantBackend: BackendEtcd},
		"a prefix too long":           {yaml: "store: {etcd: {prefix: /" + strings.Repeat("p", 300) + "/}}", wantErr: "line 1: store.etcd.prefix: must be at most 256 bytes, got 302"},
		"the longest prefix":          {yaml: "store: {etcd: {endpoints: [\"a:1\"], prefix: /" + strings.Repeat("p", 254) + "/}}", wantBackend: BackendEtcd},
		"endpoint with credentials":   {yaml: "store: {etcd: {endpoints: [\"http://u:pw@127.0.0.1:2379\"]}}", wantErr: `"http://u:pw@127.0.0.1:2379" carries credentials`},
		"bare host quoted as written": {yaml: "store: {etcd: {endpoints: [\"127.0.0.1\"]}}", wantErr: `store.etcd.endpoints: "127.0.0.1" is not http(s)://host:port`},
		"ttl below window":            {yaml: "contract_refine: {binding_window: 10m}\nstore: {etcd: {endpoints: [\"a:1\"], record_ttl: 5m}}", wantErr: "store.etcd.record_ttl: must be at least contract_refine.binding_window (10m0s)"},
		"bbolt, window past ttl":      {yaml: "contract_refine: {binding_window: 25h}", wantBackend: BackendBBolt},
		"ttl past etcd's leases":      {yaml: "store: {etcd: {endpoints: [\"a:1\"], record_ttl: 2562000h}}", wantErr: "store.etcd.record_ttl: must be at most 87600h0m0s"},
		"tls over HTTP":               {yaml: "store: {etcd: {endpoints: [\"HTTP://a:1\"], tls: {ca_file: /ca.pem}}}", wantErr: `store.etcd.tls is set, yet "HTTP://a:1" is http://`},
		"tls over http":               {yaml: "store: {etcd: {endpoints: [\"http://a:1\"], tls: {ca_file: /ca.pem}}}", wantErr: `store.etcd.endpoints: store.etcd.tls is set, yet "http://a:1" is http://`},
		"cert without key":            {yaml: "store: {etcd: {tls: {cert_file: /c.pem}}}", wantErr: "store.etcd.tls.cert_file: store.etcd.tls.cert_file and store.etcd.tls.key_file go together"},
		"key without cert":            {yaml: "store: {etcd: {tls: {key_file: /k.pem}}}", wantErr: "line 1: store.etcd.tls.key_file: store.etcd.tls.cert_file and store.etcd.tls.key_file go together"},
		"bad replica id":              {yaml: "replica_id: \"a b\"", wantErr: `replica_id: "a b" is not a replica name`},
		"unknown store key":           {yaml: "store: {etcd: {endpoint: [\"a:1\"]}}", wantErr: `unknown key "endpoint"`},
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
			if got := c.StoreBackend(); got != tc.wantBackend {
				t.Fatalf("backend %s, want %s", got, tc.wantBackend)
			}
		})
	}
}

func TestParseEndpoints(t *testing.T) {
	eps, err := ParseEndpoints("http://127.0.0.1:2379, 127.0.0.1:22379")
	if err != nil || len(eps) != 2 || eps[1] != "127.0.0.1:22379" {
		t.Fatalf("%v %v", eps, err)
	}
	if _, err := ParseEndpoints("http://a:1,,"); err == nil {
		t.Fatal("empty endpoint accepted")
	}
}
