package workload_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/cluster"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/jepsen/checker"
	"github.com/flexkv/flexkv/jepsen/history"
	"github.com/flexkv/flexkv/jepsen/workload"
	"github.com/flexkv/flexkv/partition"
)

// TestWorkloadOnCluster runs the workload against an in-process cluster of
// three groups with TLS, and checks the history: it must be valid, and
// transactions must have committed across groups, failed on a changed
// list, and read what others appended.
func TestWorkloadOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cfg := &partition.ClusterConfig{Protocol: "flexcast"}
	names := []string{"eu-west-1", "eu-west-3", "eu-central-1"}
	for i, g := range names {
		var addrs [3]string
		for j := range addrs {
			a, err := testaddr.FreeAddr(testaddr.Client)
			if err != nil {
				t.Fatal(err)
			}
			addrs[j] = a
		}
		cfg.Groups = append(cfg.Groups, partition.GroupConfig{Name: g, Replicas: []partition.ReplicaConfig{
			{ID: fmt.Sprintf("r%d", i+1), Raft: addrs[0], GRPC: addrs[1], Peer: addrs[2]},
		}})
		cfg.Partitions = append(cfg.Partitions, partition.PartitionConfig{
			Name: fmt.Sprintf("w%04d", i+1), Start: fmt.Sprintf("w/%04d/", i+1), End: fmt.Sprintf("w/%04d/", i+2), Group: g,
		})
	}
	dir := t.TempDir()
	l, err := cluster.Start(cluster.Config{Cluster: cfg, Dir: dir, NoSync: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	c, err := client.New(ctx, client.Config{Endpoints: l.Endpoints(), CertsDir: cluster.CertsDir(dir)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var buf bytes.Buffer
	start := time.Now()
	w := history.NewWriter(&buf, func() int64 { return int64(time.Since(start)) })
	run, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	err = workload.Run(run, workload.Config{
		Client: c, Prefixes: []string{"w/0001/", "w/0002/", "w/0003/"}, Workers: 6, Seed: 1, RegisterPercent: 20,
		AppendsPerKey: 8, FinalReads: true,
	}, w)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	h, err := history.Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	res := checker.Check(h, checker.Options{})
	t.Log(res.Summary())
	// Serializable: a cycle through real-time order (a read-only
	// transaction across groups ordered before an update of one group
	// that completed before another it saw was invoked) is what genuine
	// multicast allows; the host runs report it (make jepsen).
	if res.Violations(checker.Serializable) != 0 {
		t.Fatalf("%s\n%v", res.Summary(), res.Anomalies)
	}
	if res.OK < 20 || res.Fail == 0 || res.Registers == 0 || res.Edges == 0 || res.GraphTxns < 10 {
		t.Errorf("too little was checked: %+v", res)
	}
	if open := len(h.Pairs) - res.OK - res.Fail; open != res.Info {
		t.Errorf("counts do not add up: %+v", res)
	}
	final := 0
	for _, p := range h.Pairs {
		if h.Ops[p.Invoke].Process >= 1<<20 && h.Outcome(p) == history.OK {
			final++
		}
		if p.Done < 0 {
			t.Errorf("the invocation of line %d was never completed: the run's end must let operations finish", p.Invoke+1)
		}
	}
	if final == 0 {
		t.Error("no final read")
	}
}
