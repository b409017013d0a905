package protocol_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

// testTopology is four groups A < B < C < D (by rank), one per region, with
// the tree A -> B -> {C, D}: the tree-lca of {C, D} is B, which is not a
// destination.
func testTopology(t *testing.T) *partition.Topology {
	t.Helper()
	top, err := partition.NewTopology(partition.Spec{
		Groups: []partition.Group{
			{Name: "A", Region: "ra"}, {Name: "B", Region: "rb"}, {Name: "C", Region: "rc"}, {Name: "D", Region: "rd"},
		},
		Parent: map[string]string{"B": "A", "C": "B", "D": "B"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// testLatency has the regions of testTopology and rx, a region without a
// group. Rows are "from".
func testLatency(t *testing.T) *partition.Latency {
	t.Helper()
	lat, err := partition.NewLatency([]string{"ra", "rb", "rc", "rd", "rx"}, [][]float64{
		{1, 10, 50, 60, 70},
		{10, 1, 30, 5, 40},
		{50, 30, 1, 20, 2},
		{60, 5, 20, 1, 9},
		{70, 40, 3, 9, 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	return lat
}

func lookup(t *testing.T, name multicast.Protocol) *protocol.Protocol {
	t.Helper()
	p, err := protocol.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRegistry(t *testing.T) {
	want := []multicast.Protocol{protocol.FlexCast, protocol.Skeen, protocol.Tree}
	if got := protocol.Names(); !slices.Equal(got, want) {
		t.Errorf("Names() = %v, want %v", got, want)
	}
	for i, p := range protocol.All() {
		if p.Name() != want[i] || p.String() != string(want[i]) {
			t.Errorf("All()[%d] = %s, want %s", i, p, want[i])
		}
		if got := lookup(t, want[i]); got != p {
			t.Errorf("Lookup(%s) = %p, want All()[%d] = %p", want[i], got, i, p)
		}
	}
	for _, tt := range []struct {
		name                        multicast.Protocol
		genuine, needsTree, atEntry bool
	}{
		{protocol.FlexCast, true, false, true},
		{protocol.Skeen, true, false, false},
		{protocol.Tree, false, true, true},
	} {
		p := lookup(t, tt.name)
		if p.Genuine() != tt.genuine || p.NeedsTree() != tt.needsTree || p.DeliversAtEntry() != tt.atEntry {
			t.Errorf("%s: Genuine %v, NeedsTree %v, DeliversAtEntry %v; want %v, %v, %v", tt.name,
				p.Genuine(), p.NeedsTree(), p.DeliversAtEntry(), tt.genuine, tt.needsTree, tt.atEntry)
		}
	}
	// A caller may not change the registry through All's slice.
	all := protocol.All()
	all[0] = nil
	if protocol.All()[0] == nil {
		t.Error("All() returns the registry's own slice")
	}
}

func TestLookupUnknown(t *testing.T) {
	for _, name := range []multicast.Protocol{"paxos", "", "FlexCast"} {
		p, err := protocol.Lookup(name)
		if p != nil || err == nil {
			t.Fatalf("Lookup(%q) = %v, %v; want an error", name, p, err)
		}
		want := `protocol: unknown protocol "` + string(name) + `" (want flexcast, skeen or tree)`
		if err.Error() != want {
			t.Errorf("Lookup(%q): %q, want %q", name, err, want)
		}
		top := testTopology(t)
		if _, err := protocol.New(name, 0, top); err == nil || !strings.Contains(err.Error(), `"`+string(name)+`"`) {
			t.Errorf("New(%q): %v, want an error naming it", name, err)
		}
		if _, err := protocol.Restore(name, 0, top, nil); err == nil || !strings.Contains(err.Error(), `"`+string(name)+`"`) {
			t.Errorf("Restore(%q): %v, want an error naming it", name, err)
		}
	}
}

func TestEntry(t *testing.T) {
	top, lat := testTopology(t), testLatency(t)
	const a, b, c, d = partition.GroupID(0), partition.GroupID(1), partition.GroupID(2), partition.GroupID(3)
	home := protocol.HomeOrigin
	region := func(r string) protocol.Origin { return protocol.Origin{Group: partition.NoGroup, Region: r} }
	cd := partition.SetOf(c, d)
	tests := []struct {
		name  string
		proto multicast.Protocol
		lat   *partition.Latency
		from  protocol.Origin
		dst   partition.GroupSet
		want  partition.GroupID
		// entries: where the core takes the request (the server's check)
		entries partition.GroupSet
	}{
		{"flexcast: the lca", protocol.FlexCast, lat, home(d), cd, c, partition.SetOf(c)},
		{"flexcast: the lca, whatever the client", protocol.FlexCast, lat, region("rx"), partition.SetOf(b, d), b, partition.SetOf(b)},
		{"flexcast: local", protocol.FlexCast, nil, home(a), partition.SetOf(d), d, partition.SetOf(d)},
		{"skeen: the home group when a destination", protocol.Skeen, lat, home(d), cd, d, cd},
		{"skeen: the nearest destination", protocol.Skeen, lat, home(b), cd, d, cd}, // b->d 5 < b->c 30
		{"skeen: nearest above the lowest rank", protocol.Skeen, lat, home(a), partition.SetOf(b, c), b, partition.SetOf(b, c)},
		{"skeen: no matrix: the lowest rank", protocol.Skeen, nil, home(d), cd, c, cd},
		{"skeen: a region without a group", protocol.Skeen, lat, region("rx"), cd, c, cd}, // rx->c 3 < rx->d 9
		{"skeen: a region without a group, nearer d", protocol.Skeen, lat, region("rx"), partition.SetOf(b, d), d, partition.SetOf(b, d)},
		{"skeen: a region not in the matrix", protocol.Skeen, lat, region("nowhere"), partition.SetOf(b, d), b, partition.SetOf(b, d)},
		{"skeen: no region", protocol.Skeen, lat, region(""), partition.SetOf(b, d), b, partition.SetOf(b, d)},
		{"tree: the tree-lca, not a destination", protocol.Tree, lat, home(c), cd, b, partition.SetOf(b)},
		{"tree: the root", protocol.Tree, lat, home(d), partition.SetOf(a, d), a, partition.SetOf(a)},
		{"tree: local", protocol.Tree, lat, home(a), partition.SetOf(d), d, partition.SetOf(d)},
		{"flexcast: no destination", protocol.FlexCast, lat, home(a), 0, partition.NoGroup, 0},
		{"skeen: no destination", protocol.Skeen, lat, home(a), 0, partition.NoGroup, 0},
		{"tree: no destination", protocol.Tree, lat, home(a), 0, partition.NoGroup, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := lookup(t, tt.proto)
			got := p.Entry(top, tt.lat, tt.from, tt.dst)
			if got != tt.want {
				t.Errorf("Entry(from %+v, dst %s) = %d, want %d", tt.from, tt.dst, got, tt.want)
			}
			entries := p.Entries(top, tt.dst)
			if entries != tt.entries {
				t.Errorf("Entries(%s) = %s, want %s", tt.dst, entries, tt.entries)
			}
			if !tt.dst.Empty() && !entries.Has(got) {
				t.Errorf("Entry's choice %d is not among Entries %s: the server would refuse it", got, entries)
			}
		})
	}
}

// TestEntryAccepted: a core takes a request at the group Entry chooses, and
// refuses it, wrapping multicast.ErrNotEntry, at every group Entries leaves
// out.
func TestEntryAccepted(t *testing.T) {
	top, lat := testTopology(t), testLatency(t)
	for _, p := range protocol.All() {
		for dst := partition.GroupSet(1); dst <= top.All(); dst++ {
			for from := range top.Len() {
				entry := p.Entry(top, lat, protocol.HomeOrigin(partition.GroupID(from)), dst)
				entries := p.Entries(top, dst)
				for g := range top.Len() {
					core, err := p.New(partition.GroupID(g), top)
					if err != nil {
						t.Fatal(err)
					}
					m := multicast.Message{ID: multicast.MsgID{Client: 1, Seq: 1}, Dst: dst}
					err = core.Step(multicast.Request(m))
					switch at := partition.GroupID(g); {
					case entries.Has(at) && err != nil:
						t.Errorf("%s: request to %s at %d, one of its entries %s: %v", p, dst, at, entries, err)
					case !entries.Has(at) && err == nil:
						t.Errorf("%s: request to %s at %d, not among its entries %s: accepted", p, dst, at, entries)
					case at == entry && err != nil:
						t.Errorf("%s: request to %s at its entry %d: %v", p, dst, at, err)
					}
				}
			}
		}
	}
}

type snapshotter interface{ AppendSnapshot(b []byte) []byte }

// TestSnapshotRoundTrip: every protocol's cores, stopped halfway through an
// exchange, restore from their snapshots to the same state, and go on to
// the same deliveries.
func TestSnapshotRoundTrip(t *testing.T) {
	top := testTopology(t)
	n := top.Len()
	for _, p := range protocol.All() {
		t.Run(p.String(), func(t *testing.T) {
			cores := make([]multicast.Core, n)
			for g := range cores {
				var err error
				if cores[g], err = p.New(partition.GroupID(g), top); err != nil {
					t.Fatal(err)
				}
			}
			x := &exchange{t: t, delivered: make([][]string, n)}
			dsts := []partition.GroupSet{partition.SetOf(2, 3), partition.SetOf(0, 3), partition.SetOf(1), partition.SetOf(0, 1, 2, 3)}
			for i, dst := range dsts {
				m := multicast.Message{ID: multicast.MsgID{Client: 1, Seq: uint64(i + 1)}, Dst: dst, Payload: []byte{byte(i)}}
				x.step(cores, p.Entry(top, nil, protocol.HomeOrigin(dst.Max()), dst), multicast.Request(m))
			}
			// Halfway: a few envelopes in flight.
			for k := 0; k < 3 && len(x.queue) > 0; k++ {
				x.next(cores)
			}
			if len(x.queue) == 0 {
				t.Fatal("nothing in flight at the snapshot: the test would restore idle cores")
			}
			restored := restoreCores(t, p, top, cores)
			// Both sets of cores finish the exchange from the same queue.
			want, got := x.clone().finish(cores), x.clone().finish(restored)
			for g := range want {
				if !slices.Equal(got[g], want[g]) {
					t.Errorf("group %d delivers %v after a restore, %v without", g, got[g], want[g])
				}
			}
			for i, dst := range dsts {
				for _, g := range dst.Slice() {
					id := multicast.MsgID{Client: 1, Seq: uint64(i + 1)}.String()
					if !slices.Contains(want[g], id) {
						t.Errorf("group %d never delivers %s: %v", g, id, want[g])
					}
				}
			}
		})
	}
}

// exchange is a run of cores whose sends travel on one FIFO queue:
// delivered are the ids each group delivered, in order.
type exchange struct {
	t         *testing.T
	queue     []envelope
	delivered [][]string // by group, in order
}

// envelope is a send in flight from one group to another.
type envelope struct {
	from, to partition.GroupID
	payload  []byte
}

// step steps group g's core of cs with in, and queues its sends and
// records its deliveries.
func (x *exchange) step(cs []multicast.Core, g partition.GroupID, in multicast.Input) {
	x.t.Helper()
	if err := cs[g].Step(in); err != nil {
		x.t.Fatalf("group %d: %v", g, err)
	}
	out := cs[g].Ready()
	for _, s := range out.Sends {
		x.queue = append(x.queue, envelope{g, s.To, s.Payload})
	}
	for _, m := range out.Deliveries {
		x.delivered[g] = append(x.delivered[g], m.ID.String())
	}
}

// next steps the first envelope of the queue at its destination in cs.
func (x *exchange) next(cs []multicast.Core) {
	x.t.Helper()
	e := x.queue[0]
	x.queue = x.queue[1:]
	x.step(cs, e.to, multicast.Envelope(e.from, e.payload))
}

// clone is a copy of x that goes on apart from it.
func (x *exchange) clone() *exchange {
	c := &exchange{t: x.t, queue: slices.Clone(x.queue), delivered: make([][]string, len(x.delivered))}
	for g := range x.delivered {
		c.delivered[g] = slices.Clone(x.delivered[g])
	}
	return c
}

// finish steps envelopes in cs until none is left, at most 1000, and
// returns every group's deliveries.
func (x *exchange) finish(cs []multicast.Core) [][]string {
	x.t.Helper()
	for steps := 0; len(x.queue) > 0; steps++ {
		if steps > 1000 {
			x.t.Fatal("no quiescence after 1000 envelopes")
		}
		x.next(cs)
	}
	return x.delivered
}

// restoreCores restores every core of cores from its snapshot, and checks
// that each restored core snapshots to the same bytes.
func restoreCores(t *testing.T, p *protocol.Protocol, top *partition.Topology, cores []multicast.Core) []multicast.Core {
	t.Helper()
	restored := make([]multicast.Core, len(cores))
	for g := range cores {
		sn, ok := cores[g].(snapshotter)
		if !ok {
			t.Fatalf("%T has no AppendSnapshot", cores[g])
		}
		b := sn.AppendSnapshot(nil)
		r, err := p.Restore(partition.GroupID(g), top, b)
		if err != nil {
			t.Fatalf("group %d: Restore: %v", g, err)
		}
		if again := r.(snapshotter).AppendSnapshot(nil); !bytes.Equal(again, b) {
			t.Fatalf("group %d: the restored core snapshots to %x, want %x", g, again, b)
		}
		restored[g] = r
	}
	return restored
}
