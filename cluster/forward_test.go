package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// forwardGroups is a cluster of two groups, g1 (three replicas, r1-r3;
// partition w/0001/) and g2 (one, r4; partition w/0002/), flexcast with g1
// ranked first.
func forwardGroups(t *testing.T) *partition.ClusterConfig {
	t.Helper()
	cfg := &partition.ClusterConfig{Protocol: "flexcast"}
	free := func() string { return testaddr.Free(t, testaddr.Cluster) }
	n := 0
	for i, name := range []string{"g1", "g2"} {
		g := partition.GroupConfig{Name: name, Region: name}
		for range 3 - 2*i {
			n++
			g.Replicas = append(g.Replicas, partition.ReplicaConfig{ID: fmt.Sprintf("r%d", n), Raft: free(), GRPC: free(), Peer: free()})
		}
		cfg.Groups = append(cfg.Groups, g)
		cfg.Partitions = append(cfg.Partitions, partition.PartitionConfig{
			Name: name, Start: fmt.Sprintf("w/%04d/", i+1), End: fmt.Sprintf("w/%04d/", i+2), Group: name,
		})
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// rawKV returns a raw client of addr with l's root user, that does not
// route itself: as grpcurl, or a program in another language, calls.
func rawKV(t *testing.T, l *Local, addr string, opts ...grpc.DialOption) apipb.KVClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, append([]grpc.DialOption{clientCreds(l)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return apipb.NewKVClient(cc)
}

// TestForwarding: any replica answers any request (DESIGN 7), with TLS on.
// A put sent to the replica of another group, a two-group transaction sent
// to a follower of its entry group, an Await and an OpenSession naming
// another group: each is forwarded once to the right leader, and the writes
// are readable at every replica. The Go client sending everything to one
// endpoint works the same way; one that routes itself is never forwarded.
func TestForwarding(t *testing.T) {
	l := startLocal(t, forwardGroups(t), t.TempDir())
	ctx := ctxTimeout(t, 60*time.Second)
	addr := func(id string) string { _, r, _ := l.cfg.Cluster.Replica(id); return r.GRPC }
	server := func(id string) interface{ Forwarded() int64 } {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.nodes[id].srv
	}

	// A put of g1's key at g2's only replica.
	r4 := rawKV(t, l, addr("r4"))
	if _, err := r4.Put(ctx, &apipb.PutRequest{Key: []byte("w/0001/a"), Value: []byte("forwarded")}); err != nil {
		t.Fatalf("put of g1's key at g2: %v", err)
	}
	if n := server("r4").Forwarded(); n != 1 {
		t.Errorf("r4 forwarded %d requests, want 1", n)
	}
	// Read at every replica, leader or not, of either group.
	for _, id := range l.Nodes() {
		r, err := rawKV(t, l, addr(id)).Get(ctx, &apipb.GetRequest{Key: []byte("w/0001/a")})
		if err != nil || !r.GetFound() || string(r.GetValue()) != "forwarded" {
			t.Errorf("get w/0001/a at %s: %v, %v; want \"forwarded\"", id, r, err)
		}
	}

	// A two-group transaction at a follower of its entry group, g1, and
	// g2's piece awaited at that follower.
	f := rawKV(t, l, addr(followerOf(t, l, "g1")))
	resp, err := f.Txn(ctx, &apipb.TxnRequest{Body: &apipb.TxnRequest_Txn{Txn: &apipb.Txn{Then: []*apipb.Op{
		{Kind: apipb.OpKind_OP_KIND_PUT, Key: []byte("w/0001/t"), Value: []byte("1")},
		{Kind: apipb.OpKind_OP_KIND_PUT, Key: []byte("w/0002/t"), Value: []byte("2")},
	}}}})
	if err != nil || !resp.GetExecuted() || resp.GetPiece().GetGroup() != "g1" {
		t.Fatalf("two-group txn at a follower of g1: %v, %v; want g1's piece", resp, err)
	}
	p := resp.GetPiece()
	aw, err := f.Await(ctx, &apipb.AwaitRequest{ClientId: p.GetClientId(), Seq: p.GetSeq(), Group: "g2"})
	if err != nil || aw.GetPiece().GetGroup() != "g2" || aw.GetPiece().GetAborted() != "" {
		t.Fatalf("await g2's piece at a follower of g1: %v, %v", aw, err)
	}
	if r, err := f.Get(ctx, &apipb.GetRequest{Key: []byte("w/0002/t")}); err != nil || string(r.GetValue()) != "2" {
		t.Errorf("get w/0002/t at a follower of g1: %v, %v; want 2", r, err)
	}

	// A session opened at g2 through g1's follower, and a write under it.
	s, err := f.OpenSession(ctx, &apipb.OpenSessionRequest{Group: "g2"})
	if err != nil || s.GetClientId() == 0 {
		t.Fatalf("open a session at g2 through g1: %v, %v", s, err)
	}
	for range 2 { // the retry is a duplicate, answered alike
		if _, err := f.Put(ctx, &apipb.PutRequest{ClientId: s.GetClientId(), Seq: 1, Key: []byte("w/0002/s"), Value: []byte("s")}); err != nil {
			t.Fatalf("put under g2's session through g1: %v", err)
		}
	}
	if _, err := f.Await(ctx, &apipb.AwaitRequest{ClientId: 1, Seq: 1, Group: "mars"}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "mars") {
		t.Errorf("await at an unknown group: %v, want InvalidArgument naming it", err)
	}

	checkOneEndpoint(ctx, t, l, addr("r4"))
	before := server("r4").Forwarded()
	// A client that routes itself is answered with a refusal, not
	// forwarded.
	_, err = rawKV(t, l, addr("r4"), directCalls).Put(ctx, &apipb.PutRequest{Key: []byte("w/0001/d"), Value: []byte("x")})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "g1") {
		t.Errorf("direct put of g1's key at g2: %v, want FailedPrecondition naming g1", err)
	}
	if n := server("r4").Forwarded(); n != before {
		t.Errorf("r4 forwarded %d requests of a direct client", n-before)
	}
}

// checkOneEndpoint runs the Go client with every request sent to one
// endpoint, a replica of g2: puts, gets and a transaction of both groups.
func checkOneEndpoint(ctx context.Context, t *testing.T, l *Local, endpoint string) {
	t.Helper()
	c, err := client.New(ctx, client.Config{Endpoints: []string{endpoint}, TLS: l.ClientTLS(), OneEndpoint: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, k := range []string{"w/0001/one", "w/0002/one"} {
		if err := c.Put(ctx, []byte(k), []byte(k)); err != nil {
			t.Fatalf("one endpoint: put %s: %v", k, err)
		}
		if v, found, err := c.Get(ctx, []byte(k)); err != nil || !found || string(v) != k {
			t.Fatalf("one endpoint: get %s: %q %v %v", k, v, found, err)
		}
	}
	res, err := c.Txn(ctx, &txn.Txn{Then: []txn.Op{
		{Kind: txn.OpAdd, Key: []byte("w/0001/n"), Int: 1}, {Kind: txn.OpAdd, Key: []byte("w/0002/n"), Int: 1},
	}})
	if err != nil || !res.Succeeded || len(res.Destinations) != 2 {
		t.Fatalf("one endpoint: two-group txn: %+v, %v", res, err)
	}
}

// TestForwardingLoopCut: a request that a replica forwarded to one that
// cannot serve it either (the two route by different configurations) is
// refused after that one hop, naming both fingerprints, and nothing runs.
// The headers that name a user are taken from nodes only.
func TestForwardingLoopCut(t *testing.T) {
	l := startLocal(t, forwardGroups(t), t.TempDir())
	ctx := ctxTimeout(t, 60*time.Second)
	_, r4, _ := l.cfg.Cluster.Replica("r4")
	node, err := certs.LoadNode(l.CertsDir(), "r2")
	if err != nil {
		t.Fatal(err)
	}
	asNode := rawKV(t, l, r4.GRPC, grpc.WithTransportCredentials(credentials.NewTLS(certs.NodeConfig(node))))
	with := func(kv ...string) context.Context { return metadata.AppendToOutgoingContext(ctx, kv...) }
	put := &apipb.PutRequest{Key: []byte("w/0001/loop"), Value: []byte("x")}

	// r2 (g1) forwarded g1's key to g2, as a replica whose configuration
	// gave the key to g2 would: g2's replica does not send it on.
	_, err = asNode.Put(with(apipb.UserHeader, "root", apipb.ForwardedByHeader, "g1/r2 0123456789abcdef"), put)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), apipb.LoopCutText) ||
		!strings.Contains(err.Error(), "0123456789abcdef") || !strings.Contains(err.Error(), "at epoch 1 here") {
		t.Fatalf("forwarded put sent on: %v, want FailedPrecondition %q naming the sender's fingerprint and the epoch", err, apipb.LoopCutText)
	}
	if g, err := dial(t, l, l.cfg.Cluster.Groups[0].Replicas[0].GRPC).Get(ctx, &apipb.GetRequest{Key: put.Key, Stale: true}); err == nil && g.GetFound() {
		t.Fatalf("the refused put was written")
	}

	refused := []struct {
		name string
		kv   apipb.KVClient
		md   []string
	}{
		{"a node naming no user", asNode, nil},
		{"a node forwarding as another node", asNode, []string{apipb.UserHeader, "root", apipb.ForwardedByHeader, "g1/r1 0123456789abcdef"}},
		{"a node naming a bad user", asNode, []string{apipb.UserHeader, "no body"}},
		{"a user naming another user", rawKV(t, l, r4.GRPC), []string{apipb.UserHeader, "admin"}},
		{"a user posing as a forwarding node", rawKV(t, l, r4.GRPC), []string{apipb.ForwardedByHeader, "g1/r2 0123456789abcdef"}},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.kv.Get(with(tc.md...), &apipb.GetRequest{Key: []byte("w/0002/x")})
			if status.Code(err) != codes.PermissionDenied {
				t.Fatalf("get: %v, want PermissionDenied", err)
			}
		})
	}
	// A node calling for a user, not forwarded (an HTTP gateway's call),
	// may be forwarded once.
	if _, err := asNode.Put(with(apipb.UserHeader, "root"), put); err != nil {
		t.Fatalf("put of g1's key at g2 by a node for root: %v", err)
	}
}
