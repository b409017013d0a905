package skeen

import (
	"testing"

	"github.com/flexkv/flexkv/partition"
)

func TestEntry(t *testing.T) {
	lat, err := partition.ReadLatencyFile("../../configs/aws-12-regions-latency-ms.csv")
	if err != nil {
		t.Fatal(err)
	}
	var groups []partition.Group
	for _, r := range lat.Regions() {
		groups = append(groups, partition.Group{Name: r})
	}
	aws, err := partition.NewTopology(partition.Spec{Groups: groups})
	if err != nil {
		t.Fatal(err)
	}
	g := func(name string) partition.GroupID {
		id, ok := aws.Lookup(name)
		if !ok {
			t.Fatalf("no region %q", name)
		}
		return id
	}
	set := func(names ...string) partition.GroupSet {
		var s partition.GroupSet
		for _, n := range names {
			s = s.Add(g(n))
		}
		return s
	}

	// Three groups where B and C are as far from A, and B->A differs from
	// A->B: the matrix is read row = from.
	tie, err := partition.NewLatency([]string{"a", "b", "c"}, [][]float64{
		{1, 50, 50},
		{10, 1, 20},
		{50, 20, 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	abc := testTopology(t, 3)
	abcRegions, err := partition.NewTopology(partition.Spec{Groups: []partition.Group{
		{Name: "A", Region: "a"}, {Name: "B", Region: "b"}, {Name: "C", Region: "c"},
	}})
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name   string
		lat    *partition.Latency
		top    *partition.Topology
		client partition.GroupID
		dst    partition.GroupSet
		want   partition.GroupID
	}{
		{"client's group is a destination", lat, aws, g("ap-south-1"),
			set("us-west-1", "ap-south-1", "eu-west-1"), g("ap-south-1")},
		{"nearest destination", lat, aws, g("us-east-1"),
			set("sa-east-1", "eu-west-1", "ap-south-1"), g("eu-west-1")}, // 69.06 < 114.28 < 191.19
		{"nearest destination above the lowest rank", lat, aws, g("eu-north-1"),
			set("us-west-1", "eu-central-1"), g("eu-central-1")},
		{"tie goes to the lower rank", tie, abcRegions, 0, partition.SetOf(1, 2), 1},
		{"row is the client's", tie, abcRegions, 1, partition.SetOf(0, 2), 0}, // b->a 10, a->b 50
		{"no matrix: lowest rank", nil, abc, 2, partition.SetOf(1, 2), 1},
		{"client outside the topology", lat, aws, partition.NoGroup, set("eu-west-3", "eu-west-1"), g("eu-west-1")},
		{"no destination", lat, aws, 0, 0, partition.NoGroup},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Entry(tt.lat, tt.top, tt.client, tt.dst); got != tt.want {
				t.Errorf("Entry(client %d, dst %s) = %d, want %d", tt.client, tt.dst, got, tt.want)
			}
		})
	}
}
