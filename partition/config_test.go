package partition_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/flexkv/flexkv/partition"
)

// decodeConfig decodes a configuration strictly, as a loader should: an
// unknown field is an error.
func decodeConfig(t *testing.T, text []byte) *partition.ClusterConfig {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(text))
	dec.KnownFields(true)
	var c partition.ClusterConfig
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("decode: %v", err)
	}
	return &c
}

// specExample is the example of the configuration's shape.
const specExample = `
protocol: flexcast
overlay: [eu-west-1, eu-west-3, eu-central-1]
tree: {eu-west-3: eu-west-1, eu-central-1: eu-west-1}
latency: aws-12-regions-latency-ms.csv
groups:
  - name: eu-west-1
    region: eu-west-1
    replicas:
      - {id: r1, raft: 127.0.0.1:7101, grpc: 127.0.0.1:7201}
  - name: eu-central-1
    replicas:
      - {id: r2, raft: 127.0.0.1:7102, grpc: 127.0.0.1:7202}
  - name: eu-west-3
    region: eu-west-3
    replicas:
      - {id: r3, raft: 127.0.0.1:7103, grpc: 127.0.0.1:7203}
partitions:
  - {name: w0001, start: "w/0001/", end: "w/0002/", group: eu-west-1}
  - {name: w0002, start: "w/0002/", end: "w/0003/", group: eu-central-1}
  - {name: w0003, start: "w/0003/", group: eu-west-3}
  - {name: item, start: "item/", end: "item0", replicated: true}
`

func TestConfigFromYAML(t *testing.T) {
	c := decodeConfig(t, []byte(specExample))
	top, pm, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	// GroupIDs follow the overlay, not the order of the group list.
	if got, want := top.Names(), []string{"eu-west-1", "eu-west-3", "eu-central-1"}; !slices.Equal(got, want) {
		t.Errorf("ranks %v, want %v", got, want)
	}
	if got := top.Group(2).Region; got != "eu-central-1" {
		t.Errorf("region of eu-central-1 = %q, want its name (the default)", got)
	}
	if !top.HasTree() || top.Parent(0) != partition.NoGroup || top.Parent(1) != 0 || top.Parent(2) != 0 {
		t.Errorf("tree: parents %d %d %d, want -1 0 0", top.Parent(0), top.Parent(1), top.Parent(2))
	}
	tests := []struct {
		key            string
		wantGroup      partition.GroupID
		wantReplicated bool
	}{
		{"w/0001/x", 0, false},
		{"w/0002/x", 2, false},
		{"w/9999/x", 1, false}, // w0003 has no upper bound
		{"item/1", partition.NoGroup, true},
	}
	for _, tt := range tests {
		g, rep, err := pm.Owner([]byte(tt.key))
		if err != nil || g != tt.wantGroup || rep != tt.wantReplicated {
			t.Errorf("Owner(%q) = %d, %v, %v; want %d, %v", tt.key, g, rep, err, tt.wantGroup, tt.wantReplicated)
		}
	}
	if p, _ := pm.ByName("w0003"); p.End != nil {
		t.Errorf("w0003 end = %q, want nil (unbounded)", p.End)
	}
	if c.LatencyPath("/etc/flexkv") != filepath.Join("/etc/flexkv", "aws-12-regions-latency-ms.csv") {
		t.Errorf("LatencyPath = %q", c.LatencyPath("/etc/flexkv"))
	}
}

func TestConfigUnknownFieldRejected(t *testing.T) {
	dec := yaml.NewDecoder(strings.NewReader("protocol: flexcast\noverlays: [a]\n"))
	dec.KnownFields(true)
	var c partition.ClusterConfig
	if err := dec.Decode(&c); err == nil || !strings.Contains(err.Error(), "overlays") {
		t.Fatalf("decode = %v, want an error naming the unknown field", err)
	}
}

// validConfig returns a fresh valid configuration of three groups, the
// first with three replicas.
func validConfig() *partition.ClusterConfig {
	return &partition.ClusterConfig{
		Protocol: "flexcast",
		Overlay:  []string{"a", "b", "c"},
		Tree:     map[string]string{"b": "a", "c": "a"},
		Groups: []partition.GroupConfig{
			{Name: "a", Replicas: []partition.ReplicaConfig{
				{ID: "a1", Raft: "127.0.0.1:7101", GRPC: "127.0.0.1:7201"},
				{ID: "a2", Raft: "127.0.0.1:7102", GRPC: "127.0.0.1:7202"},
				{ID: "a3", Raft: "127.0.0.1:7103", GRPC: "127.0.0.1:7203"},
			}},
			{Name: "b", Replicas: []partition.ReplicaConfig{{ID: "b1", Raft: "127.0.0.1:7104", GRPC: "127.0.0.1:7204"}}},
			{Name: "c", Region: "eu-west-1", Replicas: []partition.ReplicaConfig{{ID: "c1", Raft: "[::1]:7105", GRPC: "localhost:7205"}}},
		},
		Partitions: []partition.PartitionConfig{
			{Name: "pa", Start: "a/", End: "b/", Group: "a"},
			{Name: "pb", Start: "b/", End: "c/", Group: "b"},
			{Name: "pc", Start: "c/", End: "d/", Group: "c"},
			{Name: "item", Start: "item/", End: "item0", Replicated: true},
		},
	}
}

func TestConfigValid(t *testing.T) {
	c := validConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// Without overlay and tree: ranks in group order, no tree.
	c.Overlay, c.Tree = nil, nil
	top, _, err := c.Build()
	if err != nil {
		t.Fatal(err)
	}
	if got := top.Names(); !slices.Equal(got, []string{"a", "b", "c"}) || top.HasTree() {
		t.Errorf("ranks %v, tree %v; want [a b c] and no tree", got, top.HasTree())
	}
	// Five replicas, the bound, are accepted.
	c.Groups[1].Replicas = []partition.ReplicaConfig{
		{ID: "b1", Raft: "h:1", GRPC: "h:2"}, {ID: "b2", Raft: "h:3", GRPC: "h:4"}, {ID: "b3", Raft: "h:5", GRPC: "h:6"},
		{ID: "b4", Raft: "h:7", GRPC: "h:8"}, {ID: "b5", Raft: "h:9", GRPC: "h:65535", Peer: "h:10"},
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("five replicas: %v", err)
	}
}

// TestConfigProtocolUnchecked: package partition lies below the protocols
// and leaves their names, and whether one needs a tree, to the registry
// (multicast/protocol's Build, tested there).
func TestConfigProtocolUnchecked(t *testing.T) {
	c := validConfig()
	c.Protocol, c.Tree = "paxos", nil
	if err := c.Validate(); err != nil {
		t.Errorf("Validate with protocol %q: %v, want it left to the registry", c.Protocol, err)
	}
}

// invalidConfigCase is one change that makes validConfig invalid, and the part
// of the error that names what is wrong.
type invalidConfigCase struct {
	name   string
	change func(c *partition.ClusterConfig)
	want   string
}

// invalidConfigCases are TestConfigInvalid's changes.
var invalidConfigCases = []invalidConfigCase{
	{"no groups", func(c *partition.ClusterConfig) { c.Groups = nil }, "groups: none"},
	{"unknown consistency", func(c *partition.ClusterConfig) { c.Consistency = "linearizable" },
		`consistency "linearizable": want strict-serializable (the default) or serializable`},
	{"too many groups", func(c *partition.ClusterConfig) {
		c.Groups = make([]partition.GroupConfig, partition.GroupsMax+1)
	}, "groups: 65, more than GroupsMax (64)"},
	{"group without a name", func(c *partition.ClusterConfig) { c.Groups[1].Name = "" },
		`groups[1].name: "" is not a valid name`},
	{"group name in capitals", func(c *partition.ClusterConfig) { c.Groups[1].Name = "EU" },
		`groups[1].name: "EU" is not a valid name`},
	{"group name starting with a dash", func(c *partition.ClusterConfig) { c.Groups[1].Name = "-b" },
		`groups[1].name: "-b" is not a valid name`},
	{"group name too long", func(c *partition.ClusterConfig) { c.Groups[1].Name = strings.Repeat("b", partition.NameMax+1) },
		`groups[1].name: "bbbb`},
	{"duplicate group", func(c *partition.ClusterConfig) { c.Groups[2].Name = "a" },
		`groups[2].name: "a" listed twice (also groups[0])`},
	{"no replicas", func(c *partition.ClusterConfig) { c.Groups[1].Replicas = nil },
		`groups[1].replicas: group "b" has 0 replicas, want an odd number from 1 to 5`},
	{"two replicas", func(c *partition.ClusterConfig) { c.Groups[0].Replicas = c.Groups[0].Replicas[:2] },
		`groups[0].replicas: group "a" has 2 replicas`},
	{"seven replicas", func(c *partition.ClusterConfig) {
		for i := range 4 {
			id := fmt.Sprintf("x%d", i)
			c.Groups[0].Replicas = append(c.Groups[0].Replicas, partition.ReplicaConfig{ID: id, Raft: id + ":1", GRPC: id + ":2"})
		}
	}, `groups[0].replicas: group "a" has 7 replicas`},
	{"replica without an id", func(c *partition.ClusterConfig) { c.Groups[0].Replicas[1].ID = "" },
		`groups[0].replicas[1].id: "" is not a valid name`},
	{"duplicate replica id in a group", func(c *partition.ClusterConfig) { c.Groups[0].Replicas[2].ID = "a1" },
		`groups[0].replicas[2].id: "a1" listed twice (also groups[0].replicas[0]`},
	{"duplicate replica id in the cluster", func(c *partition.ClusterConfig) { c.Groups[2].Replicas[0].ID = "b1" },
		`groups[2].replicas[0].id: "b1" listed twice (also groups[1].replicas[0]; replica ids are unique in the cluster)`},
	{"raft address without port", func(c *partition.ClusterConfig) { c.Groups[1].Replicas[0].Raft = "127.0.0.1" },
		`groups[1].replicas[0].raft: "127.0.0.1" is not host:port`},
	{"grpc address without host", func(c *partition.ClusterConfig) { c.Groups[1].Replicas[0].GRPC = ":7204" },
		`groups[1].replicas[0].grpc: ":7204" has no host`},
	{"port 0", func(c *partition.ClusterConfig) { c.Groups[1].Replicas[0].GRPC = "127.0.0.1:0" },
		`groups[1].replicas[0].grpc: "127.0.0.1:0" has port "0", want 1..65535`},
	{"port out of range", func(c *partition.ClusterConfig) { c.Groups[1].Replicas[0].GRPC = "127.0.0.1:65536" },
		`has port "65536", want 1..65535`},
	{"port by name", func(c *partition.ClusterConfig) { c.Groups[1].Replicas[0].GRPC = "127.0.0.1:http" },
		`has port "http"`},
	{"default peer port out of range", func(c *partition.ClusterConfig) { c.Groups[1].Replicas[0].GRPC = "127.0.0.1:65500" },
		`groups[1].replicas[0].peer (the grpc port + 100): "127.0.0.1:65600" has port "65600", want 1..65535`},
	{"peer address without port", func(c *partition.ClusterConfig) { c.Groups[1].Replicas[0].Peer = "127.0.0.1" },
		`groups[1].replicas[0].peer: "127.0.0.1" is not host:port`},
	{"peer on another replica's raft address", func(c *partition.ClusterConfig) { c.Groups[1].Replicas[0].Peer = "127.0.0.1:7101" },
		`groups[1].replicas[0].peer: address "127.0.0.1:7101" already used by groups[0].replicas[0].raft`},
	{"http address without port", func(c *partition.ClusterConfig) { c.Groups[1].Replicas[0].HTTP = "127.0.0.1" },
		`groups[1].replicas[0].http: "127.0.0.1" is not host:port`},
	{"http on another replica's raft address", func(c *partition.ClusterConfig) { c.Groups[1].Replicas[0].HTTP = "127.0.0.1:7101" },
		`groups[1].replicas[0].http: address "127.0.0.1:7101" already used by groups[0].replicas[0].raft`},
	{"duplicate address across groups", func(c *partition.ClusterConfig) { c.Groups[1].Replicas[0].GRPC = "127.0.0.1:7101" },
		`groups[1].replicas[0].grpc: address "127.0.0.1:7101" already used by groups[0].replicas[0].raft`},
	{"raft and grpc on one address", func(c *partition.ClusterConfig) { c.Groups[0].Replicas[1].GRPC = "127.0.0.1:7102" },
		`groups[0].replicas[1].grpc: address "127.0.0.1:7102" already used by groups[0].replicas[1].raft`},
	{"overlay names an unknown group", func(c *partition.ClusterConfig) { c.Overlay[1] = "x" },
		`overlay[1]: "x" is not a group`},
	{"overlay lists a group twice", func(c *partition.ClusterConfig) { c.Overlay = []string{"a", "b", "a"} },
		`overlay[2]: "a" listed twice (also overlay[0])`},
	{"overlay misses a group", func(c *partition.ClusterConfig) { c.Overlay = []string{"c", "a"} },
		`overlay: lists 2 of the 3 groups, want every group once (missing "b")`},
	{"tree names an unknown child", func(c *partition.ClusterConfig) { c.Tree["x"] = "a" },
		`tree: child "x" is not a group`},
	{"tree names an unknown parent", func(c *partition.ClusterConfig) { c.Tree["c"] = "y" },
		`tree.c: parent "y" is not a group`},
	{"tree: own parent", func(c *partition.ClusterConfig) { c.Tree["c"] = "c" },
		`tree.c: "c" is its own parent`},
	{"tree with two roots", func(c *partition.ClusterConfig) { delete(c.Tree, "c") },
		`tree has two roots, "a" and "c"`},
	{"tree with a cycle", func(c *partition.ClusterConfig) { c.Tree = map[string]string{"a": "b", "b": "c", "c": "a"} },
		"tree has no root"},
	{"no partitions", func(c *partition.ClusterConfig) { c.Partitions = nil }, "partitions: none"},
	{"partition without a name", func(c *partition.ClusterConfig) { c.Partitions[1].Name = "" },
		`partitions[1].name: "" is not a valid name`},
	{"duplicate partition name", func(c *partition.ClusterConfig) { c.Partitions[2].Name = "pa" },
		`partitions[2] "pa": name listed twice (also partitions[0] "pa")`},
	{"partition without a group", func(c *partition.ClusterConfig) { c.Partitions[1].Group = "" },
		`partitions[1].group: missing for partition "pb" (give its owner, or replicated: true)`},
	{"partition of an unknown group", func(c *partition.ClusterConfig) { c.Partitions[1].Group = "z" },
		`partitions[1].group: "z" is not a group`},
	{"replicated partition with a group", func(c *partition.ClusterConfig) { c.Partitions[3].Group = "a" },
		`partitions[3].group: "a" given for replicated partition "item", which every group owns`},
	{"partition without a start", func(c *partition.ClusterConfig) { c.Partitions[1].Start = "" },
		`partitions[1] "pb": start: invalid key "": empty`},
	{"partition with an empty range", func(c *partition.ClusterConfig) { c.Partitions[1].End = "a/" },
		`partitions[1] "pb": empty range: end "a/" is not after start "b/"`},
	{"partitions overlapping", func(c *partition.ClusterConfig) { c.Partitions[0].End = "b/x" },
		`partitions[1] "pb" overlaps partitions[0] "pa"`},
	{"replicated range overlapping an owned one", func(c *partition.ClusterConfig) {
		c.Partitions[3].Start, c.Partitions[3].End = "c/item/", "c/item0/"
	}, `partitions[3] "item" overlaps partitions[2] "pc"`},
}

// TestConfigInvalid checks that Validate and Build refuse each of
// invalidConfigCases with the same error, which names what is wrong.
func TestConfigInvalid(t *testing.T) {
	for _, tt := range invalidConfigCases {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.change(c)
			err := c.Validate()
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.HasPrefix(err.Error(), "partition: ") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got error %q, want one containing %q", err, tt.want)
			}
			top, pm, err2 := c.Build()
			if top != nil || pm != nil || err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("Build = %v, %v, %v; want nil, nil and Validate's error", top, pm, err2)
			}
		})
	}
}

// Every field carries the same name for yaml and for mapstructure (viper),
// so that the file reads the same through both.
func TestConfigTags(t *testing.T) {
	for _, v := range []any{partition.ClusterConfig{}, partition.GroupConfig{}, partition.ReplicaConfig{}, partition.PartitionConfig{}} {
		typ := reflect.TypeOf(v)
		for i := range typ.NumField() {
			f := typ.Field(i)
			y, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			m := f.Tag.Get("mapstructure")
			if y == "" || y != m || y != strings.ToLower(y) {
				t.Errorf("%s.%s: yaml name %q, mapstructure %q; want the same lower-case name", typ.Name(), f.Name, y, m)
			}
		}
	}
}

func TestConfigReplica(t *testing.T) {
	c := validConfig()
	g, r, ok := c.Replica("a2")
	if !ok || g.Name != "a" || r.Raft != "127.0.0.1:7102" {
		t.Errorf("Replica(a2) = %v, %v, %v", g.Name, r, ok)
	}
	if _, _, ok := c.Replica("zz"); ok {
		t.Error("Replica(zz) found a replica")
	}
}

func TestConfigLatency(t *testing.T) {
	c := validConfig()
	if l, err := c.LoadLatency("."); l != nil || err != nil {
		t.Errorf("no latency field: LoadLatency = %v, %v; want nil, nil", l, err)
	}
	dir := t.TempDir()
	csv := "from\\to,a,b,eu-west-1\na,1,2,3\nb,2,1,3\neu-west-1,3,3,1\n"
	if err := os.WriteFile(filepath.Join(dir, "lat.csv"), []byte(csv), 0o600); err != nil {
		t.Fatal(err)
	}
	c.Latency = "lat.csv"
	l, err := c.LoadLatency(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Group c is in region eu-west-1.
	if got := l.RTTMs("a", "eu-west-1"); got != 3 {
		t.Errorf("RTT a -> eu-west-1 = %v, want 3", got)
	}
	// An absolute path ignores the directory.
	c.Latency = filepath.Join(dir, "lat.csv")
	if _, err := c.LoadLatency("/nonexistent"); err != nil {
		t.Errorf("absolute path: %v", err)
	}
	c.Groups[2].Region = "ap-south-1"
	if _, err := c.LoadLatency(dir); err == nil || !strings.Contains(err.Error(), `groups[2]: region "ap-south-1" of group "c" is not in the latency matrix`) {
		t.Errorf("missing region: got %v", err)
	}
	c.Latency = "missing.csv"
	if _, err := c.LoadLatency(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: got %v, want a not-exist error", err)
	}
}

// The shipped configurations parse strictly and build.
func TestShippedConfigs(t *testing.T) {
	for _, name := range []string{"local.yaml", "aws-12.yaml"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("..", "configs")
			text, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			c := decodeConfig(t, text)
			top, pm, err := c.Build()
			if err != nil {
				t.Fatal(err)
			}
			if !top.HasTree() {
				t.Error("no tree")
			}
			if _, err := c.LoadLatency(dir); err != nil {
				t.Error(err)
			}
			// Every group owns at least one warehouse.
			for g := range top.Len() {
				if len(pm.OwnedBy(partition.GroupID(g))) == 0 {
					t.Errorf("group %s owns no partition", top.Name(partition.GroupID(g)))
				}
			}
		})
	}
}

func TestReplicaIDsAndEndpoints(t *testing.T) {
	c := &partition.ClusterConfig{Groups: []partition.GroupConfig{
		{Name: "a", Replicas: []partition.ReplicaConfig{{ID: "r1", GRPC: "h:1"}, {ID: "r2", GRPC: "h:2"}}},
		{Name: "b", Replicas: []partition.ReplicaConfig{{ID: "r3", GRPC: "h:3"}}},
	}}
	if got, want := c.ReplicaIDs(), []string{"r1", "r2", "r3"}; !slices.Equal(got, want) {
		t.Errorf("ReplicaIDs = %v, want %v", got, want)
	}
	if got, want := c.Endpoints(), []string{"h:1", "h:2", "h:3"}; !slices.Equal(got, want) {
		t.Errorf("Endpoints = %v, want %v", got, want)
	}
}

// FuzzCanonicalDiff: CanonicalDiff reads canonical text back from a
// replica's identity file, which may be damaged: any two texts compare
// without a panic, a text equals itself, and the bound on the differences
// named holds.
func FuzzCanonicalDiff(f *testing.F) {
	c := validConfig()
	f.Add(c.Canonical(), "")
	c2 := validConfig()
	c2.Groups[1].Replicas[0].GRPC = "127.0.0.1:9999"
	f.Add(c.Canonical(), c2.Canonical())
	f.Add("a = \"1\"\nb = \"2\"\n", "a = \"1\"\n b=\n")
	f.Fuzz(func(t *testing.T, was, now string) {
		if d := partition.CanonicalDiff(was, was, 3); len(d) != 0 {
			t.Fatalf("a text differs from itself: %q", d)
		}
		if d := partition.CanonicalDiff(was, now, 3); len(d) > 4 {
			t.Fatalf("%d differences named, at most 3 and a summary: %q", len(d), d)
		}
	})
}
