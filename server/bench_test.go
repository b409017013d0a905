package server

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/txn"
)

// BenchmarkLocal measures the local cluster (3 groups x 3 replicas in this
// process, raft logs fsynced) through the Go client: single-key put and get
// (a get goes through the group's log), and a two-partition transaction
// (w/0001/ at eu-west-1 and w/0004/ at eu-west-3, with an if on the source
// as in DESIGN 7's example). 64 concurrent callers. Reports operations per
// second and latency percentiles.
//
//	go test ./server -run '^$' -bench Local -benchtime 20000x
func BenchmarkLocal(b *testing.B) {
	cfg := testCluster(b, "flexcast")
	l, err := StartLocal(LocalConfig{Cluster: cfg, Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	waitLeaders(b, l)
	ctx := context.Background()
	c, err := client.New(ctx, client.Config{Endpoints: l.Endpoints(), Sessions: 256})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const callers = 64
	five := int64(1)
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
		{"txn-2-partitions", func(i int) error {
			from, to := fmt.Sprintf("w/0001/a%d", i%100), fmt.Sprintf("w/0004/a%d", i%100)
			_, err := c.Txn(ctx, &txn.Txn{
				If:   []txn.Compare{{Key: []byte(from), Cmp: txn.CmpGreaterEqual, Int: &five}},
				Then: []txn.Op{{Kind: txn.OpAdd, Key: []byte(from), Int: -1}, {Kind: txn.OpAdd, Key: []byte(to), Int: 1}},
				Else: []txn.Op{{Kind: txn.OpAdd, Key: []byte(from), Int: 10}},
			})
			return err
		}},
	}
	for _, op := range ops {
		b.Run(op.name, func(b *testing.B) {
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
						if err := op.do(i); err != nil {
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
			sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
			if len(all) == 0 {
				return
			}
			pct := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))].Microseconds()) / 1000 }
			b.ReportMetric(float64(len(all))/elapsed.Seconds(), "ops/s")
			b.ReportMetric(pct(0.5), "p50-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
		})
	}
}
