package cluster

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/txn"
)

// BenchmarkLocal measures the local cluster (3 groups x 3 replicas in this
// process, raft logs fsynced, no emulated WAN) through the Go client, with
// 64 concurrent callers: single-key put (through the group's log) and get
// (read index at the leader), and a two-partition transfer (w/0001/ at
// eu-west-1 to w/0004/ at eu-west-3, with an if on the source, as in
// DESIGN 7's example) over 100 account pairs, which transfers in flight
// share, and over accounts of their own. Reports operations per second and
// latency percentiles.
//
//	go test ./cluster -run '^$' -bench Local -benchtime 10000x
func BenchmarkLocal(b *testing.B) {
	cfg := testcluster.Layout(b, "flexcast", testaddr.Cluster)
	l, err := Start(Config{Cluster: cfg, Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	waitLeaders(b, l)
	ctx := context.Background()
	c, err := client.New(ctx, client.Config{Endpoints: l.Endpoints(), TLS: l.ClientTLS(), Sessions: 256})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const callers = 64
	transfer := transferOf(ctx, c)
	ops := []struct {
		name string
		do   func(i int) error
	}{
		{"put", func(i int) error {
			return c.Put(ctx, []byte(fmt.Sprintf("w/0001/k%d", i%1000)), []byte("value"))
		}},
		{"get", func(i int) error {
			_, _, err := c.Get(ctx, []byte(fmt.Sprintf("w/0001/k%d", i%1000)))
			return err
		}},
		{"txn-2-partitions", func(i int) error { return transfer(i % 100) }},
		// Each transfer on accounts of its own: no conflicts between the
		// transactions in flight, what the executor's pipelining allows.
		{"txn-2-partitions-disjoint", func(i int) error { return transfer(1000 + i) }},
	}
	for _, op := range ops {
		b.Run(op.name, func(b *testing.B) { runCallers(b, callers, op.do) })
	}
}

// transferOf returns a function that moves 1 from w/0001/a<n> to
// w/0004/a<n> if the source holds at least 1, else refills the source.
func transferOf(ctx context.Context, c *client.Client) func(n int) error {
	one := int64(1)
	return func(n int) error {
		from, to := fmt.Sprintf("w/0001/a%d", n), fmt.Sprintf("w/0004/a%d", n)
		_, err := c.Txn(ctx, &txn.Txn{
			If:   []txn.Compare{{Key: []byte(from), Cmp: txn.CmpGreaterEqual, Int: &one}},
			Then: []txn.Op{{Kind: txn.OpAdd, Key: []byte(from), Int: -1}, {Kind: txn.OpAdd, Key: []byte(to), Int: 1}},
			Else: []txn.Op{{Kind: txn.OpAdd, Key: []byte(from), Int: 10}},
		})
		return err
	}
}

// runCallers runs b.N calls of do from callers goroutines and reports the
// throughput and the latency percentiles.
func runCallers(b *testing.B, callers int, do func(i int) error) {
	var next atomic.Int64
	lat := make([][]time.Duration, callers)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= b.N {
					return
				}
				t0 := time.Now()
				if err := do(i); err != nil {
					b.Error(err)
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	if len(all) == 0 {
		return
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	pct := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))].Microseconds()) / 1000 }
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "ops/s")
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}
