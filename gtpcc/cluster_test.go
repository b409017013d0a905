package gtpcc

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/cluster"
	"github.com/flexkv/flexkv/gtpcc/procs"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// testGroups are the groups of the test cluster, lowest rank first, as in
// configs/local.yaml.
var testGroups = []string{"eu-west-1", "eu-west-3", "eu-central-1"}

// testReplicas is the number of replicas of each test group: 3, so that
// the load procedure's rows are written by replicas that must agree.
const testReplicas = 3

// testWarehouses are the warehouses of the test cluster: two per group.
var testWarehouses = []int{1, 2, 3, 4, 5, 6}

// testRegistry returns the procedures every replica of a test cluster
// registers: procs.Register's, the load procedure among them.
func testRegistry(t testing.TB) *txn.Registry {
	t.Helper()
	r := txn.NewRegistry()
	if err := procs.Register(r); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Lookup(procs.ProcLoad); !ok {
		t.Fatalf("Register does not register %s", procs.ProcLoad)
	}
	return r
}

// testClusterConfig returns the layout of configs/local.yaml with
// testReplicas replicas per group, on free ports: partitions
// w/0001/..w/0006/, two per group, and item/ replicated.
func testClusterConfig(t testing.TB, protocol string) *partition.ClusterConfig {
	t.Helper()
	cfg := &partition.ClusterConfig{
		Protocol: protocol,
		Tree:     map[string]string{"eu-west-3": "eu-west-1", "eu-central-1": "eu-west-1"},
	}
	n := 0
	for _, g := range testGroups {
		gc := partition.GroupConfig{Name: g, Region: g}
		for range testReplicas {
			n++
			gc.Replicas = append(gc.Replicas, partition.ReplicaConfig{
				ID: fmt.Sprintf("r%d", n), Raft: testaddr.Free(t, testaddr.Gtpcc), GRPC: testaddr.Free(t, testaddr.Gtpcc), Peer: testaddr.Free(t, testaddr.Gtpcc),
			})
		}
		cfg.Groups = append(cfg.Groups, gc)
	}
	for _, w := range testWarehouses {
		cfg.Partitions = append(cfg.Partitions, partition.PartitionConfig{
			Name: fmt.Sprintf("w%04d", w), Start: string(procs.WarehousePrefix(w)), End: string(procs.WarehouseEnd(w)),
			Group: testGroups[(w-1)/2],
		})
	}
	cfg.Partitions = append(cfg.Partitions, partition.PartitionConfig{Name: "item", Start: "item/", End: "item0", Replicated: true})
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startCluster starts the test cluster (3 groups x testReplicas replicas,
// under protocol, with testRegistry's procedures) in a temporary directory,
// waits for every group's leader, and returns a client of it and a
// function that closes both. The test's cleanup calls that function too;
// calling it twice is harmless.
func startCluster(t testing.TB, protocol string) (*client.Client, *cluster.Local) {
	t.Helper()
	l, err := cluster.Start(cluster.Config{
		Cluster:    testClusterConfig(t, protocol),
		Dir:        t.TempDir(),
		Procedures: testRegistry(t),
		NoSync:     true,
		Logger:     slog.New(slog.NewTextHandler(clusterLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	var c *client.Client
	t.Cleanup(func() {
		if c != nil {
			if err := c.Close(); err != nil {
				t.Errorf("close client: %v", err)
			}
		}
		if err := l.Close(); err != nil {
			t.Errorf("close cluster: %v", err)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for _, g := range testGroups {
		for l.Leader(g) == "" {
			if time.Now().After(deadline) {
				t.Fatalf("group %s has no leader:\n\t%s", g, strings.Join(l.Describe(), "\n\t"))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err = client.New(ctx, client.Config{Endpoints: l.Endpoints(), TLS: l.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	return c, l
}

// clusterLogWriter writes a logger's lines to the test's log, shown when the
// test fails (or with -v).
type clusterLogWriter struct{ t testing.TB }

func (w clusterLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
