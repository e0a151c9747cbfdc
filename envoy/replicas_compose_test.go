package envoy

import (
	"bytes"
	"maps"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/contractrefine/autonomy/internal/config"
)

// replicaService is a service of docker-compose.replicas.yml: the keys of
// docker-compose.yml's services and the network aliases.
type replicaService struct {
	composeService `yaml:",inline"`
	Networks       map[string]struct {
		Aliases []string `yaml:"aliases"`
	} `yaml:"networks"`
}

var pinnedEtcdImage = regexp.MustCompile(`^quay\.io/coreos/etcd:v3\.([4-9]|[1-9][0-9])\.[0-9]+$`)

func TestComposeReplicas(t *testing.T) {
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, filepath.Join(repoRoot, "docker-compose.replicas.yml"))))
	dec.KnownFields(true)
	var c struct {
		Name     string                    `yaml:"name"`
		Services map[string]replicaService `yaml:"services"`
		Volumes  map[string]map[string]any `yaml:"volumes"`
	}
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("docker-compose.replicas.yml: %v", err)
	}
	replicas := []string{"autonomy-a", "autonomy-b", "autonomy-c"}
	want := append([]string{"envoy", "etcd"}, replicas...)
	want = append(want, "toolruntime")
	slices.Sort(want)
	if got := slices.Sorted(maps.Keys(c.Services)); !slices.Equal(got, want) {
		t.Fatalf("services %v, want %v", got, want)
	}

	etcd := c.Services["etcd"]
	if !pinnedEtcdImage.MatchString(etcd.Image) {
		t.Errorf("etcd image %q is not quay.io/coreos/etcd at an exact 3.4+ release", etcd.Image)
	}
	if etcd.Healthcheck == nil || !slices.Contains(etcd.Healthcheck.Test, "health") {
		t.Errorf("etcd has no health check")
	}
	var clientURL string
	for _, a := range etcd.Command {
		if v, ok := strings.CutPrefix(a, "--advertise-client-urls="); ok {
			clientURL = v
		}
	}
	if u, err := url.Parse(clientURL); err != nil || u.Hostname() != "etcd" {
		t.Fatalf("etcd advertises %q, want a URL naming the etcd service", clientURL)
	}

	envoy := c.Services["envoy"]
	if err := checkPinnedEnvoyImage(envoy.Image); err != nil {
		t.Error(err)
	}
	if envoy.mountOf("./envoy/envoy.yaml") == "" {
		t.Errorf("envoy does not mount envoy/envoy.yaml, whose clusters name the service autonomy")
	}
	conf := loadEnvoyConfig(t, readFile(t, "envoy.yaml"))
	grpcHost := strings.Split(conf.endpoint("autonomy_grpc"), ":")[0]

	cfgText := readFile(t, "autonomy.yaml")
	seenIDs, seenData := map[string]bool{}, map[string]bool{}
	for _, name := range replicas {
		s := c.Services[name]
		if d, ok := envoy.DependsOn[name]; !ok || d.Condition != "service_healthy" {
			t.Errorf("envoy does not wait for %s to be healthy", name)
		}
		if d, ok := s.DependsOn["etcd"]; !ok || d.Condition != "service_healthy" {
			t.Errorf("%s does not wait for etcd to be healthy", name)
		}
		if !slices.Contains(s.Networks["default"].Aliases, grpcHost) {
			t.Errorf("%s does not answer to %q, the host envoy.yaml's autonomy_grpc cluster resolves", name, grpcHost)
		}
		if got := flagValue(s.Command, "--etcd-endpoints"); got != clientURL {
			t.Errorf("%s --etcd-endpoints %q, want etcd's client URL %q", name, got, clientURL)
		}
		id := flagValue(s.Command, "--replica-id")
		if id == "" || seenIDs[id] {
			t.Errorf("%s --replica-id %q: every replica needs a name of its own", name, id)
		}
		seenIDs[id] = true
		if s.mountOf("./envoy/autonomy.yaml") == "" {
			t.Errorf("%s does not mount envoy/autonomy.yaml", name)
		}
		cfg := checkAutonomyConfig(t, cfgText)
		eps, err := config.ParseEndpoints(clientURL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Store.Etcd.Endpoints, cfg.ReplicaID = eps, id
		if err := cfg.Validate(); err != nil || cfg.StoreBackend() != config.BackendEtcd {
			t.Errorf("%s: the service would not run on etcd: %v", name, err)
		}
		var data string
		for _, m := range s.mounts() {
			if m.target == cfg.DataDir {
				data = m.source
			}
		}
		if data == "" || seenData[data] || c.Volumes[data] == nil {
			t.Errorf("%s: data dir %s is not on a named volume of its own (%q): each replica keeps its own WAL", name, cfg.DataDir, data)
		}
		seenData[data] = true
		if s.Healthcheck == nil || !strings.Contains(strings.Join(s.Healthcheck.Test, " "), "/readyz") {
			t.Errorf("%s: its health check is not /readyz, which is unready while etcd cannot answer", name)
		}
	}
}
