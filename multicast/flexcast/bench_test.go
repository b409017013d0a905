package flexcast

import (
	"math/rand/v2"
	"testing"

	"github.com/flexkv/flexkv/configs"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/internal/simnet"
	"github.com/flexkv/flexkv/partition"
)

// fifoNet connects cores by unbounded FIFO links with no delay (a
// simnet.Net); a seeded random choice of the next link to serve makes the
// interleavings vary.
type fifoNet struct {
	cores []*Core
	net   *simnet.Net[multicast.Input]
	rng   *rand.Rand
	// observe is called with every delivery and send, if set.
	deliver func(g partition.GroupID, m multicast.Message)
	sends   uint64
	bytes   uint64
	// clients, if set, are the client ids batches draws each message's
	// from (each with its own sequence); otherwise every message is client
	// 1's.
	clients []uint64
	seqs    []uint64
	// cut: groups whose links are held: nothing they sent is served and
	// nothing reaches them until cut is cleared (a partition under a
	// reliable channel, which delivers everything after it heals).
	cut partition.GroupSet
}

func newFifoNet(tb testing.TB, top *partition.Topology, seed uint64, cfg Config) *fifoNet {
	n := top.Len()
	net := &fifoNet{cores: make([]*Core, n), net: simnet.New[multicast.Input](n, simnet.Faults{}), rng: rand.New(rand.NewPCG(seed, 1))}
	for g := range net.cores {
		c := cfg
		c.Self, c.Topology = partition.GroupID(g), top
		core, err := New(c)
		if err != nil {
			tb.Fatal(err)
		}
		net.cores[g] = core
	}
	return net
}

func (f *fifoNet) step(g partition.GroupID, in multicast.Input) error {
	if err := f.cores[g].Step(in); err != nil {
		return err
	}
	f.route(g, f.cores[g].Ready())
	return nil
}

// route puts g's sends on the links and hands its deliveries to deliver.
func (f *fifoNet) route(g partition.GroupID, out multicast.Output) {
	if f.deliver != nil {
		for _, m := range out.Deliveries {
			f.deliver(g, m)
		}
	}
	for _, s := range out.Sends {
		f.net.Send(g, s.To, multicast.Envelope(g, s.Payload))
		f.sends++
		f.bytes += uint64(len(s.Payload))
	}
}

// serve steps the oldest envelope of a random busy link, drawn from rng;
// it reports false if no link is busy.
func (f *fifoNet) serve(rng *rand.Rand) (bool, error) {
	_, to, in, ok := f.net.Random(rng)
	if !ok {
		return false, nil
	}
	return true, f.step(to, in)
}

// serveOpen serves a random busy link that the cut does not hold, as serve
// does; it reports false if there is none.
func (f *fifoNet) serveOpen() (bool, error) {
	if f.cut.Empty() {
		return f.serve(f.rng)
	}
	var open [][2]partition.GroupID
	for _, l := range f.net.Busy() {
		if !f.cut.Has(l[0]) && !f.cut.Has(l[1]) {
			open = append(open, l)
		}
	}
	if len(open) == 0 {
		return false, nil
	}
	l := open[f.rng.IntN(len(open))]
	in, _ := f.net.Next(l[0], l[1])
	return true, f.step(l[1], in)
}

// drain serves random links, one envelope at a time, until all are empty
// or held by the cut.
func (f *fifoNet) drain() error {
	for {
		ok, err := f.serveOpen()
		if !ok || err != nil {
			return err
		}
	}
}

// batches multicasts n messages from client 1, batchSize at a time, each at
// its lca; after each batch it drains the links and ticks every group (which
// keeps the garbage collection going).
func (f *fifoNet) batches(tb testing.TB, n, batchSize int, dst func() partition.GroupSet) {
	tb.Helper()
	for i := 0; i < n; i += batchSize {
		for j := 0; j < batchSize && i+j < n; j++ {
			d := dst()
			id := multicast.MsgID{Client: 1, Seq: uint64(i + j + 1)}
			if len(f.clients) > 0 {
				k := f.rng.IntN(len(f.clients))
				f.seqs[k]++
				id = multicast.MsgID{Client: f.clients[k], Seq: f.seqs[k]}
			}
			m := multicast.Message{ID: id, Dst: d}
			if err := f.step(Entry(d), multicast.Request(m)); err != nil {
				tb.Fatal(err)
			}
		}
		if err := f.drain(); err != nil {
			tb.Fatal(err)
		}
		for g := range f.cores {
			if err := f.step(partition.GroupID(g), multicast.Tick()); err != nil {
				tb.Fatal(err)
			}
		}
	}
}

// aws12 returns the 12-region topology in overlay O1 and its latencies.
func aws12(tb testing.TB) (*partition.Topology, *partition.Latency) {
	lat, err := configs.AWS12Latency()
	if err != nil {
		tb.Fatal(err)
	}
	order, err := partition.PaperOverlay("O1")
	if err != nil {
		tb.Fatal(err)
	}
	spec := partition.Spec{}
	for _, r := range order {
		spec.Groups = append(spec.Groups, partition.Group{Name: r, Region: r})
	}
	top, err := partition.NewTopology(spec)
	if err != nil {
		tb.Fatal(err)
	}
	return top, lat
}

// localityDst draws a two-group destination set: a random home group and its
// nearest group with probability locality, else the next nearest, and so on.
func localityDst(rng *rand.Rand, top *partition.Topology, nearest [][]partition.GroupID, locality float64) partition.GroupSet {
	home := partition.GroupID(rng.IntN(top.Len()))
	i := 0
	for i < len(nearest[home])-1 && rng.Float64() >= locality {
		i++
	}
	return partition.SetOf(home, nearest[home][i])
}

// BenchmarkFlexCast measures the core alone: 12 groups (overlay O1), 2-destination
// messages at 90% locality, garbage collection on, envelopes encoded and
// decoded, links without delay served in random order, 24 clients with
// random 63-bit ids (as a gTPC-C run on aws-12 has: 2 per region). One op =
// one multicast, delivered at both destinations.
func BenchmarkFlexCast(b *testing.B) {
	top, lat := aws12(b)
	nearest := make([][]partition.GroupID, top.Len())
	for g := range nearest {
		nearest[g] = lat.Nearest(top, partition.GroupID(g), top.All())
	}
	net := newFifoNet(b, top, 1, Config{})
	ids := rand.New(rand.NewPCG(3, 3))
	for range 24 {
		net.clients = append(net.clients, ids.Uint64()>>1)
	}
	net.seqs = make([]uint64, len(net.clients))
	var deliveries uint64
	net.deliver = func(partition.GroupID, multicast.Message) { deliveries++ }
	rng := rand.New(rand.NewPCG(2, 2))
	b.ReportAllocs()
	b.ResetTimer()
	net.batches(b, b.N, 64, func() partition.GroupSet { return localityDst(rng, top, nearest, 0.9) })
	b.StopTimer()
	var entries uint64
	histMax := 0
	for _, c := range net.cores {
		s := c.Stats()
		entries += s.EntriesSent
		histMax = max(histMax, s.HistoryLenMax)
	}
	secs := b.Elapsed().Seconds()
	b.ReportMetric(float64(deliveries)/secs, "deliveries/s")
	b.ReportMetric(float64(net.bytes)/float64(b.N), "bytes/multicast")
	b.ReportMetric(float64(entries)/float64(b.N), "history-entries/multicast")
	b.ReportMetric(float64(histMax), "history-max")
}

// TestHistoryBounded runs 1,000,000 multicasts at 12 groups and checks that
// garbage collection keeps every group's history below a bound: a round
// every GCTicksFor(12) = 40 ticks (a tick per 64 multicasts, the links
// drained in between); an entry is shipped to the top group in the round
// after its deliveries, proved stable there, and the cut reaches every group
// with that round's envelopes, so an entry lives at most about two rounds:
// 2*40*64 multicasts, each 2 entries (one per destination's chain) in a
// group's view, with slack for the phase of the rounds.
func TestHistoryBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000,000 multicasts")
	}
	const total, batch = 1_000_000, 64
	top, lat := aws12(t)
	bound := 3 * GCTicksFor(top.Len()) * batch * 2 // entries per group
	nearest := make([][]partition.GroupID, top.Len())
	for g := range nearest {
		nearest[g] = lat.Nearest(top, partition.GroupID(g), top.All())
	}
	net := newFifoNet(t, top, 3, Config{})
	var deliveries uint64
	net.deliver = func(partition.GroupID, multicast.Message) { deliveries++ }
	rng := rand.New(rand.NewPCG(4, 4))
	net.batches(t, total, batch, func() partition.GroupSet { return localityDst(rng, top, nearest, 0.9) })
	if deliveries != 2*total {
		t.Fatalf("deliveries: got %d, want %d", deliveries, 2*total)
	}
	for g, c := range net.cores {
		s := c.Stats()
		t.Logf("group %d: history max %d, now %d, dag %d, truncations %d", g, s.HistoryLenMax, s.HistoryLen, s.DAGNodes, s.Truncations)
		if s.HistoryLenMax > bound {
			t.Errorf("group %d: history reached %d entries, want <= %d", g, s.HistoryLenMax, bound)
		}
		if s.Pending != 0 || s.Open != 0 || s.NotifQueue != 0 {
			t.Errorf("group %d: left pending=%d open=%d notifq=%d after draining", g, s.Pending, s.Open, s.NotifQueue)
		}
	}
}

// TestHistoryBoundedAwayFromRankZero sends 300,000 multicasts among groups 1-5
// of 6, none to rank 0: rank 0 delivers nothing, and the histories of the
// others are trimmed as in TestHistoryBounded, the bound the same. (The
// flush this collection replaced came from rank 0 only, which had to send
// one every 200 ticks whatever it delivered.)
func TestHistoryBoundedAwayFromRankZero(t *testing.T) {
	if testing.Short() {
		t.Skip("300,000 multicasts")
	}
	const total, batch, groups = 300_000, 64, 6
	const bound = 3 * 10 * batch * 2
	top := lettersTopology(t, groups)
	net := newFifoNet(t, top, 5, Config{})
	var deliveries uint64
	net.deliver = func(partition.GroupID, multicast.Message) { deliveries++ }
	rng := rand.New(rand.NewPCG(6, 6))
	net.batches(t, total, batch, func() partition.GroupSet {
		a := partition.GroupID(1 + rng.IntN(groups-1))
		b := partition.GroupID(1 + rng.IntN(groups-2))
		if b >= a {
			b++
		}
		return partition.SetOf(a, b)
	})
	if deliveries != 2*total {
		t.Fatalf("deliveries: got %d, want %d", deliveries, 2*total)
	}
	for g, c := range net.cores {
		s := c.Stats()
		if s.Truncations == 0 && g > 0 {
			t.Errorf("group %d truncated no history", g)
		}
		if s.HistoryLenMax > bound {
			t.Errorf("group %d: history reached %d entries, want <= %d", g, s.HistoryLenMax, bound)
		}
		t.Logf("group %d: history max %d, truncations %d", g, s.HistoryLenMax, s.Truncations)
	}
}

// TestGCTicksFor: the default period of the rounds grows with the cluster,
// GCTicksDefault per three groups, so that each group's share of the
// rounds' envelopes stays constant; a Config that names one keeps it.
func TestGCTicksFor(t *testing.T) {
	for _, c := range []struct{ n, want int }{{1, 10}, {2, 10}, {3, 10}, {4, 20}, {6, 20}, {7, 30}, {12, 40}, {24, 80}} {
		if got := GCTicksFor(c.n); got != c.want {
			t.Errorf("GCTicksFor(%d) = %d, want %d", c.n, got, c.want)
		}
	}
	top, _ := aws12(t)
	if c, err := New(Config{Self: 0, Topology: top}); err != nil || c.cfg.GCTicks != 40 {
		t.Errorf("a core of 12 groups without a period: %v, period %d; want 40", err, c.cfg.GCTicks)
	}
	if c, err := New(Config{Self: 0, Topology: top, GCTicks: 3}); err != nil || c.cfg.GCTicks != 3 {
		t.Errorf("a core of 12 groups with period 3: %v, period %d", err, c.cfg.GCTicks)
	}
}
