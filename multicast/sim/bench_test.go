package sim

import (
	"math/rand/v2"
	"testing"

	"github.com/flexkv/flexkv/configs"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

// BenchmarkProtocols runs the three cores on one workload, side by side: the
// 12 AWS regions (overlay O1, tree T1), two-destination messages whose second
// destination is the home group's nearest with probability 0.9 (else the
// next nearest, and so on), submitted at each protocol's entry group in
// batches of 64; links without delay or faults, served in a seeded random
// order; envelopes encoded and decoded; FlexCast's garbage collection on (a
// tick to every group per batch). One op is one multicast delivered at both
// destinations; deliveries/s counts deliveries at all groups per second of
// one core.
func BenchmarkProtocols(b *testing.B) {
	lat, err := configs.AWS12Latency()
	if err != nil {
		b.Fatal(err)
	}
	order, err := partition.PaperOverlay("O1")
	if err != nil {
		b.Fatal(err)
	}
	parent, err := partition.PaperTree("T1")
	if err != nil {
		b.Fatal(err)
	}
	spec := partition.Spec{Parent: parent}
	for _, r := range order {
		spec.Groups = append(spec.Groups, partition.Group{Name: r})
	}
	top, err := partition.NewTopology(spec)
	if err != nil {
		b.Fatal(err)
	}
	n := top.Len()
	nearest := make([][]partition.GroupID, n)
	for g := range nearest {
		nearest[g] = lat.Nearest(top, partition.GroupID(g), top.All())
	}
	for _, p := range protocol.All() {
		b.Run(p.String(), func(b *testing.B) {
			cores := make([]multicast.Core, n)
			for g := range cores {
				var err error
				if cores[g], err = p.New(partition.GroupID(g), top); err != nil {
					b.Fatal(err)
				}
			}
			links := make([][]multicast.Input, n*n)
			var busy []int
			var deliveries, sends, bytes int
			step := func(g int, in multicast.Input) {
				if err := cores[g].Step(in); err != nil {
					b.Fatal(err)
				}
				out := cores[g].Ready()
				deliveries += len(out.Deliveries)
				for _, s := range out.Sends {
					l := g*n + int(s.To)
					if len(links[l]) == 0 {
						busy = append(busy, l)
					}
					links[l] = append(links[l], multicast.Envelope(partition.GroupID(g), s.Payload))
					sends++
					bytes += len(s.Payload)
				}
			}
			rng := rand.New(rand.NewPCG(1, 2))
			const batch = 64
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				for j := 0; j < batch && i+j < b.N; j++ {
					home := partition.GroupID(rng.IntN(n))
					k := 0
					for k < n-2 && rng.Float64() >= 0.9 {
						k++
					}
					dst := partition.SetOf(home, nearest[home][k])
					m := multicast.Message{ID: multicast.MsgID{Client: 1, Seq: uint64(i + j + 1)}, Dst: dst}
					step(int(p.Entry(top, lat, protocol.HomeOrigin(home), dst)), multicast.Request(m))
				}
				for len(busy) > 0 {
					x := rng.IntN(len(busy))
					l := busy[x]
					in := links[l][0]
					links[l] = links[l][1:]
					if len(links[l]) == 0 {
						busy[x] = busy[len(busy)-1]
						busy = busy[:len(busy)-1]
					}
					step(l%n, in)
				}
				for g := range cores {
					step(g, multicast.Tick())
				}
			}
			b.StopTimer()
			if deliveries < 2*b.N {
				b.Fatalf("%d deliveries for %d multicasts", deliveries, b.N)
			}
			b.ReportMetric(float64(deliveries)/b.Elapsed().Seconds(), "deliveries/s")
			b.ReportMetric(float64(sends)/float64(b.N), "sends/multicast")
			b.ReportMetric(float64(bytes)/float64(b.N), "bytes/multicast")
		})
	}
}
