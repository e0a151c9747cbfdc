package envoy

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/contractrefine/autonomy/internal/config"
)

// repoRoot is where docker-compose.yml and the Dockerfile live, relative to
// this package (go test runs in the package directory).
const repoRoot = ".."

// composeFile holds the parts of docker-compose.yml the tests read. It is
// decoded with KnownFields, so a key this struct lacks (a typo such as
// "healtcheck") fails the test instead of being ignored by it.
type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]map[string]any `yaml:"volumes"`
}

type composeService struct {
	Image      string   `yaml:"image"`
	Build      string   `yaml:"build"`
	Entrypoint []string `yaml:"entrypoint"`
	Command    []string `yaml:"command"`
	Ports      []string `yaml:"ports"`
	Volumes    []string `yaml:"volumes"`
	DependsOn  map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test        []string `yaml:"test"`
		Interval    string   `yaml:"interval"`
		Timeout     string   `yaml:"timeout"`
		Retries     int      `yaml:"retries"`
		StartPeriod string   `yaml:"start_period"`
	} `yaml:"healthcheck"`
	ReadOnly bool     `yaml:"read_only"`
	Tmpfs    []string `yaml:"tmpfs"`
	Restart  string   `yaml:"restart"`
}

// mount is one "source:target[:mode]" entry of a service's volumes.
type mount struct{ source, target string }

func (s composeService) mounts() []mount {
	var out []mount
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 {
			out = append(out, mount{source: parts[0], target: parts[1]})
		}
	}
	return out
}

// mountOf returns the container path the host file source is mounted at.
func (s composeService) mountOf(source string) string {
	for _, m := range s.mounts() {
		if m.source == source {
			return m.target
		}
	}
	return ""
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, filepath.Join(repoRoot, "docker-compose.yml"))))
	dec.KnownFields(true)
	var c composeFile
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return c
}

var pinnedEnvoyImage = regexp.MustCompile(`^envoyproxy/envoy:v[0-9]+\.[0-9]+\.[0-9]+$`)

func checkPinnedEnvoyImage(image string) error {
	if !pinnedEnvoyImage.MatchString(image) {
		return fmt.Errorf("envoy image %q is not the official image at an exact release (envoyproxy/envoy:vX.Y.Z)", image)
	}
	return nil
}

// checkAutonomyConfig checks a shipped service config: the service's own
// loader accepts it as serve would, in enforce mode, with the identity
// header that Envoy strips from clients. It returns the config serve runs
// with (defaults for what the file leaves out).
func checkAutonomyConfig(t *testing.T, text []byte) config.Config {
	t.Helper()
	cfg := config.Default()
	if err := config.Decode(bytes.NewReader(text), &cfg); err != nil {
		t.Fatalf("autonomy config: the service would refuse to start: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("autonomy config: the service would refuse to start: %v", err)
	}
	if cfg.ContractRefine.Mode != config.ModeEnforce {
		t.Errorf("contract_refine.mode = %v, want enforce", cfg.ContractRefine.Mode)
	}
	if cfg.Gate.ActorHeader != actorHeader {
		t.Errorf("gate.actor_header = %v, want %s (the header Envoy strips and passes to the check)", cfg.Gate.ActorHeader, actorHeader)
	}
	return cfg
}

// listenAddr is where a service listens: the flag in its command line, else
// what its config says.
func listenAddr(args []string, flagName, configured string) string {
	if v := flagValue(args, flagName); v != "" {
		return v
	}
	return configured
}

func TestCompose(t *testing.T) {
	c := loadCompose(t)
	if got := slices.Sorted(maps.Keys(c.Services)); !slices.Equal(got, []string{"autonomy", "envoy", "toolruntime"}) {
		t.Fatalf("services = %v, want autonomy, envoy and toolruntime", got)
	}
	proxy, service, runtime := c.Services["envoy"], c.Services["autonomy"], c.Services["toolruntime"]
	front := loadEnvoyConfig(t, readFile(t, "envoy.yaml"))

	serviceConfigPath := service.mountOf("./envoy/autonomy.yaml")
	serviceArgs := append(slices.Clone(service.Entrypoint), service.Command...)
	serviceCfg := checkAutonomyConfig(t, readFile(t, "autonomy.yaml"))
	checkEtcdTimeout(t, "envoy/autonomy.yaml", &serviceCfg)
	runtimeArgs := append(slices.Clone(runtime.Entrypoint), runtime.Command...)

	t.Run("envoy runs the pinned official image with envoy.yaml", func(t *testing.T) {
		if err := checkPinnedEnvoyImage(proxy.Image); err != nil {
			t.Error(err)
		}
		if proxy.Build != "" {
			t.Error("envoy must run the official image, not a local build")
		}
		target := proxy.mountOf("./envoy/envoy.yaml")
		if target == "" || flagValue(proxy.Command, "-c") != target {
			t.Errorf("envoy -c %q, but ./envoy/envoy.yaml is mounted at %q", flagValue(proxy.Command, "-c"), target)
		}
	})

	t.Run("autonomy and toolruntime are built from the Dockerfile", func(t *testing.T) {
		for _, name := range []string{"autonomy", "toolruntime"} {
			s := c.Services[name]
			if s.Build == "" {
				t.Errorf("%s has no build", name)
				continue
			}
			if _, err := os.Stat(filepath.Join(repoRoot, s.Build, "Dockerfile")); err != nil {
				t.Errorf("%s builds %s: %v", name, s.Build, err)
			}
		}
		if serviceConfigPath == "" || flagValue(serviceArgs, "--config") != serviceConfigPath {
			t.Errorf("autonomy --config %q, but ./envoy/autonomy.yaml is mounted at %q", flagValue(serviceArgs, "--config"), serviceConfigPath)
		}
		if len(service.Command) == 0 || service.Command[0] != "serve" {
			t.Errorf("autonomy command = %v, want serve ...", service.Command)
		}
		if len(runtime.Entrypoint) == 0 || path.Base(runtime.Entrypoint[0]) != "toolruntime" {
			t.Errorf("toolruntime entrypoint = %v, want the toolruntime binary", runtime.Entrypoint)
		}
	})

	t.Run("envoy clusters reach the services where they listen", func(t *testing.T) {
		listens := map[string]struct{ service, addr string }{
			"toolruntime":   {"toolruntime", listenAddr(runtimeArgs, "--addr", "")},
			"autonomy_grpc": {"autonomy", listenAddr(serviceArgs, "--grpc-addr", serviceCfg.GRPCAddr)},
			"autonomy_http": {"autonomy", listenAddr(serviceArgs, "--http-addr", serviceCfg.HTTPAddr)},
		}
		for cluster, l := range listens {
			host, port, err := net.SplitHostPort(l.addr)
			if err != nil {
				t.Errorf("%s listens on %q: %v", l.service, l.addr, err)
				continue
			}
			if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
				t.Errorf("%s listens on %s: Envoy, in another container, cannot reach it", l.service, l.addr)
			}
			if got, want := front.endpoint(cluster), net.JoinHostPort(l.service, port); got != want {
				t.Errorf("cluster %s = %q, want %q (service %s listens on %s)", cluster, got, want, l.service, l.addr)
			}
		}
	})

	t.Run("mounted files exist and named volumes are declared", func(t *testing.T) {
		for name, s := range c.Services {
			for _, m := range s.mounts() {
				if strings.HasPrefix(m.source, ".") || strings.HasPrefix(m.source, "/") {
					if _, err := os.Stat(filepath.Join(repoRoot, m.source)); err != nil {
						t.Errorf("%s mounts %s: %v", name, m.source, err)
					}
					continue
				}
				if _, ok := c.Volumes[m.source]; !ok {
					t.Errorf("%s mounts volume %s, which is not declared", name, m.source)
				}
			}
		}
	})

	t.Run("WAL on the named volume", func(t *testing.T) {
		dataDir := listenAddr(serviceArgs, "--data-dir", serviceCfg.DataDir)
		if dataDir != "/data" {
			t.Errorf("autonomy data dir = %q, want /data", dataDir)
		}
		if service.mountOf("autonomy-data") != dataDir {
			t.Errorf("named volume autonomy-data is mounted at %q, want the data dir %q", service.mountOf("autonomy-data"), dataDir)
		}
	})

	t.Run("health checks", func(t *testing.T) {
		for name, s := range c.Services {
			if s.Healthcheck == nil || len(s.Healthcheck.Test) < 2 || s.Healthcheck.Test[0] != "CMD" {
				t.Errorf("%s has no exec-form health check", name)
			}
		}
		test := service.Healthcheck.Test
		httpAddr := listenAddr(serviceArgs, "--http-addr", serviceCfg.HTTPAddr)
		_, port, _ := net.SplitHostPort(httpAddr)
		if path.Base(test[1]) != "autonomy" || !slices.Contains(test, "healthcheck") ||
			flagValue(test, "--url") != "http://127.0.0.1:"+port+"/readyz" {
			t.Errorf("autonomy health check %v, want autonomy healthcheck --url http://127.0.0.1:%s/readyz", test, port)
		}
		for _, dep := range []string{"autonomy", "toolruntime"} {
			if proxy.DependsOn[dep].Condition != "service_healthy" {
				t.Errorf("envoy must wait for %s to be healthy", dep)
			}
		}
	})

	// The admin API can stop Envoy and change its runtime: it must listen
	// on the container's loopback (out of reach of the tool runtime) and
	// not be published.
	t.Run("envoy publishes its listener only", func(t *testing.T) {
		published := map[string]bool{}
		for _, p := range proxy.Ports {
			parts := strings.Split(p, ":")
			published[parts[len(parts)-1]] = true
		}
		if want := strconv.Itoa(int(front.listener.GetPortValue())); !published[want] || len(published) != 1 {
			t.Errorf("envoy publishes %v, want the listener's port %s alone", proxy.Ports, want)
		}
		if admin := front.bootstrap.GetAdmin().GetAddress().GetSocketAddress(); !net.ParseIP(admin.GetAddress()).IsLoopback() {
			t.Errorf("envoy's admin API listens on %s, reachable from the other containers", admin.GetAddress())
		}
		for _, name := range []string{"autonomy", "toolruntime"} {
			if len(c.Services[name].Ports) > 0 {
				t.Errorf("%s publishes %v: clients would bypass Envoy", name, c.Services[name].Ports)
			}
		}
	})

	// Reads arrive from Envoy's container, never from the service's
	// loopback: without tokens the service must be told to serve them, or
	// the demo's audit read is refused. Served without a token, they may
	// only be published on the host's loopback.
	t.Run("reads through envoy are served, and only to this host", func(t *testing.T) {
		a := serviceCfg.Access
		if a.TokensFile == "" && !a.AllowRemoteReads {
			t.Error("envoy/autonomy.yaml sets neither access.tokens_file nor access.allow_remote_reads: reads through Envoy get 403")
		}
		if a.TokensFile != "" {
			return
		}
		for _, p := range proxy.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("envoy publishes %q beyond this host while reads need no token", p)
			}
		}
	})
}

// dockerInstruction is one instruction of a Dockerfile, continuation lines
// joined.
type dockerInstruction struct {
	cmd  string // upper case: FROM, RUN, ...
	args string
}

func parseDockerfile(t *testing.T, text []byte) []dockerInstruction {
	t.Helper()
	var out []dockerInstruction
	var pending strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && pending.Len() == 0) {
			continue
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			pending.WriteString(cont + " ")
			continue
		}
		pending.WriteString(line)
		cmd, args, _ := strings.Cut(pending.String(), " ")
		out = append(out, dockerInstruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
		pending.Reset()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDockerfile(t *testing.T) {
	ins := parseDockerfile(t, readFile(t, filepath.Join(repoRoot, "Dockerfile")))
	var stages [][]dockerInstruction
	for _, in := range ins {
		if in.cmd == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) > 0 {
			stages[len(stages)-1] = append(stages[len(stages)-1], in)
		}
	}
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a multi-stage build", len(stages))
	}
	builder, final := stages[0], stages[len(stages)-1]
	if !strings.HasPrefix(builder[0].args, "golang:1.26 ") {
		t.Errorf("builder stage FROM %q, want golang:1.26", builder[0].args)
	}
	if final[0].args != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("final stage FROM %q, want gcr.io/distroless/static-debian12:nonroot", final[0].args)
	}

	var builderText strings.Builder
	for _, in := range builder {
		builderText.WriteString(in.cmd + " " + in.args + "\n")
	}
	for _, want := range []string{"CGO_ENABLED=0", "./cmd/autonomy", "./cmd/toolruntime"} {
		if !strings.Contains(builderText.String(), want) {
			t.Errorf("the builder stage does not mention %s", want)
		}
	}

	var copied, user, entrypoint string
	for _, in := range final {
		switch in.cmd {
		case "COPY":
			copied += in.args + "\n"
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			entrypoint = in.args
		}
	}
	// compose and the pod run the binaries by these paths.
	for _, bin := range []string{"autonomy", "toolruntime"} {
		if !strings.Contains(copied, "/out/"+bin) || !strings.Contains(copied, "/usr/local/bin/") {
			t.Errorf("the final stage does not copy %s into /usr/local/bin/", bin)
		}
	}
	// The last USER of the final stage is the user the container runs as.
	if user == "" || user == "root" || user == "0" || strings.HasPrefix(user, "0:") || strings.HasPrefix(user, "root:") {
		t.Errorf("final USER = %q, want a non-root user", user)
	}
	if entrypoint != `["/usr/local/bin/autonomy"]` {
		t.Errorf("ENTRYPOINT = %s, want [\"/usr/local/bin/autonomy\"]", entrypoint)
	}

	ignore := string(readFile(t, filepath.Join(repoRoot, ".dockerignore")))
	for _, want := range []string{".git", "/data"} {
		if !slices.Contains(strings.Split(ignore, "\n"), want) {
			t.Errorf(".dockerignore does not exclude %s", want)
		}
	}
}
