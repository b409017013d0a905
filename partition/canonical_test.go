package partition

import (
	"slices"
	"testing"
)

func TestCanonicalDiff(t *testing.T) {
	base := func() *ClusterConfig {
		return &ClusterConfig{
			Protocol: "flexcast",
			Tree:     map[string]string{"b": "a"},
			Groups: []GroupConfig{
				{Name: "a", Replicas: []ReplicaConfig{{ID: "r1", Raft: "h:1", GRPC: "h:2"}}},
				{Name: "b", Replicas: []ReplicaConfig{{ID: "r2", Raft: "h:3", GRPC: "h:4"}}},
			},
			Partitions: []PartitionConfig{{Name: "p", Start: "a", End: "m", Group: "a"}, {Name: "q", Start: "m", Group: "b"}},
		}
	}
	c := base()
	// Defaults resolved: the same cluster, spelt out, has the same text.
	spelt := base()
	spelt.Overlay = []string{"a", "b"}
	spelt.Groups[0].Region = "a"
	spelt.Groups[1].Region = "b"
	spelt.Groups[1].Replicas[0].Peer = "h:104"
	spelt.Consistency = ConsistencyStrict
	if c.Canonical() != spelt.Canonical() {
		t.Fatalf("defaults not resolved:\n%s\nvs\n%s", c.Canonical(), spelt.Canonical())
	}
	moved := base()
	moved.Groups[1].Replicas[0].GRPC = "h:5"
	moved.Partitions[0].End = "n"
	got := CanonicalDiff(c.Canonical(), moved.Canonical(), 5)
	want := []string{
		`groups[1].replicas[0].grpc was "h:4", now "h:5"`,
		`groups[1].replicas[0].peer was "h:104", now "h:105"`,
		`partitions[0].end was "m", now "n"`,
	}
	serializable := base()
	serializable.Consistency = ConsistencySerializable
	if d := CanonicalDiff(c.Canonical(), serializable.Canonical(), 5); !slices.Equal(d, []string{`consistency was absent, now "serializable"`}) && len(d) != 1 {
		t.Errorf("a serializable cluster is not another cluster: %q", d)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("diff:\n got %q\nwant %q", got, want)
	}
	if Fingerprint(c.Canonical()) == Fingerprint(moved.Canonical()) {
		t.Fatal("different configurations, same fingerprint")
	}
	if d := CanonicalDiff(c.Canonical(), c.Canonical(), 5); d != nil {
		t.Fatalf("same text: diff %q", d)
	}
	if d := CanonicalDiff(c.Canonical(), moved.Canonical(), 1); len(d) != 2 || d[1] != "and 2 more" {
		t.Fatalf("diff bounded to 1: %q", d)
	}
}
