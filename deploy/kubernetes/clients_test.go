package kubernetes

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/partition"
)

// checkClientService checks the Service clients dial: any replica's client
// port, the configuration's gRPC port; and that Prometheus' job finds the
// pods (deploy/prometheus/prometheus.yml keeps pods by label and port name).
func checkClientService(t *testing.T, m *manifests, cfg *partition.ClusterConfig, pods []labels.Set) {
	t.Helper()
	svc := m.services[clientService]
	if svc == nil {
		t.Fatalf("no client Service %s", clientService)
	}
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	for _, p := range pods {
		if !sel.Matches(p) {
			t.Errorf("Service %s (%s) does not select the pods %v", clientService, sel, p)
		}
	}
	c := m.statefulsets[0].Spec.Template.Spec.Containers[0]
	checkServicePorts(t, svc, c.Ports)
	_, grpcPort, _ := net.SplitHostPort(cfg.Groups[0].Replicas[0].GRPC)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "grpc" || strconv.Itoa(int(svc.Spec.Ports[0].Port)) != grpcPort {
		t.Errorf("Service %s ports %+v, want the client port grpc (%s) alone", clientService, svc.Spec.Ports, grpcPort)
	}
	b, err := os.ReadFile(filepath.Join("..", "prometheus", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, keep := range []struct{ source, value string }{
		{"__meta_kubernetes_pod_label_app_kubernetes_io_name", pods[0]["app.kubernetes.io/name"]},
		{"__meta_kubernetes_pod_container_port_name", "metrics"},
	} {
		re := regexp.MustCompile(`(?s)source_labels: \[` + keep.source + `\]\s+regex: (\S+)\s+action: keep`)
		got := re.FindSubmatch(b)
		if got == nil || !regexp.MustCompile("^(?:"+string(got[1])+")$").MatchString(keep.value) {
			t.Errorf("prometheus.yml: no keep of %s matching %q, so Prometheus would not scrape the pods", keep.source, keep.value)
		}
	}
}

// checkJob checks the gTPC-C Job: load, run and check in that order, with
// the replicas' image, the configuration and the client Secret, and pods
// that no Service or budget of the replicas selects.
func checkJob(t *testing.T, m *manifests, image string, pods []labels.Set) {
	t.Helper()
	job := m.jobs[jobName]
	if job == nil {
		t.Fatalf("no Job %s in %s", jobName, jobFile)
	}
	spec := job.Spec.Template.Spec
	if spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("Job %s: restartPolicy %q, want Never (a failed check is a result, not a retry)", jobName, spec.RestartPolicy)
	}
	var steps []string
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		if len(c.Args) < 2 || c.Args[0] != "gtpcc" {
			t.Errorf("Job %s: container %s args %q, want gtpcc ...", jobName, c.Name, c.Args)
			continue
		}
		steps = append(steps, c.Args[1])
		if c.Image != image {
			t.Errorf("Job %s: container %s image %s, want the replicas' %s", jobName, c.Name, c.Image, image)
		}
		env := map[string]corev1.EnvVar{}
		for _, e := range c.Env {
			env[e.Name] = e
		}
		vols := volumes(spec.Volumes, c.VolumeMounts)
		checkConfigEnv(t, m, env, vols)
		checkSecretMount(t, m, c.Name+" FLEXKV_CERTS_DIR", env["FLEXKV_CERTS_DIR"].Value, vols,
			[]string{certs.CAFile, certs.ClientCertFile("root"), certs.ClientKeyFile("root")})
	}
	if strings.Join(steps, " ") != "load run check" {
		t.Errorf("Job %s runs gtpcc %q, want load, run, check", jobName, steps)
	}
	jobPod := labels.Set(job.Spec.Template.Labels)
	for _, svc := range m.services {
		if len(svc.Spec.Selector) > 0 && labels.SelectorFromSet(svc.Spec.Selector).Matches(jobPod) {
			t.Errorf("Service %s selects the Job's pod", svc.Name)
		}
	}
	for _, pdb := range m.pdbs {
		if s, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err == nil && s.Matches(jobPod) {
			t.Errorf("PodDisruptionBudget %s selects the Job's pod", pdb.Name)
		}
	}
	for _, p := range pods {
		if labels.Equals(p, jobPod) {
			t.Errorf("the Job's pod has a replica's labels")
		}
	}
}

// TestCertRecipe follows the documented recipe, `flexkv cert
// create-cluster --config cluster.yaml` (certs.EnsureCluster with the
// configuration's replicas and user root), and checks that it makes every
// file the Secrets are made of, and that each replica loads its
// certificate from them under its pod's name.
func TestCertRecipe(t *testing.T) {
	m := loadManifests(t)
	cfg := deployed(t, m)
	dir := filepath.Join(t.TempDir(), "certs")
	var nodes []certs.NodeSpec
	for _, g := range cfg.Groups {
		for _, r := range g.Replicas {
			hosts, err := certs.HostsOf(r.Raft, r.GRPC, r.PeerAddr())
			if err != nil {
				t.Fatal(err)
			}
			nodes = append(nodes, certs.NodeSpec{ID: certs.NodeID{Group: g.Name, Replica: r.ID}, Hosts: hosts})
		}
	}
	if _, err := certs.EnsureCluster(dir, filepath.Join(t.TempDir(), "ca.key"), nodes, []string{"root"}); err != nil {
		t.Fatal(err)
	}
	for name, files := range m.secrets { //flexkv:unordered independent checks
		for _, f := range files {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Errorf("Secret %s: %s is not made by the recipe: %v", name, f, err)
			}
		}
	}
	for _, n := range nodes {
		got, err := certs.LoadNode(dir, n.ID.Replica)
		if err != nil {
			t.Fatalf("replica %s: %v", n.ID.Replica, err)
		}
		if got.ID != n.ID {
			t.Errorf("replica %s: certificate names %s, want %s", n.ID.Replica, got.ID, n.ID)
		}
	}
}

// TestDecodeStrict checks that a manifest with an unknown or misplaced
// field, or of a kind the checks do not know, is refused.
func TestDecodeStrict(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec: {clusterIp: None}\n", "clusterIp"},
		{"apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: a}\nspec: {replicas: 3, replicas: 4}\n", "replicas"},
		{"apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: a}\nspec: {maxUnavailble: 1}\n", "maxUnavailble"},
		{"apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n", "kind \"Pod\""},
		{"apiVersion: apps/v1beta1\nkind: StatefulSet\nmetadata: {name: a}\n", "apps/v1beta1"},
	} {
		if _, err := decodeObject([]byte(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("decode %q: %v, want an error naming %q", tc.doc, err, tc.want)
		}
	}
}
