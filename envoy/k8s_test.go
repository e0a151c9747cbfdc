package envoy

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/contractrefine/autonomy/internal/server"
	"gopkg.in/yaml.v3"
)

var update = flag.Bool("update", false, "copy envoy-sidecar.yaml into the ConfigMap in k8s/pod.yaml")

const podFile = "k8s/pod.yaml"

// k8sDoc is one document of k8s/pod.yaml: the common fields, and the node
// to decode the rest from.
type k8sDoc struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	node *yaml.Node
}

func k8sDocs(t *testing.T) []k8sDoc {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, podFile)))
	var docs []k8sDoc
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: %v", podFile, err)
		}
		doc := k8sDoc{node: &n}
		if err := n.Decode(&doc); err != nil {
			t.Fatalf("%s: %v", podFile, err)
		}
		docs = append(docs, doc)
	}
}

func k8sDocOf(t *testing.T, kind string) k8sDoc {
	t.Helper()
	var found []k8sDoc
	for _, d := range k8sDocs(t) {
		if d.Kind == kind {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s has %d documents of kind %s, want 1", podFile, len(found), kind)
	}
	return found[0]
}

// The parts of a Deployment the tests read.
type deployment struct {
	Spec struct {
		Replicas int `yaml:"replicas"`
		Strategy struct {
			Type string `yaml:"type"`
		} `yaml:"strategy"`
		Template struct {
			Spec struct {
				SecurityContext struct {
					RunAsNonRoot bool `yaml:"runAsNonRoot"`
					RunAsUser    int  `yaml:"runAsUser"`
				} `yaml:"securityContext"`
				TerminationGracePeriodSeconds int            `yaml:"terminationGracePeriodSeconds"`
				Containers                    []k8sContainer `yaml:"containers"`
				Volumes                       []k8sVolume    `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type k8sContainer struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
	LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
	Lifecycle      struct {
		PreStop struct {
			Sleep *struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	Env []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
	Resources struct {
		Limits struct {
			Memory string `yaml:"memory"`
		} `yaml:"limits"`
	} `yaml:"resources"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type k8sProbe struct {
	TimeoutSeconds int `yaml:"timeoutSeconds"`
	Exec           *struct {
		Command []string `yaml:"command"`
	} `yaml:"exec"`
	HTTPGet *struct {
		Path string `yaml:"path"`
	} `yaml:"httpGet"`
	TCPSocket *struct {
		Port string `yaml:"port"`
	} `yaml:"tcpSocket"`
}

// binaryBytes reads a quantity in binary units as both Kubernetes (256Mi)
// and, less its B, the Go runtime (230MiB) write it.
func binaryBytes(q string) (int64, error) {
	for i, unit := range []string{"Ki", "Mi", "Gi"} {
		if n, ok := strings.CutSuffix(q, unit); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			return v << (10 * (i + 1)), err
		}
	}
	return strconv.ParseInt(q, 10, 64)
}

// target is what the probe asks: the URL or path it checks, or the port.
func (p *k8sProbe) target() string {
	switch {
	case p == nil:
		return ""
	case p.Exec != nil:
		return strings.Join(p.Exec.Command, " ")
	case p.HTTPGet != nil:
		return p.HTTPGet.Path
	case p.TCPSocket != nil:
		return "tcp:" + p.TCPSocket.Port
	}
	return ""
}

type k8sVolume struct {
	Name     string `yaml:"name"`
	EmptyDir *struct {
		Medium string `yaml:"medium"`
	} `yaml:"emptyDir"`
	PersistentVolumeClaim *struct {
		ClaimName string `yaml:"claimName"`
	} `yaml:"persistentVolumeClaim"`
	ConfigMap *struct {
		Name string `yaml:"name"`
	} `yaml:"configMap"`
}

// mountedVolume returns the volume c mounts at dir, or nil.
func mountedVolume(c k8sContainer, volumes []k8sVolume, dir string) *k8sVolume {
	for _, m := range c.VolumeMounts {
		if m.MountPath != dir {
			continue
		}
		for i := range volumes {
			if volumes[i].Name == m.Name {
				return &volumes[i]
			}
		}
	}
	return nil
}

// TestSidecarConfigMap keeps the ConfigMap's envoy.yaml identical to
// envoy-sidecar.yaml, which is the copy the other tests validate.
func TestSidecarConfigMap(t *testing.T) {
	want := readFile(t, "envoy-sidecar.yaml")
	if *update {
		if err := os.WriteFile(podFile, spliceConfigMap(t, readFile(t, podFile), want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := sidecarFromPod(t); !bytes.Equal(got, want) {
		t.Errorf("the ConfigMap's envoy.yaml in %s differs from envoy-sidecar.yaml; run go test ./envoy -run TestSidecarConfigMap -update", podFile)
	}
}

// spliceConfigMap replaces the literal block under "  envoy.yaml: |" with
// text indented four spaces.
func spliceConfigMap(t *testing.T, pod, text []byte) []byte {
	t.Helper()
	const key = "\n  envoy.yaml: |\n"
	start := bytes.Index(pod, []byte(key))
	if start < 0 {
		t.Fatalf("%s has no %q block", podFile, strings.TrimSpace(key))
	}
	start += len(key)
	end := bytes.Index(pod[start:], []byte("\n---\n"))
	if end < 0 {
		t.Fatalf("%s: the envoy.yaml block is not followed by another document", podFile)
	}
	end += start + 1
	var block bytes.Buffer
	for line := range strings.Lines(string(text)) {
		if strings.TrimSpace(line) != "" {
			block.WriteString("    ")
		}
		block.WriteString(line)
	}
	return slices.Concat(pod[:start], block.Bytes(), pod[end:])
}

func TestPodLayout(t *testing.T) {
	var d deployment
	if err := k8sDocOf(t, "Deployment").node.Decode(&d); err != nil {
		t.Fatal(err)
	}
	pod := d.Spec.Template.Spec
	containers := map[string]k8sContainer{}
	var names []string
	for _, c := range pod.Containers {
		containers[c.Name] = c
		names = append(names, c.Name)
	}
	if !slices.Equal(slices.Sorted(slices.Values(names)), []string{"autonomy", "envoy", "toolruntime"}) {
		t.Fatalf("containers = %v, want autonomy, envoy and toolruntime", names)
	}
	runtime, proxy, service := containers["toolruntime"], containers["envoy"], containers["autonomy"]
	sidecar := loadEnvoyConfig(t, readFile(t, "envoy-sidecar.yaml"))
	grpcEndpoint := sidecar.endpoint("autonomy_grpc")
	socketDir := path.Dir(strings.TrimPrefix(grpcEndpoint, "unix:"))

	t.Run("pinned Envoy image, same as compose", func(t *testing.T) {
		if err := checkPinnedEnvoyImage(proxy.Image); err != nil {
			t.Error(err)
		}
		if compose := loadCompose(t).Services["envoy"].Image; compose != proxy.Image {
			t.Errorf("k8s runs %s but compose runs %s", proxy.Image, compose)
		}
	})

	t.Run("Envoy reads the ConfigMap", func(t *testing.T) {
		config := flagValue(append(proxy.Command, proxy.Args...), "-c")
		v := mountedVolume(proxy, pod.Volumes, path.Dir(config))
		if v == nil || v.ConfigMap == nil {
			t.Fatalf("envoy -c %q: its directory is not a ConfigMap mount", config)
		}
		var cm k8sDoc
		for _, doc := range k8sDocs(t) {
			if doc.Kind == "ConfigMap" && doc.Metadata.Name == v.ConfigMap.Name {
				cm = doc
			}
		}
		if cm.Kind == "" {
			t.Fatalf("no ConfigMap named %s", v.ConfigMap.Name)
		}
		if _, ok := cm.Data[path.Base(config)]; !ok {
			t.Errorf("ConfigMap %s has no key %s", cm.Metadata.Name, path.Base(config))
		}
	})

	t.Run("Check over the shared socket", func(t *testing.T) {
		if !strings.HasPrefix(grpcEndpoint, "unix:") {
			t.Fatalf("sidecar autonomy_grpc endpoint = %q, want a Unix socket", grpcEndpoint)
		}
		if got := flagValue(service.Args, "--grpc-addr"); got != grpcEndpoint {
			t.Errorf("autonomy --grpc-addr = %q, want %q (the sidecar's autonomy_grpc pipe)", got, grpcEndpoint)
		}
		for _, c := range []k8sContainer{proxy, service} {
			v := mountedVolume(c, pod.Volumes, socketDir)
			if v == nil || v.EmptyDir == nil {
				t.Errorf("container %s does not mount an emptyDir at %s", c.Name, socketDir)
			}
		}
		if mountedVolume(runtime, pod.Volumes, socketDir) != nil {
			t.Error("the tool runtime must not see the Check socket")
		}
	})

	t.Run("loopback addresses match the sidecar clusters", func(t *testing.T) {
		if got, want := flagValue(runtime.Args, "--addr"), sidecar.endpoint("toolruntime"); got != want {
			t.Errorf("toolruntime --addr = %q, want %q", got, want)
		}
		if got, want := flagValue(service.Args, "--http-addr"), sidecar.endpoint("autonomy_http"); got != want {
			t.Errorf("autonomy --http-addr = %q, want %q", got, want)
		}
	})

	t.Run("WAL on a volume", func(t *testing.T) {
		dataDir := flagValue(service.Args, "--data-dir")
		v := mountedVolume(service, pod.Volumes, dataDir)
		if v == nil || (v.PersistentVolumeClaim == nil && v.EmptyDir == nil) {
			t.Fatalf("--data-dir %q is not a PVC or emptyDir mount", dataDir)
		}
		if v.PersistentVolumeClaim != nil && (d.Spec.Replicas != 1 || d.Spec.Strategy.Type != "Recreate") {
			t.Error("a WAL on a PVC needs one replica and the Recreate strategy: bbolt locks its file")
		}
	})

	t.Run("probes", func(t *testing.T) {
		wants := map[string]struct{ readiness, liveness string }{
			"autonomy":    {"/readyz", "/healthz"},
			"toolruntime": {"/healthz", "/healthz"},
			"envoy":       {"tcp:http", "tcp:http"},
		}
		for name, w := range wants {
			c := containers[name]
			if got := c.ReadinessProbe.target(); !strings.Contains(got, w.readiness) {
				t.Errorf("%s readiness probe %q does not check %s", name, got, w.readiness)
			}
			if got := c.LivenessProbe.target(); !strings.Contains(got, w.liveness) {
				t.Errorf("%s liveness probe %q does not check %s", name, got, w.liveness)
			}
			// An exec probe starts a process that asks over HTTP; the
			// kubelet's default of 1s would cut off a slow fsync in /readyz.
			for _, p := range []*k8sProbe{c.ReadinessProbe, c.LivenessProbe} {
				if p.Exec != nil && p.TimeoutSeconds < 3 {
					t.Errorf("%s exec probe %q has timeoutSeconds %d, want at least 3", name, p.target(), p.TimeoutSeconds)
				}
			}
		}
	})

	t.Run("GOMEMLIMIT under the container's limit", func(t *testing.T) {
		c := containers["autonomy"]
		limit, err := binaryBytes(c.Resources.Limits.Memory)
		if err != nil {
			t.Fatalf("autonomy limits.memory %q: %v", c.Resources.Limits.Memory, err)
		}
		for _, e := range c.Env {
			if e.Name != "GOMEMLIMIT" {
				continue
			}
			soft, err := binaryBytes(strings.TrimSuffix(e.Value, "B")) // Go writes 230MiB
			if err != nil {
				t.Fatalf("GOMEMLIMIT %q: %v", e.Value, err)
			}
			if soft >= limit || soft < limit*3/4 {
				t.Errorf("GOMEMLIMIT %s, want under limits.memory %s with a tenth or so of room", e.Value, c.Resources.Limits.Memory)
			}
			return
		}
		t.Error("autonomy sets no GOMEMLIMIT")
	})

	t.Run("shutdown order", func(t *testing.T) {
		// Envoy is the way in: it must stop taking calls before the
		// service and the runtime stop answering the ones it forwards, and
		// the grace period must let the service drain after its sleep.
		sleep := map[string]int{}
		for name, c := range containers {
			if c.Lifecycle.PreStop.Sleep == nil {
				t.Errorf("%s has no preStop sleep", name)
				continue
			}
			sleep[name] = c.Lifecycle.PreStop.Sleep.Seconds
		}
		for _, behind := range []string{"autonomy", "toolruntime"} {
			if sleep["envoy"] <= 0 || sleep[behind] <= sleep["envoy"] {
				t.Errorf("preStop sleeps: envoy %d s, %s %d s; want envoy's positive and shorter", sleep["envoy"], behind, sleep[behind])
			}
		}
		drain := int(server.ShutdownTimeout / time.Second)
		if grace := pod.TerminationGracePeriodSeconds; grace < sleep["autonomy"]+drain {
			t.Errorf("terminationGracePeriodSeconds %d, want at least the service's preStop sleep %d s + its %d s drain", grace, sleep["autonomy"], drain)
		}
	})

	t.Run("non-root", func(t *testing.T) {
		if !pod.SecurityContext.RunAsNonRoot || pod.SecurityContext.RunAsUser == 0 {
			t.Error("the pod must run as a non-root user")
		}
	})

	t.Run("Service reaches the sidecar listener", func(t *testing.T) {
		var svc struct {
			Spec struct {
				Ports []struct {
					TargetPort string `yaml:"targetPort"`
				} `yaml:"ports"`
			} `yaml:"spec"`
		}
		if err := k8sDocOf(t, "Service").node.Decode(&svc); err != nil {
			t.Fatal(err)
		}
		if len(svc.Spec.Ports) != 1 {
			t.Fatalf("Service has %d ports, want 1", len(svc.Spec.Ports))
		}
		var port int
		for _, p := range proxy.Ports {
			if p.Name == svc.Spec.Ports[0].TargetPort {
				port = p.ContainerPort
			}
		}
		if want := int(sidecar.listener.GetPortValue()); port != want {
			t.Errorf("Service targets envoy port %d, want the sidecar listener %d", port, want)
		}
	})

	t.Run("autonomy config", func(t *testing.T) {
		var cm k8sDoc
		for _, doc := range k8sDocs(t) {
			if _, ok := doc.Data["autonomy.yaml"]; ok {
				cm = doc
			}
		}
		config := flagValue(service.Args, "--config")
		v := mountedVolume(service, pod.Volumes, path.Dir(config))
		if v == nil || v.ConfigMap == nil || v.ConfigMap.Name != cm.Metadata.Name || path.Base(config) != "autonomy.yaml" {
			t.Fatalf("autonomy --config %q is not the ConfigMap holding autonomy.yaml", config)
		}
		checkAutonomyConfig(t, []byte(cm.Data["autonomy.yaml"]))
	})
}

// flagValue returns the value after name in args ("--name value" or
// "--name=value"), or "".
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}
