package kubernetes

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/partition"
)

// The names the manifests agree on.
const (
	configMapName = "flexkv-config"
	configKey     = "cluster.yaml"
	stateKey      = "initial-cluster-state"
	clientSecret  = "flexkv-client-root"
	clientService = "flexkv"
	jobName       = "flexkv-gtpcc"
)

// deployed returns the cluster configuration the manifests deploy: the
// ConfigMap's, checked against configs/docker.yaml, the same 3 x 3 cluster
// under other addresses.
func deployed(t *testing.T, m *manifests) *partition.ClusterConfig {
	t.Helper()
	data := m.configMaps[configMapName]
	cfg, err := clusterConfig([]byte(data[configKey]))
	if err != nil {
		t.Fatalf("ConfigMap %s, %s: %v", configMapName, configKey, err)
	}
	if s := data[stateKey]; s != "new" && s != "existing" {
		t.Errorf("ConfigMap %s: %s = %q, want new or existing", configMapName, stateKey, s)
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "configs", "docker.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ref, err := clusterConfig(b)
	if err != nil {
		t.Fatalf("configs/docker.yaml: %v", err)
	}
	shape := func(c *partition.ClusterConfig) string {
		var s strings.Builder
		fmt.Fprintf(&s, "%s %v %v %+v\n", c.Protocol, c.Overlay, c.Tree, c.Partitions)
		for _, g := range c.Groups {
			fmt.Fprintf(&s, "%s %s %d\n", g.Name, g.Region, len(g.Replicas))
		}
		return s.String()
	}
	if got, want := shape(cfg), shape(ref); got != want {
		t.Errorf("the deployed configuration is not configs/docker.yaml's 3 x 3 cluster:\n%s\nwant\n%s", got, want)
	}
	return cfg
}

// TestManifestsMatchConfiguration decodes every manifest strictly into the
// Kubernetes API types and checks each reference against the configuration
// the ConfigMap deploys: one StatefulSet per group whose pods are the
// group's replicas at their configured addresses, with its headless
// Service, PodDisruptionBudget, Secret, probes and anti-affinity; the
// client Service; the gTPC-C Job.
func TestManifestsMatchConfiguration(t *testing.T) {
	m := loadManifests(t)
	cfg := deployed(t, m)
	if len(m.statefulsets) != len(cfg.Groups) {
		t.Fatalf("%d StatefulSets for %d groups, want one per group", len(m.statefulsets), len(cfg.Groups))
	}
	var pods []labels.Set
	for _, sts := range m.statefulsets {
		pods = append(pods, sts.Spec.Template.Labels)
	}
	image := m.statefulsets[0].Spec.Template.Spec.Containers[0].Image
	for i, g := range cfg.Groups {
		sts := m.statefulsets[i]
		t.Run(g.Name, func(t *testing.T) {
			checkStatefulSet(t, m, g, sts, pods, i)
			if c := sts.Spec.Template.Spec.Containers[0]; c.Image != image {
				t.Errorf("image %s, want every StatefulSet's %s", c.Image, image)
			}
		})
	}
	checkClientService(t, m, cfg, pods)
	checkJob(t, m, image, pods)
}

// checkStatefulSet checks the StatefulSet of group g, the i-th; pods are
// every group's pod labels.
func checkStatefulSet(t *testing.T, m *manifests, g partition.GroupConfig, sts *appsv1.StatefulSet, pods []labels.Set, i int) {
	t.Helper()
	spec := sts.Spec
	if sts.Name != "flexkv-"+g.Name || spec.Replicas == nil || int(*spec.Replicas) != len(g.Replicas) {
		t.Fatalf("StatefulSet %s with %v replicas, want flexkv-%s with %d", sts.Name, spec.Replicas, g.Name, len(g.Replicas))
	}
	if spec.PodManagementPolicy != appsv1.OrderedReadyPodManagement {
		t.Errorf("podManagementPolicy %q, want OrderedReady (ordered start, DESIGN 15)", spec.PodManagementPolicy)
	}
	selects(t, "the StatefulSet's selector", spec.Selector, pods, i)
	if len(spec.Template.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want the replica's one", len(spec.Template.Spec.Containers))
	}
	c := spec.Template.Spec.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for j, r := range g.Replicas {
		host := fmt.Sprintf("%s-%d.%s", sts.Name, j, spec.ServiceName)
		if want := fmt.Sprintf("%s-%d", sts.Name, j); r.ID != want {
			t.Errorf("replica %d is %s, want the pod's name %s (FLEXKV_NODE is the pod's name)", j, r.ID, want)
		}
		for _, a := range []struct{ name, addr string }{{"raft", r.Raft}, {"grpc", r.GRPC}, {"peer", r.PeerAddr()}} {
			if want := net.JoinHostPort(host, strconv.Itoa(int(ports[a.name]))); a.addr != want {
				t.Errorf("replica %s: %s address %s, want %s (the pod's DNS name, its container port %q)", r.ID, a.name, a.addr, want, a.name)
			}
		}
	}
	checkEnv(t, m, sts, c, g)
	checkProbes(t, c, ports["peer"])
	checkAntiAffinity(t, spec.Template.Spec.Affinity, pods, i)
	checkHeadless(t, m.services[spec.ServiceName], spec.ServiceName, c.Ports, pods, i)
	n := 0
	for _, pdb := range m.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || !sel.Matches(pods[i]) {
			continue
		}
		n++
		selects(t, "PodDisruptionBudget "+pdb.Name, pdb.Spec.Selector, pods, i)
		if mu := pdb.Spec.MaxUnavailable; mu == nil || mu.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
			t.Errorf("PodDisruptionBudget %s: maxUnavailable %v, minAvailable %v; want maxUnavailable 1 alone", pdb.Name, mu, pdb.Spec.MinAvailable)
		}
	}
	if n != 1 {
		t.Errorf("%d PodDisruptionBudgets select the group's pods, want 1", n)
	}
}

// selects checks that sel selects pods[i] and no other group's pods.
func selects(t *testing.T, what string, sel *metav1.LabelSelector, pods []labels.Set, i int) {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	for j, p := range pods {
		if s.Matches(p) != (j == i) {
			t.Errorf("%s (%s) selects pods %v: %v, want %v", what, s, p, s.Matches(p), j == i)
		}
	}
}

// checkEnv checks the replica's settings (flexkv server's FLEXKV_*): its
// node is the pod's name, its configuration, certificates and data are the
// mounted ConfigMap, Secret and claim, the ports it serves are the
// container's.
func checkEnv(t *testing.T, m *manifests, sts *appsv1.StatefulSet, c corev1.Container, g partition.GroupConfig) {
	t.Helper()
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if f := env["FLEXKV_NODE"].ValueFrom; f == nil || f.FieldRef == nil || f.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("FLEXKV_NODE: want the pod's name (fieldRef metadata.name)")
	}
	if c.Args[0] != "server" {
		t.Errorf("args %q, want server", c.Args)
	}
	vols := volumes(sts.Spec.Template.Spec.Volumes, c.VolumeMounts)
	checkConfigEnv(t, m, env, vols)
	want := []string{certs.CAFile}
	for _, r := range g.Replicas {
		want = append(want, certs.NodeCertFile(r.ID), certs.NodeKeyFile(r.ID))
	}
	checkSecretMount(t, m, "FLEXKV_CERTS_DIR", env["FLEXKV_CERTS_DIR"].Value, vols, want)
	claims := map[string]bool{}
	for _, pvc := range sts.Spec.VolumeClaimTemplates {
		claims[pvc.Name] = true
	}
	if d := env["FLEXKV_DATA_DIR"].Value; d == "" || !claims[mountedAt(c.VolumeMounts, d)] {
		t.Errorf("FLEXKV_DATA_DIR %q is not a volume claim template's mount", d)
	}
	if h := env["FLEXKV_LISTEN_HOST"].Value; h != "0.0.0.0" {
		t.Errorf("FLEXKV_LISTEN_HOST %q, want 0.0.0.0: the pod's DNS name resolves only once it runs", h)
	}
	metrics := ""
	for _, p := range c.Ports {
		if p.Name == "metrics" {
			metrics = strconv.Itoa(int(p.ContainerPort))
		}
	}
	if _, port, err := net.SplitHostPort(env["FLEXKV_METRICS"].Value); err != nil || port != metrics || metrics == "" {
		t.Errorf("FLEXKV_METRICS %q, want the container port named metrics (%s), which Prometheus scrapes", env["FLEXKV_METRICS"].Value, metrics)
	}
	ref := env["FLEXKV_INITIAL_CLUSTER_STATE"].ValueFrom
	if ref == nil || ref.ConfigMapKeyRef == nil || ref.ConfigMapKeyRef.Name != configMapName || ref.ConfigMapKeyRef.Key != stateKey {
		t.Errorf("FLEXKV_INITIAL_CLUSTER_STATE: want ConfigMap %s's key %s", configMapName, stateKey)
	}
}

// mount is a volume as a container mounts it.
type mount struct {
	path string
	vol  corev1.Volume
}

// volumes returns the mounts of a container, by volume name.
func volumes(vs []corev1.Volume, mounts []corev1.VolumeMount) map[string]mount {
	out := map[string]mount{}
	for _, vm := range mounts {
		for _, v := range vs {
			if v.Name == vm.Name {
				out[v.Name] = mount{path: vm.MountPath, vol: v}
			}
		}
	}
	return out
}

// mountedAt returns the name of the volume mounted at path, or "".
func mountedAt(mounts []corev1.VolumeMount, path string) string {
	for _, vm := range mounts {
		if vm.MountPath == path {
			return vm.Name
		}
	}
	return ""
}

// checkConfigEnv checks that FLEXKV_CONFIG is the configuration's key of
// the mounted ConfigMap.
func checkConfigEnv(t *testing.T, m *manifests, env map[string]corev1.EnvVar, vols map[string]mount) {
	t.Helper()
	path := env["FLEXKV_CONFIG"].Value
	for _, v := range vols {
		if cm := v.vol.ConfigMap; cm != nil && filepath.Join(v.path, configKey) == path {
			if _, ok := m.configMaps[cm.Name][configKey]; ok && cm.Name == configMapName {
				return
			}
		}
	}
	t.Errorf("FLEXKV_CONFIG %q is not %s of a mounted ConfigMap %s", path, configKey, configMapName)
}

// checkSecretMount checks that the directory dir, from the variable name,
// is a mounted Secret that the kustomization makes of exactly the files
// want, none readable by others.
func checkSecretMount(t *testing.T, m *manifests, name, dir string, vols map[string]mount, want []string) {
	t.Helper()
	for _, v := range vols {
		s := v.vol.Secret
		if s == nil || v.path != dir {
			continue
		}
		got := slices.Sorted(slices.Values(m.secrets[s.SecretName]))
		if slices.Sort(want); !slices.Equal(got, want) {
			t.Errorf("%s: Secret %s holds %q, want %q", name, s.SecretName, got, want)
		}
		if s.DefaultMode == nil || *s.DefaultMode&0o077 != 0 {
			t.Errorf("%s: Secret %s mode %v, want none for group and others (a key others may read is refused)", name, s.SecretName, s.DefaultMode)
		}
		return
	}
	t.Errorf("%s %q: no Secret mounted there", name, dir)
}

// checkProbes checks the startup, readiness and liveness probes: each runs
// flexkv health against the replica's peer port.
func checkProbes(t *testing.T, c corev1.Container, peerPort int32) {
	t.Helper()
	want := []string{"/flexkv", "health", "--addr", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(peerPort)))}
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} { //flexkv:unordered independent checks
		if p == nil || p.Exec == nil || !slices.Equal(p.Exec.Command, want) {
			t.Errorf("%s probe %+v, want the command %q (the gRPC health service on the peer port, DESIGN 15)", name, p, want)
			continue
		}
		if p.TimeoutSeconds < 3 {
			t.Errorf("%s probe: timeout %ds, below flexkv health's own 2s and its start", name, p.TimeoutSeconds)
		}
	}
}

// checkAntiAffinity checks that the pods of group i never share a node.
func checkAntiAffinity(t *testing.T, a *corev1.Affinity, pods []labels.Set, i int) {
	t.Helper()
	if a == nil || a.PodAntiAffinity == nil {
		t.Errorf("no pod anti-affinity")
		return
	}
	for _, term := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
		if term.TopologyKey == corev1.LabelHostname {
			selects(t, "the anti-affinity term", term.LabelSelector, pods, i)
			return
		}
	}
	t.Errorf("no required anti-affinity on %s among the group's pods", corev1.LabelHostname)
}

// checkHeadless checks a group's headless Service: its pods' DNS names
// published before they are ready, every port of the container.
func checkHeadless(t *testing.T, svc *corev1.Service, name string, ports []corev1.ContainerPort, pods []labels.Set, i int) {
	t.Helper()
	if svc == nil {
		t.Errorf("no Service %s (the StatefulSet's serviceName)", name)
		return
	}
	if svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: clusterIP %q, publishNotReadyAddresses %v; want None and true (a replica dials its group while starting)", name, svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses)
	}
	selects(t, "Service "+name, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, pods, i)
	checkServicePorts(t, svc, ports)
	for _, p := range ports {
		if !slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Name == p.Name }) {
			t.Errorf("Service %s: no port %s: every port of a replica is dialled by its name", name, p.Name)
		}
	}
}

// checkServicePorts checks that each port of svc targets a container port
// by its name and number.
func checkServicePorts(t *testing.T, svc *corev1.Service, ports []corev1.ContainerPort) {
	t.Helper()
	for _, sp := range svc.Spec.Ports {
		i := slices.IndexFunc(ports, func(p corev1.ContainerPort) bool { return p.Name == sp.TargetPort.String() })
		if i < 0 || ports[i].ContainerPort != sp.Port || sp.Name != ports[i].Name {
			t.Errorf("Service %s: port %s %d -> %s: no container port of that name and number", svc.Name, sp.Name, sp.Port, sp.TargetPort.String())
		}
	}
}
