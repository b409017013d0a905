package replication

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

// BenchmarkCluster measures 3 groups x 3 replicas in this process, raft logs
// fsynced, no emulated WAN: b.N multicasts from 256 concurrent clients, each
// to one group or to two groups. It reports the multicasts accepted per
// second, the median and p99 time for a multicast to be accepted by its
// entry group, and the multicasts per second delivered at every replica of
// every destination (the run ends when the last is delivered).
//
//	go test ./replication -run '^$' -bench Cluster -benchtime 20000x
func BenchmarkCluster(b *testing.B) {
	for _, p := range protocol.Names() {
		for _, groups := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/dst=%d", p, groups), func(b *testing.B) {
				benchCluster(b, p, groups)
			})
		}
	}
}

func benchCluster(b *testing.B, p multicast.Protocol, dstGroups int) {
	c := newTestClusterWith(b, p, 3, 3, clusterOpts{durable: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const clients = 256
	var next atomic.Int64
	lat := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	for g := range c.reps {
		c.leader(g) // measure the groups, not their first election
	}
	b.ResetTimer()
	start := time.Now()
	for cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				g := partition.GroupID(i % 3)
				dst := partition.SetOf(g)
				if dstGroups == 2 {
					dst = dst.Add((g + 1) % 3)
				}
				t0 := time.Now()
				if err := c.multicast(ctx, uint64(cl+1), dst); err != nil {
					b.Error(err)
					return
				}
				lat[cl] = append(lat[cl], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	accepted := time.Since(start)
	c.settle(5 * time.Minute)
	delivered := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) > 0 {
		b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
	}
	var terms uint64
	for g := range c.reps {
		for _, tr := range c.reps[g] {
			terms = max(terms, tr.r.raft.CurrentTerm())
		}
	}
	b.ReportMetric(float64(terms), "max-term")
	b.ReportMetric(float64(c.retries.Load()), "retries")
	b.ReportMetric(float64(c.notLeaders.Load()), "not-leader")
	b.ReportMetric(float64(b.N)/accepted.Seconds(), "accepted/s")
	b.ReportMetric(float64(b.N)/delivered.Seconds(), "delivered/s")
}
