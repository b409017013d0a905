package kubernetes

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	yaml3 "go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/flexkv/flexkv/partition"
)

// kustomization is the part of kustomize's Kustomization that
// kustomization.yaml uses; decoding refuses any other field.
type kustomization struct {
	APIVersion         string      `yaml:"apiVersion"`
	Kind               string      `yaml:"kind"`
	Resources          []string    `yaml:"resources"`
	ConfigMapGenerator []generator `yaml:"configMapGenerator"`
	SecretGenerator    []generator `yaml:"secretGenerator"`
	GeneratorOptions   struct {
		DisableNameSuffixHash bool `yaml:"disableNameSuffixHash"`
	} `yaml:"generatorOptions"`
}

type generator struct {
	Name     string   `yaml:"name"`
	Files    []string `yaml:"files"`
	Literals []string `yaml:"literals"`
}

// jobFile is the gTPC-C Job, applied apart from the kustomization.
const jobFile = "gtpcc-job.yaml"

// manifests are the objects an operator applies: those of the
// kustomization's resources and generators, and the Job.
type manifests struct {
	services     map[string]*corev1.Service
	statefulsets []*appsv1.StatefulSet // in file order
	pdbs         []*policyv1.PodDisruptionBudget
	jobs         map[string]*batchv1.Job
	// configMaps holds each generated ConfigMap's data; secrets each
	// generated Secret's keys (file names: the files are made by flexkv
	// cert, not kept here).
	configMaps map[string]map[string]string
	secrets    map[string][]string
}

// docSeparator splits a YAML stream into documents.
var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decodeObject decodes one manifest strictly into the k8s.io/api type of
// its kind, as the API server's strict field validation does: the YAML
// becomes JSON with sigs.k8s.io/yaml (a repeated key is an error), decoded
// with sigs.k8s.io/json (an unknown field, or one whose case differs, is an
// error). sigs.k8s.io/yaml's own UnmarshalStrict decodes with
// encoding/json, whose field names match in any case: it takes clusterIp
// for clusterIP.
func decodeObject(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Service":
		obj = &corev1.Service{}
	case "apps/v1 StatefulSet":
		obj = &appsv1.StatefulSet{}
	case "policy/v1 PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	case "batch/v1 Job":
		obj = &batchv1.Job{}
	default:
		return nil, fmt.Errorf("kind %q of apiVersion %q: not one these manifests use", tm.Kind, tm.APIVersion)
	}
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	strict, err := kjson.UnmarshalStrict(js, obj)
	if err != nil {
		return nil, err
	}
	if len(strict) > 0 {
		return nil, errors.Join(strict...)
	}
	return obj, nil
}

// loadManifests reads kustomization.yaml, every resource it names, its
// generators and the Job.
func loadManifests(t *testing.T) *manifests {
	t.Helper()
	var k kustomization
	decodeStrict3(t, "kustomization.yaml", &k)
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" || !k.GeneratorOptions.DisableNameSuffixHash {
		t.Fatalf("kustomization.yaml: want a kustomize.config.k8s.io/v1beta1 Kustomization with stable generated names (disableNameSuffixHash), the names the manifests refer to")
	}
	m := &manifests{services: map[string]*corev1.Service{}, jobs: map[string]*batchv1.Job{}, configMaps: map[string]map[string]string{}, secrets: map[string][]string{}}
	for _, file := range append(k.Resources, jobFile) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range docSeparator.Split(string(b), -1) {
			if isEmptyYAML(doc) {
				continue
			}
			obj, err := decodeObject([]byte(doc))
			if err != nil {
				t.Fatalf("%s, document %d: %v", file, i, err)
			}
			m.add(t, file, obj)
		}
	}
	for _, g := range k.ConfigMapGenerator {
		data := map[string]string{}
		for _, f := range g.Files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatalf("configMapGenerator %s: %v", g.Name, err)
			}
			data[filepath.Base(f)] = string(b)
		}
		for _, l := range g.Literals {
			key, value, ok := strings.Cut(l, "=")
			if !ok {
				t.Fatalf("configMapGenerator %s: literal %q is not KEY=VALUE", g.Name, l)
			}
			data[key] = value
		}
		m.configMaps[g.Name] = data
	}
	for _, g := range k.SecretGenerator {
		for _, f := range g.Files {
			m.secrets[g.Name] = append(m.secrets[g.Name], filepath.Base(f))
		}
	}
	return m
}

// add files obj, decoded from file, refusing a name used twice.
func (m *manifests) add(t *testing.T, file string, obj any) {
	t.Helper()
	switch o := obj.(type) {
	case *corev1.Service:
		if m.services[o.Name] != nil {
			t.Fatalf("%s: Service %s twice", file, o.Name)
		}
		m.services[o.Name] = o
	case *appsv1.StatefulSet:
		m.statefulsets = append(m.statefulsets, o)
	case *policyv1.PodDisruptionBudget:
		m.pdbs = append(m.pdbs, o)
	case *batchv1.Job:
		m.jobs[o.Name] = o
	}
}

// isEmptyYAML reports whether doc holds only comments and blank lines.
func isEmptyYAML(doc string) bool {
	for _, line := range strings.Split(doc, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

// decodeStrict3 decodes the YAML file into v, refusing unknown fields.
func decodeStrict3(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeYAML3(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func decodeYAML3(b []byte, v any) error {
	d := yaml3.NewDecoder(bytes.NewReader(b))
	d.KnownFields(true)
	return d.Decode(v)
}

// clusterConfig decodes and validates a cluster configuration.
func clusterConfig(b []byte) (*partition.ClusterConfig, error) {
	var cfg partition.ClusterConfig
	if err := decodeYAML3(b, &cfg); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &cfg, nil
}
