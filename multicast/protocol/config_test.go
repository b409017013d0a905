package protocol_test

import (
	"strings"
	"testing"

	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

// validConfig returns a valid configuration of three groups with a tree.
func validConfig() *partition.ClusterConfig {
	return &partition.ClusterConfig{
		Protocol: "flexcast",
		Tree:     map[string]string{"b": "a", "c": "a"},
		Groups: []partition.GroupConfig{
			{Name: "a", Replicas: []partition.ReplicaConfig{{ID: "a1", Raft: "127.0.0.1:7101", GRPC: "127.0.0.1:7201"}}},
			{Name: "b", Replicas: []partition.ReplicaConfig{{ID: "b1", Raft: "127.0.0.1:7104", GRPC: "127.0.0.1:7204"}}},
			{Name: "c", Replicas: []partition.ReplicaConfig{{ID: "c1", Raft: "127.0.0.1:7105", GRPC: "127.0.0.1:7205"}}},
		},
		Partitions: []partition.PartitionConfig{
			{Name: "pa", Start: "a/", End: "b/", Group: "a"},
			{Name: "pb", Start: "b/", End: "c/", Group: "b"},
			{Name: "pc", Start: "c/", End: "d/", Group: "c"},
		},
	}
}

// TestBuild: every protocol of the registry is a valid configuration's
// protocol, and Build returns it with partition's topology.
func TestBuild(t *testing.T) {
	for _, name := range protocol.Names() {
		c := validConfig()
		c.Protocol = string(name)
		p, top, pm, err := protocol.Build(c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.Name() != name || top.Len() != 3 || pm.Len() != 3 {
			t.Errorf("%s: Build = %s, %d groups, %d partitions; want %s, 3, 3", name, p, top.Len(), pm.Len(), name)
		}
		if err := protocol.Validate(c); err != nil {
			t.Errorf("%s: Validate: %v", name, err)
		}
	}
	// Without a tree, the protocols that do not route along one build.
	for _, p := range protocol.All() {
		c := validConfig()
		c.Protocol, c.Tree = p.String(), nil
		if err := protocol.Validate(c); (err == nil) == p.NeedsTree() {
			t.Errorf("%s without a tree: %v (NeedsTree %v)", p, err, p.NeedsTree())
		}
	}
}

func TestBuildInvalid(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *partition.ClusterConfig)
		want   string
	}{
		{"no protocol", func(c *partition.ClusterConfig) { c.Protocol = "" },
			`protocol: "" is not one of flexcast, skeen, tree`},
		{"unknown protocol", func(c *partition.ClusterConfig) { c.Protocol = "paxos" },
			`protocol: "paxos" is not one of flexcast, skeen, tree`},
		{"protocol in capitals", func(c *partition.ClusterConfig) { c.Protocol = "FlexCast" }, `protocol: "FlexCast"`},
		{"protocol tree without a tree", func(c *partition.ClusterConfig) { c.Protocol, c.Tree = "tree", nil },
			"tree: missing, and protocol tree needs one"},
		// The protocol is checked first, as the first field.
		{"unknown protocol and no groups", func(c *partition.ClusterConfig) { c.Protocol, c.Groups = "paxos", nil },
			`protocol: "paxos"`},
		// partition's own checks still apply.
		{"no groups", func(c *partition.ClusterConfig) { c.Groups = nil }, "groups: none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.change(c)
			err := protocol.Validate(c)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.HasPrefix(err.Error(), "partition: ") || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got error %q, want one containing %q", err, tt.want)
			}
			p, top, pm, err2 := protocol.Build(c)
			if p != nil || top != nil || pm != nil || err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("Build = %v, %v, %v, %v; want nils and Validate's error", p, top, pm, err2)
			}
		})
	}
}
