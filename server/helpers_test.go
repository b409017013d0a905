package server

import (
	"fmt"
	"testing"

	"go.uber.org/goleak"

	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/partition"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// raft drops the futures of entries still queued at shutdown; the
		// goroutine waiting on one ends with the process (replication.await).
		goleak.IgnoreAnyFunction("github.com/flexkv/flexkv/replication.(*Replica).await.func1"),
	)
}

// freeAddr returns a loopback address for a replica (testaddr.Server).
func freeAddr(t testing.TB) string { return testaddr.Free(t, testaddr.Server) }

// testCluster returns the layout of configs/local.yaml (3 groups x 3
// replicas, six partitions w/0001/..w/0006/, item/ replicated) on free
// ports, with protocol proto.
func testCluster(t testing.TB, proto string) *partition.ClusterConfig {
	t.Helper()
	cfg := &partition.ClusterConfig{
		Protocol: proto,
		Tree:     map[string]string{"eu-west-3": "eu-west-1", "eu-central-1": "eu-west-1"},
	}
	n := 0
	for _, g := range []string{"eu-west-1", "eu-west-3", "eu-central-1"} {
		gc := partition.GroupConfig{Name: g, Region: g}
		for range 3 {
			n++
			gc.Replicas = append(gc.Replicas, partition.ReplicaConfig{ID: fmt.Sprintf("r%d", n), Raft: freeAddr(t), GRPC: freeAddr(t), Peer: freeAddr(t)})
		}
		cfg.Groups = append(cfg.Groups, gc)
	}
	for w := 1; w <= 6; w++ {
		cfg.Partitions = append(cfg.Partitions, partition.PartitionConfig{
			Name: fmt.Sprintf("w%04d", w), Start: fmt.Sprintf("w/%04d/", w), End: fmt.Sprintf("w/%04d/", w+1),
			Group: cfg.Groups[(w-1)/2].Name,
		})
	}
	cfg.Partitions = append(cfg.Partitions, partition.PartitionConfig{Name: "item", Start: "item/", End: "item0", Replicated: true})
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}
