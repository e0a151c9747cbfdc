package envoy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/contractrefine/autonomy/internal/config"
)

const replicasFile = "k8s/replicas.yaml"

// replicasDoc holds what the test reads of one document of
// k8s/replicas.yaml.
type replicasDoc struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		Replicas     int    `yaml:"replicas"`
		ServiceName  string `yaml:"serviceName"`
		MinAvailable int    `yaml:"minAvailable"`
		ClusterIP    string `yaml:"clusterIP"`
		Selector     struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				Containers []struct {
					Name    string   `yaml:"name"`
					Image   string   `yaml:"image"`
					Command []string `yaml:"command"`
					Args    []string `yaml:"args"`
					Env     []struct {
						Name      string `yaml:"name"`
						ValueFrom struct {
							FieldRef struct {
								FieldPath string `yaml:"fieldPath"`
							} `yaml:"fieldRef"`
						} `yaml:"valueFrom"`
					} `yaml:"env"`
					ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
					LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

func replicasDocs(t *testing.T) map[string]replicasDoc {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, replicasFile)))
	out := map[string]replicasDoc{}
	for {
		var d replicasDoc
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", replicasFile, err)
		}
		key := d.Kind + "/" + d.Metadata.Name
		if _, dup := out[key]; dup {
			t.Fatalf("%s: two %s", replicasFile, key)
		}
		out[key] = d
	}
}

func labelsMatch(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestK8sReplicas(t *testing.T) {
	docs := replicasDocs(t)
	for _, key := range []string{"ConfigMap/autonomy-replicas", "Deployment/autonomy", "Service/autonomy",
		"PodDisruptionBudget/autonomy", "Service/etcd", "StatefulSet/etcd", "PodDisruptionBudget/etcd", "NetworkPolicy/etcd"} {
		if _, ok := docs[key]; !ok {
			t.Fatalf("%s has no %s", replicasFile, key)
		}
	}
	dep, sts := docs["Deployment/autonomy"], docs["StatefulSet/etcd"]
	if dep.Spec.Replicas != 3 || sts.Spec.Replicas != 3 {
		t.Fatalf("replicas: autonomy %d, etcd %d; want 3 and 3", dep.Spec.Replicas, sts.Spec.Replicas)
	}
	for name, pdb := range map[string]replicasDoc{"autonomy": docs["PodDisruptionBudget/autonomy"], "etcd": docs["PodDisruptionBudget/etcd"]} {
		pods := dep
		if name == "etcd" {
			pods = sts
		}
		if pdb.Spec.MinAvailable != 2 || !labelsMatch(pdb.Spec.Selector.MatchLabels, pods.Spec.Template.Metadata.Labels) {
			t.Errorf("PodDisruptionBudget %s: minAvailable %d over %v; want 2 over the %s pods", name, pdb.Spec.MinAvailable, pdb.Spec.Selector.MatchLabels, name)
		}
	}
	if svc := docs["Service/etcd"]; svc.Spec.ClusterIP != "None" || sts.Spec.ServiceName != "etcd" {
		t.Errorf("etcd needs a headless Service named by the StatefulSet's serviceName")
	}

	// The etcd members and the endpoints the replicas dial are the same three.
	etcd := sts.Spec.Template.Spec.Containers[0]
	if !pinnedEtcdImage.MatchString(etcd.Image) {
		t.Errorf("etcd image %q is not quay.io/coreos/etcd at an exact 3.4+ release", etcd.Image)
	}
	var members []string
	for _, a := range etcd.Command {
		if v, ok := strings.CutPrefix(a, "--initial-cluster="); ok {
			for _, m := range strings.Split(v, ",") {
				name, _, _ := strings.Cut(m, "=")
				members = append(members, name)
			}
		}
	}
	wantMembers := []string{"etcd-0", "etcd-1", "etcd-2"}
	if !slices.Equal(members, wantMembers) {
		t.Fatalf("etcd --initial-cluster members %v, want %v (the StatefulSet's pods)", members, wantMembers)
	}

	cfg := config.Default()
	if err := config.Decode(strings.NewReader(docs["ConfigMap/autonomy-replicas"].Data["autonomy.yaml"]), &cfg); err != nil {
		t.Fatalf("autonomy.yaml in the ConfigMap: %v", err)
	}
	if err := cfg.Validate(); err != nil || cfg.StoreBackend() != config.BackendEtcd || cfg.ContractRefine.Mode != config.ModeEnforce {
		t.Fatalf("autonomy.yaml in the ConfigMap: backend %s, mode %s, %v; want etcd, enforce, valid", cfg.StoreBackend(), cfg.ContractRefine.Mode, err)
	}
	checkEtcdTimeout(t, replicasFile, &cfg)
	var hosts []string
	for _, e := range cfg.Store.Etcd.Endpoints {
		u, err := url.Parse(e)
		if err != nil || u.Port() != "2379" {
			t.Fatalf("endpoint %q is not a member's client URL", e)
		}
		hosts = append(hosts, u.Hostname())
	}
	for i, m := range wantMembers {
		if i >= len(hosts) || hosts[i] != fmt.Sprintf("%s.%s", m, sts.Spec.ServiceName) {
			t.Fatalf("endpoints %v, want each member as <pod>.%s", hosts, sts.Spec.ServiceName)
		}
	}

	c := dep.Spec.Template.Spec.Containers[0]
	if flagValue(c.Args, "--replica-id") != "$(POD_NAME)" {
		t.Errorf("autonomy --replica-id %q, want $(POD_NAME): each pod names itself", flagValue(c.Args, "--replica-id"))
	}
	podName := false
	for _, e := range c.Env {
		podName = podName || e.Name == "POD_NAME" && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
	}
	if !podName {
		t.Errorf("POD_NAME is not the pod's metadata.name")
	}
	if c.ReadinessProbe == nil || !strings.Contains(c.ReadinessProbe.target(), "/readyz") {
		t.Errorf("autonomy's readiness probe is not /readyz, which is unready while etcd cannot answer")
	}
	// /readyz asks etcd after a synced WAL write; the kubelet's default of
	// 1s would flap every replica together when etcd is slow.
	for _, p := range []*k8sProbe{c.ReadinessProbe, c.LivenessProbe} {
		if p == nil || p.TimeoutSeconds < 3 {
			t.Errorf("autonomy probe %v: want timeoutSeconds of at least 3", p)
		}
	}
	if !labelsMatch(dep.Spec.Selector.MatchLabels, dep.Spec.Template.Metadata.Labels) {
		t.Errorf("the Deployment's selector does not match its pods")
	}
}

// envoyCheckTimeout is the ext_authz timeout of every shipped Envoy config
// (envoy_test.go checks it).
const envoyCheckTimeout = 2 * time.Second

// checkEtcdTimeout: a consume may wait store.etcd.request_timeout to be
// sent and as long again for its transaction; twice it plus policy.timeout
// must stay under Envoy's ext_authz timeout, or Envoy answers 503 while
// etcd may still take the consume and spend the step.
func checkEtcdTimeout(t *testing.T, file string, cfg *config.Config) {
	t.Helper()
	if worst := 2*cfg.Store.Etcd.RequestTimeout + cfg.Policy.Timeout; worst >= envoyCheckTimeout*9/10 {
		t.Errorf("%s: 2 × store.etcd.request_timeout (%s) + policy.timeout (%s) = %s, want it well under Envoy's ext_authz timeout of %s",
			file, cfg.Store.Etcd.RequestTimeout, cfg.Policy.Timeout, worst, envoyCheckTimeout)
	}
}
