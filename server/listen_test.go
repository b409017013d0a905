package server

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/replication"
)

// A replica whose configured host resolves nowhere yet (a Kubernetes pod's
// name before its DNS record exists) starts with ListenHost, listening on
// each configured port of that host, and fails to start without it.
func TestListenHost(t *testing.T) {
	const host = "replica-not-resolved.invalid"
	port := func() string {
		_, p, err := net.SplitHostPort(freeAddr(t))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	raftPort, grpcPort := port(), port()
	cc := &partition.ClusterConfig{
		Protocol: "skeen",
		Groups: []partition.GroupConfig{{Name: "g1", Region: "g1", Replicas: []partition.ReplicaConfig{
			{ID: "r1", Raft: net.JoinHostPort(host, raftPort), GRPC: net.JoinHostPort(host, grpcPort)},
		}}},
		Partitions: []partition.PartitionConfig{{Name: "all", Start: "a", End: "z", Group: "g1"}},
	}
	if err := cc.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Cluster: cc, NodeID: "r1", NoSync: true, Replication: replication.Config{ElectionTimeout: 100 * time.Millisecond}}
	cfg.Dir = t.TempDir()
	if srv, err := Open(cfg); err == nil {
		srv.Close()
		t.Fatalf("Open listening on %s succeeded, want the host unresolved", host)
	}
	for _, bad := range []string{"127.0.0.1:80", "[::1]", "a b"} {
		cfg.ListenHost, cfg.Dir = bad, t.TempDir()
		if srv, err := Open(cfg); err == nil || !strings.Contains(err.Error(), "listen host") {
			if err == nil {
				srv.Close()
			}
			t.Errorf("Open with listen host %q: %v, want it refused", bad, err)
		}
	}
	cfg.ListenHost, cfg.Dir = "127.0.0.1", t.TempDir()
	srv, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	conn, err := grpc.NewClient(net.JoinHostPort("127.0.0.1", grpcPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health on 127.0.0.1:%s = %v, %v; want SERVING", grpcPort, resp, err)
	}
	for !srv.IsLeader() {
		if ctx.Err() != nil {
			t.Fatal("the replica, listening for raft on 127.0.0.1, elected no leader")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
