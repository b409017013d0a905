package cluster

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/replication/transport/transportpb"
	"github.com/flexkv/flexkv/server"
)

// movedBoundary returns cfg with the boundary between partitions w0002 and
// w0003 moved: another cluster configuration, valid on its own.
func movedBoundary(cfg *partition.ClusterConfig) *partition.ClusterConfig {
	c := *cfg
	c.Partitions = slices.Clone(cfg.Partitions)
	c.Partitions[1].End = "w/0002/5"
	c.Partitions[2].Start = "w/0002/5"
	return &c
}

// TestIdentity (DESIGN 13): a replica restarted with another configuration
// refuses to start and names the fields that differ; replicas of one
// group started, on fresh data, with another configuration than the rest
// of the cluster are refused by the other groups' peer services, and
// refuse them, with FailedPrecondition naming both fingerprints, counted.
func TestIdentity(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	dir := t.TempDir()
	cfg := testcluster.Layout(t, "flexcast", testaddr.Cluster)
	l := startLocalConfig(t, Config{Cluster: cfg, Dir: dir, Logger: testLogger(t)})
	other := movedBoundary(cfg)
	g1 := cfg.Groups[1]
	open := func(id, dir string, cc *partition.ClusterConfig) (*server.Server, error) {
		return server.Open(server.Config{Cluster: cc, NodeID: id, Dir: dir, NoSync: true, Node: l.certs[id], Logger: testLogger(t), Replication: l.cfg.Replication})
	}

	// A restart with another configuration: refused, naming the fields.
	id := g1.Replicas[0].ID
	if err := l.Stop(id); err != nil {
		t.Fatal(err)
	}
	srv, err := open(id, filepath.Join(dir, id), other)
	if err == nil {
		srv.Close()
		t.Fatal("a replica restarted with another configuration started")
	}
	for _, want := range []string{"configuration differs from the one this replica was created with",
		`partitions[1].end was "w/0003/", now "w/0002/5"`, `partitions[2].start was "w/0003/", now "w/0002/5"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	// Its own configuration still opens it.
	if err := l.Start(id); err != nil {
		t.Fatalf("restart with its own configuration: %v", err)
	}

	// Group 1 again, on fresh data, with the other configuration.
	for _, r := range g1.Replicas {
		if err := l.Stop(r.ID); err != nil {
			t.Fatal(err)
		}
	}
	fresh := t.TempDir()
	var moved []*server.Server
	for _, r := range g1.Replicas {
		srv, err := open(r.ID, filepath.Join(fresh, r.ID), other)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		moved = append(moved, srv)
	}
	mine, theirs := moved[0].Identity().Fingerprint, l.running()[0].Identity().Fingerprint
	if mine == theirs {
		t.Fatalf("both configurations have fingerprint %s", mine)
	}
	// A new leader of the moved group sends the others its acks, which they
	// refuse; the others send it nothing unless they have something for it
	// (an idle FlexCast cluster sends nothing), so one of theirs calls it
	// here, and is refused too.
	if err := deliverFingerprintFrom(moved[0].PeerAddr(), l.certs[cfg.Groups[0].Replicas[0].ID], theirs, 0, 1); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("a call of the rest at the moved group: %v, want FailedPrecondition", err)
	}
	refused := func(srvs []*server.Server) int64 {
		var n int64
		for _, s := range srvs {
			n += s.FingerprintRefusals()
		}
		return n
	}
	deadline := time.Now().Add(20 * time.Second)
	for refused(moved) == 0 || refused(l.running()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("fingerprint refusals: moved group %d, the rest %d; want both > 0", refused(moved), refused(l.running()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// What a caller of the other configuration is told.
	var leader *server.Server
	for _, s := range l.running() {
		if s.Group() == cfg.Groups[0].Name && s.IsLeader() {
			leader = s
		}
	}
	if leader == nil {
		t.Fatal("group 0 has no leader")
	}
	err = deliverFingerprint(leader.PeerAddr(), l.certs[g1.Replicas[0].ID], mine)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), mine) || !strings.Contains(err.Error(), theirs) {
		t.Fatalf("a caller of another configuration: %v, want FailedPrecondition naming %s and %s", err, mine, theirs)
	}
	m := testcluster.ScrapeHandler(t, server.NewMetrics(l.running).Handler())
	if n := m.Sum("flexkv_peer_refusals_total", map[string]string{"reason": "fingerprint"}); n == 0 {
		t.Fatal("flexkv_peer_refusals_total{reason=\"fingerprint\"} is 0")
	}
}

// deliverFingerprint calls the peer service at addr as node n (of group 1)
// with configuration fingerprint fp: an ack frame from group 1 to group 0.
func deliverFingerprint(addr string, n *certs.Node, fp string) error {
	return deliverFingerprintFrom(addr, n, fp, 1, 0)
}

// deliverFingerprintFrom is deliverFingerprint of an ack frame from group
// from, n's, to group to.
func deliverFingerprintFrom(addr string, n *certs.Node, fp string, from, to partition.GroupID) error {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(certs.NodeConfig(n))))
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "flexkv-config-fingerprint", fp)
	ack := channel.AppendFrame(nil, channel.Frame{From: from, To: to, Ack: 1})
	_, err = transportpb.NewGroupChannelClient(cc).Deliver(ctx, &transportpb.DeliverRequest{FromGroup: uint32(from), ToGroup: uint32(to), Frames: [][]byte{ack}})
	return err
}
