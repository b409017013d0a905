package skeen

import (
	"math/rand"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// BenchmarkSkeen multicasts b.N messages among 12 groups, each to two
// random groups with a random one of them as entry, in batches of 64
// requests followed by moving every envelope, and reports deliveries (one
// per destination) per second of core and driver time.
func BenchmarkSkeen(b *testing.B) {
	const groups, batch = 12, 64
	cl := newCluster(b, groups, 0)
	cl.Check = nil
	rng := rand.New(rand.NewSource(1))
	deliveries := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; {
		for j := 0; j < batch && i < b.N; j, i = j+1, i+1 {
			x := partition.GroupID(rng.Intn(groups))
			y := partition.GroupID(rng.Intn(groups - 1))
			if y >= x {
				y++
			}
			at := x
			if rng.Intn(2) == 0 {
				at = y
			}
			m := multicast.Message{ID: multicast.MsgID{Client: uint64(x), Seq: uint64(i)}, Dst: partition.SetOf(x, y)}
			if err := cl.Cores[at].Step(multicast.Request(m)); err != nil {
				b.Fatal(err)
			}
			deliveries += pump(cl, at)
		}
		for links := cl.Busy(); len(links) > 0; links = cl.Busy() {
			for _, l := range links {
				for s, ok := cl.Net.Next(l[0], l[1]); ok; s, ok = cl.Net.Next(l[0], l[1]) {
					if err := cl.Cores[l[1]].Step(multicast.Envelope(l[0], s.Payload)); err != nil {
						b.Fatal(err)
					}
					deliveries += pump(cl, l[1])
				}
			}
		}
	}
	b.StopTimer()
	if want := 2 * b.N; deliveries != want {
		b.Fatalf("got %d deliveries, want %d", deliveries, want)
	}
	b.ReportMetric(float64(deliveries)/b.Elapsed().Seconds(), "deliveries/s")
}

// pump moves g's sends onto the links, drops its deliveries and returns how
// many there were.
func pump(cl *cluster, g partition.GroupID) int {
	out := cl.Cores[g].Ready()
	for _, s := range out.Sends {
		cl.Net.Send(g, s.To, s)
	}
	return len(out.Deliveries)
}
