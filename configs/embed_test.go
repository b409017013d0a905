package configs

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

func TestAWS12Latency(t *testing.T) {
	l, err := AWS12Latency()
	if err != nil {
		t.Fatal(err)
	}
	regions := l.Regions()
	if len(regions) != 12 {
		t.Fatalf("got %d regions, want 12", len(regions))
	}
	if regions[0] != "us-west-1" || regions[11] != "ap-southeast-2" {
		t.Fatalf("regions = %v, want us-west-1 first and ap-southeast-2 last", regions)
	}
	if got, want := l.RTTMs("us-west-1", "ca-central-1"), 79.22; got != want {
		t.Fatalf("RTT us-west-1 -> ca-central-1 = %v, want %v", got, want)
	}
	for _, name := range partition.PaperOverlayNames {
		o, err := partition.PaperOverlay(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range o {
			if !l.Has(r) {
				t.Errorf("overlay %s region %q is not in the matrix", name, r)
			}
		}
	}
}

// decode decodes a configuration strictly: an unknown field is an error.
func decode(t *testing.T, text []byte) *partition.ClusterConfig {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(text))
	dec.KnownFields(true)
	var c partition.ClusterConfig
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if _, err := protocol.Lookup(multicast.Protocol(c.Protocol)); err != nil {
		t.Errorf("protocol: %v", err)
	}
	return &c
}

// owners returns each partition as "name start end owner", in key order.
func owners(top *partition.Topology, pm *partition.PartitionMap) []string {
	var out []string
	for _, p := range pm.Partitions() {
		owner := "replicated"
		if !p.Replicated {
			owner = top.Name(p.Group)
		}
		out = append(out, fmt.Sprintf("%s %s %s %s", p.Name, p.Start, p.End, owner))
	}
	return out
}

func TestLocalYAML(t *testing.T) {
	c := decode(t, LocalYAML())
	_, top, pm, err := protocol.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	if c.Protocol != "flexcast" {
		t.Errorf("protocol %q, want flexcast", c.Protocol)
	}
	wantRanks := []string{"eu-west-1", "eu-west-3", "eu-central-1"}
	if got := top.Names(); !slices.Equal(got, wantRanks) {
		t.Errorf("ranks %v, want %v", got, wantRanks)
	}
	for g := range top.Len() {
		id := partition.GroupID(g)
		if got := top.Group(id).Region; got != top.Name(id) {
			t.Errorf("group %s in region %s, want its own name", top.Name(id), got)
		}
		if got, want := top.Parent(id), map[int]partition.GroupID{0: partition.NoGroup, 1: 0, 2: 0}[g]; got != want {
			t.Errorf("parent of %s = %d, want %d", top.Name(id), got, want)
		}
	}
	// Three replicas each, replica rN on raft 7100+N, gRPC 7200+N and
	// HTTP 7400+N.
	n := 0
	for _, g := range c.Groups {
		if len(g.Replicas) != 3 {
			t.Errorf("group %s has %d replicas, want 3", g.Name, len(g.Replicas))
		}
		for _, r := range g.Replicas {
			n++
			want := partition.ReplicaConfig{
				ID:   fmt.Sprintf("r%d", n),
				Raft: fmt.Sprintf("127.0.0.1:%d", 7100+n),
				GRPC: fmt.Sprintf("127.0.0.1:%d", 7200+n),
				HTTP: fmt.Sprintf("127.0.0.1:%d", 7400+n),
			}
			if r != want {
				t.Errorf("group %s replica %+v, want %+v", g.Name, r, want)
			}
		}
	}
	want := []string{
		"item item/ item0 replicated",
		"w0001 w/0001/ w/0002/ eu-west-1",
		"w0002 w/0002/ w/0003/ eu-west-1",
		"w0003 w/0003/ w/0004/ eu-west-3",
		"w0004 w/0004/ w/0005/ eu-west-3",
		"w0005 w/0005/ w/0006/ eu-central-1",
		"w0006 w/0006/ w/0007/ eu-central-1",
	}
	if got := owners(top, pm); !slices.Equal(got, want) {
		t.Errorf("partitions:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if l, err := c.LoadLatency("."); l != nil || err != nil {
		t.Errorf("LoadLatency = %v, %v; want no matrix (latency is not set)", l, err)
	}
}

func TestAWS12YAML(t *testing.T) {
	c := decode(t, AWS12YAML())
	_, top, pm, err := protocol.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	o1, err := partition.PaperOverlay("O1")
	if err != nil {
		t.Fatal(err)
	}
	if got := top.Names(); !slices.Equal(got, o1) {
		t.Errorf("ranks %v, want overlay O1 %v", got, o1)
	}
	t1, err := partition.PaperTree("T1")
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(c.Tree, t1) {
		t.Errorf("tree %v, want T1 %v", c.Tree, t1)
	}
	// The matrix the file names is the embedded one, and lists the groups in
	// the file's order, which is also the warehouses' order.
	l, err := c.LoadLatency(".")
	if err != nil {
		t.Fatal(err)
	}
	embedded, err := AWS12Latency()
	if err != nil {
		t.Fatal(err)
	}
	regions := l.Regions()
	if !slices.Equal(regions, embedded.Regions()) {
		t.Fatalf("latency file regions %v, want %v", regions, embedded.Regions())
	}
	want := []string{"item item/ item0 replicated"}
	for i, g := range c.Groups {
		if g.Name != regions[i] || g.Region != regions[i] {
			t.Errorf("groups[%d] = %s in %s, want %s", i, g.Name, g.Region, regions[i])
		}
		if len(g.Replicas) != 1 {
			t.Errorf("group %s has %d replicas, want 1", g.Name, len(g.Replicas))
		}
		want = append(want, fmt.Sprintf("w%04d w/%04d/ w/%04d/ %s", i+1, i+1, i+2, regions[i]))
	}
	if got := owners(top, pm); !slices.Equal(got, want) {
		t.Errorf("partitions:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The embedded texts are copies: changing one changes no later call's.
func TestYAMLCopies(t *testing.T) {
	for name, get := range map[string]func() []byte{"local": LocalYAML, "aws-12": AWS12YAML} {
		b := get()
		b[0] = '!'
		if get()[0] == '!' {
			t.Errorf("%s: a change to the returned text reached the next call", name)
		}
	}
}

// TestDockerYAML: the compose cluster's configuration has the local
// cluster's groups, partitions and protocol, on container names.
func TestDockerYAML(t *testing.T) {
	b, err := os.ReadFile("docker.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d, l := decode(t, b), decode(t, LocalYAML())
	if err := protocol.Validate(d); err != nil {
		t.Fatal(err)
	}
	if d.Protocol != l.Protocol || !slices.Equal(d.Overlay, l.Overlay) || !reflect.DeepEqual(d.Partitions, l.Partitions) {
		t.Errorf("docker.yaml differs from local.yaml in protocol, overlay or partitions")
	}
	for gi, g := range d.Groups {
		for ri, r := range g.Replicas {
			if want := l.Groups[gi].Replicas[ri].ID; r.ID != want || r.GRPC != want+":7200" || r.Raft != want+":7100" {
				t.Errorf("replica %+v, want id %s on %s:7100 and %s:7200", r, want, want, want)
			}
		}
	}
}
