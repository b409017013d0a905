package cluster

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexkv/flexkv/api"
	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/txn"
)

// readOnlyGet is a read-only transaction of one get: served at the leader
// of key's group after a read barrier (DESIGN 6.5).
func readOnlyGet(key string) *txn.Txn {
	return &txn.Txn{Then: []txn.Op{{Kind: txn.OpGet, Key: []byte(key)}}}
}

// TestReadsAfterLeaderChanges: a write acknowledged, then the leader of its
// group stopped: a Get and a read-only transaction made afterwards, served
// by the new leader without the log, return it; again after the old leader
// comes back, five times over. The reads are served at the leader, not
// through the log: flexkv_reads_total{path="leader"} counts them.
func TestReadsAfterLeaderChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	l := startLocalConfig(t, Config{Cluster: testcluster.Layout(t, "flexcast", testaddr.Cluster), Dir: t.TempDir()})
	ctx := ctxTimeout(t, 3*time.Minute)
	c, err := client.New(ctx, client.Config{Endpoints: l.Endpoints(), TLS: l.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const key, group = "w/0001/read", "eu-west-1"
	for i := range 5 {
		want := "v" + strconv.Itoa(i)
		if err := c.Put(ctx, []byte(key), []byte(want)); err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		old := l.Leader(group)
		if err := l.Stop(old); err != nil {
			t.Fatal(err)
		}
		checkRead(ctx, t, c, key, want, "after leader "+old+" stopped")
		if err := l.Start(old); err != nil {
			t.Fatal(err)
		}
		waitLeaders(t, l)
		checkRead(ctx, t, c, key, want, "after "+old+" came back")
	}
	// Counters start afresh at a restart: count the reads of a last round.
	atLeader := func() float64 {
		f := testcluster.ScrapeHandler(t, l.Metrics().Handler())
		return f.Sum("flexkv_reads_total", map[string]string{"group": group, "path": "leader"})
	}
	before := atLeader()
	for range 5 {
		checkRead(ctx, t, c, key, "v4", "at the end")
	}
	if n := atLeader() - before; n < 10 {
		t.Errorf("group %s served %v of 10 reads at the leader, want all", group, n)
	}
}

// checkRead reads key through c by a Get and by a read-only transaction,
// and fails t unless both return want.
func checkRead(ctx context.Context, t *testing.T, c *client.Client, key, want, when string) {
	t.Helper()
	v, found, err := c.Get(ctx, []byte(key))
	if err != nil || !found || string(v) != want {
		t.Fatalf("%s: get %s = %q (found %v), %v; want %q", when, key, v, found, err, want)
	}
	res, err := c.Txn(ctx, readOnlyGet(key))
	if err != nil || len(res.Results) != 1 || !res.Results[0].Found || string(res.Results[0].Value) != want {
		t.Fatalf("%s: read-only transaction of %s = %+v, %v; want %q", when, key, res, err, want)
	}
}

// TestConcurrentReadsShareBarriers: 500 concurrent Gets at one group's
// leader take fewer read barriers than reads (flexkv_read_barriers_total
// against flexkv_read_barrier_reads_total): the reads that wait while a
// barrier runs share the next.
func TestConcurrentReadsShareBarriers(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	l := startLocalConfig(t, Config{Cluster: testcluster.Layout(t, "flexcast", testaddr.Cluster), Dir: t.TempDir()})
	ctx := ctxTimeout(t, 2*time.Minute)
	const group, readers = "eu-west-1", 500
	leader := l.Leader(group)
	_, rc, _ := l.cfg.Cluster.Replica(leader)
	kv := rawKV(t, l, rc.GRPC, directCalls)
	if _, err := kv.Put(ctx, &apipb.PutRequest{Key: []byte("w/0001/shared"), Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	scrape := func() (barriers, reads float64) {
		f := testcluster.ScrapeHandler(t, l.nodes[leader].srv.Metrics().Handler())
		return f.Sum("flexkv_read_barriers_total", nil), f.Sum("flexkv_read_barrier_reads_total", nil)
	}
	barriers0, reads0 := scrape()
	start := make(chan struct{})
	errs := make(chan error, readers)
	var wg sync.WaitGroup
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := kv.Get(ctx, &apipb.GetRequest{Key: []byte("w/0001/shared")})
			if err == nil && string(resp.GetValue()) != "x" {
				err = fmt.Errorf("got %q, want x", resp.GetValue())
			}
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("get: %v", err)
		}
	}
	barriers1, reads1 := scrape()
	barriers, reads := barriers1-barriers0, reads1-reads0
	if reads < readers || barriers >= reads {
		t.Fatalf("%d concurrent gets: %v barriers served %v reads; want every get served, by fewer barriers than reads", readers, barriers, reads)
	}
	t.Logf("%d concurrent gets: %v barriers, %.1f reads each", readers, barriers, reads/barriers)
}

// TestDeposedLeaderServesNoStaleRead: a group's leader is cut off from the
// rest of its group; the others elect a new leader, which takes a write.
// Reads sent to the old leader all along (Gets and read-only transactions,
// which it may forward once it knows it no longer leads) never return the
// value before that write once the write was acknowledged: the old leader
// cannot confirm its leadership, so it answers no read from its own state.
func TestDeposedLeaderServesNoStaleRead(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	l := startLocalConfig(t, Config{Cluster: testcluster.Layout(t, "flexcast", testaddr.Cluster), Dir: t.TempDir()})
	ctx := ctxTimeout(t, 2*time.Minute)
	const key, group = "w/0001/deposed", "eu-west-1"
	old := l.Leader(group)
	_, rc, _ := l.cfg.Cluster.Replica(old)
	atOld := rawKV(t, l, rc.GRPC)
	if _, err := atOld.Put(ctx, &apipb.PutRequest{Key: []byte(key), Value: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	if err := l.SetCut(old, true); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.SetCut(old, false) }()

	// Readers at the old leader, from the cut on; each read records
	// whether it was invoked after the write below was acknowledged.
	reads := &oldLeaderReads{kv: atOld, key: key, stop: make(chan struct{})}
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reads.run(ctx, r)
		}()
	}

	var newLeader string
	waitFor(t, "a new leader in "+group, func() bool {
		for _, g := range l.cfg.Cluster.Groups {
			if g.Name != group {
				continue
			}
			for _, r := range g.Replicas {
				if r.ID != old && l.nodes[r.ID].srv != nil && l.nodes[r.ID].srv.IsLeader() {
					newLeader = r.ID
					return true
				}
			}
		}
		return false
	})
	_, nrc, _ := l.cfg.Cluster.Replica(newLeader)
	if _, err := rawKV(t, l, nrc.GRPC, directCalls).Put(ctx, &apipb.PutRequest{Key: []byte(key), Value: []byte("after")}); err != nil {
		t.Fatalf("put at the new leader %s: %v", newLeader, err)
	}
	reads.acked.Store(true)
	waitFor(t, "reads at the old leader after the write", func() bool {
		reads.mu.Lock()
		defer reads.mu.Unlock()
		return reads.afterAck >= 40
	})
	close(reads.stop)
	wg.Wait()
	if len(reads.stale) > 0 {
		t.Fatalf("the old leader %s, cut off, answered stale reads:\n%v", old, reads.stale)
	}
	t.Logf("old leader %s: %d reads answered (forwarded after it stepped down), %d invoked after the write", old, reads.served, reads.afterAck)
}

// oldLeaderReads are the reads of TestDeposedLeaderServesNoStaleRead at
// the old leader, and what they returned.
type oldLeaderReads struct {
	kv    apipb.KVClient
	key   string
	acked atomic.Bool // the write of "after" was acknowledged
	stop  chan struct{}

	mu       sync.Mutex
	stale    []string // reads invoked after the write that returned another value
	served   int      // reads answered without an error
	afterAck int      // reads invoked after the write
}

// run reads key until stop, reader r: Gets and read-only transactions in
// turn.
func (o *oldLeaderReads) run(ctx context.Context, r int) {
	for i := 0; ; i++ {
		select {
		case <-o.stop:
			return
		default:
		}
		after := o.acked.Load()
		v, err := o.read(ctx, (r+i)%2 == 0)
		o.mu.Lock()
		if err == nil {
			o.served++
		}
		if after {
			o.afterAck++
			if err == nil && v != "after" {
				o.stale = append(o.stale, fmt.Sprintf("read %d of reader %d, invoked after the write was acknowledged: %q", i, r, v))
			}
		}
		o.mu.Unlock()
		if err != nil {
			time.Sleep(10 * time.Millisecond) // an error comes at once from a replica that knows it does not lead
		}
	}
}

// read reads key once, by a Get or by a read-only transaction.
func (o *oldLeaderReads) read(ctx context.Context, get bool) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if get {
		resp, err := o.kv.Get(ctx, &apipb.GetRequest{Key: []byte(o.key)})
		return string(resp.GetValue()), err
	}
	resp, err := o.kv.Txn(ctx, &apipb.TxnRequest{Body: &apipb.TxnRequest_Txn{Txn: api.TxnToProto(readOnlyGet(o.key))}})
	if err != nil {
		return "", err
	}
	return string(resp.GetPiece().GetResults()[0].GetValue()), nil
}

// waitFor waits until cond holds, failing t after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
