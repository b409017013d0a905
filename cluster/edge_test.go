package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/internal/h2test"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/replication/transport/transportpb"
	"github.com/flexkv/flexkv/server"
)

// edgeAttack is one kind of hostile load: conns connections, each opening
// calls calls of method that declare a message of declared bytes and send
// sent bytes of it, never finishing.
type edgeAttack struct {
	addr           string
	tls            *tls.Config
	method         string
	conns, calls   int
	declared, sent int
	open           []*h2test.Conn
}

// run opens the attack's connections and calls, then sends on them all
// at once, and returns when every send ended (sent, or stopped by the
// server). The connections stay open until close.
func (a *edgeAttack) run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for range a.conns {
		c, err := h2test.Dial(ctx, a.addr, a.tls)
		if err != nil {
			return fmt.Errorf("dial %s: %w", a.addr, err)
		}
		a.open = append(a.open, c)
		var ids []uint32
		for range a.calls {
			id, err := c.Open(a.method, nil)
			if err != nil {
				return fmt.Errorf("open a call: %w", err)
			}
			ids = append(ids, id)
		}
		wg.Go(func() {
			for _, id := range ids {
				if _, err := c.Send(ctx, id, a.declared, a.sent); err != nil && c.Err() != nil {
					return
				}
			}
		})
	}
	return nil
}

// closed returns how many of the attack's connections the server closed.
func (a *edgeAttack) closed() int {
	n := 0
	for _, c := range a.open {
		if c.Err() != nil {
			n++
		}
	}
	return n
}

func (a *edgeAttack) close() {
	for _, c := range a.open {
		_ = c.Close()
	}
}

// liveHeap returns the bytes of the Go heap that are live.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// checkOwnGroupRefused calls the peer port at addr as a node of the
// replica's own group (tlsCfg) and expects PermissionDenied at the call's
// start, before any body byte is sent.
func checkOwnGroupRefused(ctx context.Context, t *testing.T, addr string, tlsCfg *tls.Config, method string) {
	t.Helper()
	own, err := h2test.Dial(ctx, addr, tlsCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	id, err := own.Open(method, nil)
	if err != nil {
		t.Fatal(err)
	}
	end, err := own.Wait(ctxTimeout(t, 10*time.Second), id)
	if err != nil || end.Status != int(codes.PermissionDenied) {
		t.Fatalf("a call from a node of the replica's own group at its peer port, no body sent: %+v, %v; want PermissionDenied at its start", end, err)
	}
	t.Logf("own group's node refused before its body: %s", end.Message)
}

// checkEdgeClosures checks that an operator sees what the edge did: both
// ports of replica id count at least one connection closed in their metrics.
func checkEdgeClosures(t *testing.T, l *Local, id string) {
	t.Helper()
	f := testcluster.ScrapeHandler(t, l.nodes[id].srv.Metrics().Handler())
	for _, port := range []string{"client", "peer"} {
		s := f.Series("flexkv_edge_connections_closed_total", map[string]string{"replica": id, "port": port})
		if len(s) != 1 || testcluster.Value(s[0]) < 1 {
			t.Errorf("flexkv_edge_connections_closed_total{replica=%s,port=%s} = %v after the attack, want at least 1", id, port, s)
		}
	}
}

// TestEdgeHoldsItsBound is hostile load at the edge (DESIGN 13) with valid
// certificates: on a replica's client API, connections that each open
// calls declaring 4 MiB - 1 bytes and send 3 MiB of each, never finishing;
// on its peer port, a node of another group doing the same with batches.
// Without bounds the replica would hold every byte sent (some 300 MiB
// here); with them the process's live heap grows by no more than what the
// replica's two ports may hold (server.EdgeBytesMax) and a margin, the
// replica serves a Put, a Get and a transaction across groups meanwhile,
// and the heap comes back once the attackers leave. A node of the
// replica's own group, which sends nothing to its peer port, is refused
// there before it sends a byte of its body.
func TestEdgeHoldsItsBound(t *testing.T) {
	dir := t.TempDir()
	cfg := testcluster.Layout(t, "flexcast", testaddr.Cluster)
	l := startLocal(t, cfg, dir)
	ctx := ctxTimeout(t, 2*time.Minute)
	c, err := client.New(ctx, client.Config{Endpoints: l.Endpoints(), TLS: l.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Put(ctx, []byte("w/0001/acct"), []byte("10")); err != nil {
		t.Fatal(err)
	}

	g0, g1 := cfg.Groups[0], cfg.Groups[1]
	target := l.Leader(g0.Name) // serves w/0001/, and takes group 1's and 2's frames for group 0
	_, rc, ok := cfg.Replica(target)
	if !ok {
		t.Fatalf("no leader in group %s", g0.Name)
	}
	node := func(id string) *tls.Config {
		n, err := certs.LoadNode(CertsDir(dir), id)
		if err != nil {
			t.Fatal(err)
		}
		return certs.NodeConfig(n)
	}
	deliver := "/" + transportpb.GroupChannel_ServiceDesc.ServiceName + "/Deliver"

	// A node of the target's own group: refused before its body.
	other := g0.Replicas[0].ID
	if other == target {
		other = g0.Replicas[1].ID
	}
	checkOwnGroupRefused(ctx, t, rc.PeerAddr(), node(other), deliver)

	bound := server.EdgeBytesMax(cfg)
	base := liveHeap()
	api := &edgeAttack{
		addr: rc.GRPC, tls: l.ClientTLS(), method: "/flexkv.kv.v1.KV/Put",
		conns: 12, calls: 8, declared: 4<<20 - 1, sent: 3 << 20,
	}
	peer := &edgeAttack{
		addr: rc.PeerAddr(), tls: node(g1.Replicas[0].ID), method: deliver,
		conns: 4, calls: 8, declared: 1 << 20, sent: 900 << 10,
	}
	defer api.close()
	defer peer.close()
	attempted := api.conns*api.calls*api.sent + peer.conns*peer.calls*peer.sent
	sendCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var apiErr, peerErr error
	wg.Go(func() { apiErr = api.run(sendCtx) })
	wg.Go(func() { peerErr = peer.run(sendCtx) })
	wg.Wait()
	if apiErr != nil || peerErr != nil {
		t.Fatalf("the attack: client API %v, peer %v", apiErr, peerErr)
	}
	held := liveHeap()
	grew := int64(held) - int64(base)
	t.Logf("attack: %d MiB sent in partial messages; live heap %d -> %d MiB (+%d MiB), bound %d MiB",
		attempted>>20, base>>20, held>>20, grew>>20, bound>>20)
	// The margin: gRPC's buffers around what it holds, the attackers' own
	// connections (they run in this process), the cluster's work meanwhile.
	if limit := bound + bound/4 + 32<<20; grew > limit {
		t.Errorf("the live heap grew by %d MiB under the attack, more than the edge's bound of %d MiB and its margin (%d MiB)", grew>>20, bound>>20, limit>>20)
	}

	// The replica serves meanwhile, the attackers' surviving calls open.
	if err := c.Put(ctx, []byte("w/0001/b"), []byte("v")); err != nil {
		t.Fatalf("a Put under the attack: %v", err)
	}
	if v, _, err := c.Get(ctx, []byte("w/0001/b")); err != nil || string(v) != "v" {
		t.Fatalf("a Get under the attack: %q, %v", v, err)
	}
	res, err := c.Txn(ctx, mustTxn(t, `{"then":[{"op":"add","key":"w/0001/acct","int":-4},{"op":"add","key":"w/0003/acct","int":4}]}`))
	if err != nil || !res.Succeeded {
		t.Fatalf("a transaction across groups under the attack: %+v, %v", res, err)
	}

	t.Logf("the client API closed %d of %d connections, the peer port %d of %d", api.closed(), api.conns, peer.closed(), peer.conns)
	if api.closed() == 0 || peer.closed() == 0 {
		t.Errorf("a port closed no connection (client API %d, peer %d): the attack never reached a bound", api.closed(), peer.closed())
	}
	checkEdgeClosures(t, l, target)
	api.close()
	peer.close()
	var after uint64
	deadline := time.Now().Add(20 * time.Second)
	for after = liveHeap(); int64(after)-int64(base) > 32<<20 && time.Now().Before(deadline); after = liveHeap() {
		time.Sleep(100 * time.Millisecond)
	}
	if grown := int64(after) - int64(base); grown > 32<<20 {
		t.Errorf("the attackers gone, the live heap is %d MiB, %d MiB above what it was before: what they sent is still held", after>>20, grown>>20)
	}
}
