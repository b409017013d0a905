package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/kv/kvpb"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/replication"
)

// openSingle starts a one-replica, one-group cluster owning [a, z) with
// cfg's bounds, and returns a client API connection to it.
func openSingle(t *testing.T, cfg Config) kvpb.KVClient {
	t.Helper()
	cc := &partition.ClusterConfig{
		Protocol: "skeen",
		Groups: []partition.GroupConfig{{Name: "g1", Region: "g1", Replicas: []partition.ReplicaConfig{
			{ID: "r1", Raft: freeAddr(t), GRPC: freeAddr(t), Peer: freeAddr(t)},
		}}},
		Partitions: []partition.PartitionConfig{{Name: "all", Start: "a", End: "z", Group: "g1"}},
	}
	if err := cc.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.Cluster, cfg.NodeID, cfg.Dir, cfg.NoSync = cc, "r1", t.TempDir(), true
	cfg.Replication = replication.Config{ElectionTimeout: 100 * time.Millisecond}
	srv, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for !srv.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return kvpb.NewKVClient(conn)
}

func TestOpenRejectsBounds(t *testing.T) {
	for _, cfg := range []Config{{WaitMax: -time.Second}, {ScanBytesMax: -1}, {ScanBytesMax: ScanBytesMaxMax + 1}} {
		if err := checkBounds(cfg); err == nil {
			t.Errorf("checkBounds(wait %s, scan bytes %d) = nil, want an error", cfg.WaitMax, cfg.ScanBytesMax)
		}
	}
	if err := checkBounds(Config{}); err != nil {
		t.Errorf("checkBounds(defaults) = %v", err)
	}
}

// An Await for a result that never comes ends at the server's bound, with
// a message that says so, however long the caller would wait.
func TestAwaitWaitBound(t *testing.T) {
	const bound = 500 * time.Millisecond
	kv := openSingle(t, Config{WaitMax: bound})
	for _, ctxd := range []time.Duration{time.Minute, 0} { // a long deadline, and none
		ctx := context.Background()
		if ctxd > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, ctxd)
			defer cancel()
		}
		start := time.Now()
		_, err := kv.Await(ctx, &kvpb.AwaitRequest{Id: "c77.1"})
		took := time.Since(start)
		if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "bound on a wait") || !strings.Contains(err.Error(), "c77.1") {
			t.Errorf("caller deadline %s: Await = %v, want DeadlineExceeded naming the id and the server's bound", ctxd, err)
		}
		if took < bound || took > bound+5*time.Second {
			t.Errorf("caller deadline %s: Await returned after %s, want about %s", ctxd, took, bound)
		}
	}
}
