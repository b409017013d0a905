package skeen

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/check"
	"github.com/flexkv/flexkv/partition"
)

// groupNames name test groups A, B, C, ... by rank.
const groupNames = "ABCDEFGHIJKLMNOP"

func testTopology(t testing.TB, n int) *partition.Topology {
	t.Helper()
	groups := make([]partition.Group, n)
	for i := range groups {
		groups[i] = partition.Group{Name: groupNames[i : i+1]}
	}
	top, err := partition.NewTopology(partition.Spec{Groups: groups})
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// cluster drives one core per group by hand. Every link between two groups
// is a FIFO queue; the test picks which link moves next.
type cluster struct {
	t      testing.TB
	top    *partition.Topology
	cores  []*Core
	links  [][][]multicast.Send     // links[from][to], oldest first
	orders [][]multicast.Message    // delivery order of each group
	sent   map[multicast.MsgID]bool // requests accepted
	msgs   []multicast.Message      // requests accepted, in order
	check  bool                     // check invariants after every step
}

func newCluster(t testing.TB, n, pendingMax int) *cluster {
	t.Helper()
	cl := &cluster{
		t:      t,
		top:    testTopology(t, n),
		cores:  make([]*Core, n),
		links:  make([][][]multicast.Send, n),
		orders: make([][]multicast.Message, n),
		sent:   make(map[multicast.MsgID]bool),
		check:  true,
	}
	for g := range n {
		c, err := New(Config{Self: partition.GroupID(g), Topology: cl.top, PendingMax: pendingMax})
		if err != nil {
			t.Fatal(err)
		}
		cl.cores[g] = c
		cl.links[g] = make([][]multicast.Send, n)
	}
	return cl
}

// request steps m at group at and collects the outputs.
func (cl *cluster) request(at partition.GroupID, m multicast.Message) ([]multicast.Send, []multicast.Message, error) {
	cl.t.Helper()
	if err := cl.cores[at].Step(multicast.Request(m)); err != nil {
		if out := cl.cores[at].Ready(); !out.Empty() {
			cl.t.Fatalf("group %d: failed request %s produced output %+v", at, m.ID, out)
		}
		return nil, nil, err
	}
	if !cl.sent[m.ID] {
		cl.sent[m.ID] = true
		cl.msgs = append(cl.msgs, m)
	}
	sends, dels := cl.collect(at)
	return sends, dels, nil
}

// recv moves the oldest envelope of link from->to and collects the outputs.
func (cl *cluster) recv(from, to partition.GroupID) ([]multicast.Send, []multicast.Message) {
	cl.t.Helper()
	q := cl.links[from][to]
	if len(q) == 0 {
		cl.t.Fatalf("link %s->%s is empty", cl.top.Name(from), cl.top.Name(to))
	}
	s := q[0]
	cl.links[from][to] = q[1:]
	if err := cl.cores[to].Step(multicast.Envelope(from, s.Payload)); err != nil {
		cl.t.Fatalf("group %s: envelope %s %s from %s: %v", cl.top.Name(to), s.Kind, s.About, cl.top.Name(from), err)
	}
	return cl.collect(to)
}

// collect drains g's Ready into the links and g's delivery order.
func (cl *cluster) collect(g partition.GroupID) ([]multicast.Send, []multicast.Message) {
	cl.t.Helper()
	out := cl.cores[g].Ready()
	for _, s := range out.Sends {
		if !cl.top.Valid(s.To) || s.To == g {
			cl.t.Fatalf("group %d sends to group %d", g, s.To)
		}
		cl.links[g][s.To] = append(cl.links[g][s.To], s)
	}
	cl.orders[g] = append(cl.orders[g], out.Deliveries...)
	if cl.check {
		if err := cl.cores[g].checkInvariants(); err != nil {
			cl.t.Fatalf("group %s: %v", cl.top.Name(g), err)
		}
	}
	return out.Sends, out.Deliveries
}

// busy returns the non-empty links in (from, to) order.
func (cl *cluster) busy() [][2]partition.GroupID {
	var out [][2]partition.GroupID
	for from := range cl.links {
		for to, q := range cl.links[from] {
			if len(q) > 0 {
				out = append(out, [2]partition.GroupID{partition.GroupID(from), partition.GroupID(to)})
			}
		}
	}
	return out
}

// drain moves envelopes, one per busy link in turn, until none is left.
func (cl *cluster) drain() {
	for {
		links := cl.busy()
		if len(links) == 0 {
			return
		}
		for _, l := range links {
			cl.recv(l[0], l[1])
		}
	}
}

// orderIDs returns the delivery order of g as ids.
func (cl *cluster) orderIDs(g partition.GroupID) []multicast.MsgID {
	ids := make([]multicast.MsgID, len(cl.orders[g]))
	for i, m := range cl.orders[g] {
		ids[i] = m.ID
	}
	return ids
}

// verify checks the delivery orders with multicast/check (DESIGN 3.1):
// integrity, prefix order and acyclic order, and, when complete is set,
// validity and agreement (every message accepted was delivered at each of
// its destinations).
func (cl *cluster) verify(complete bool) error {
	return checkOrders(cl.top, cl.msgs, cl.orders, complete)
}

func checkOrders(top *partition.Topology, msgs []multicast.Message, orders [][]multicast.Message, complete bool) error {
	names := func(dst partition.GroupSet) []string {
		var out []string
		for _, g := range dst.Slice() {
			out = append(out, top.Name(g))
		}
		return out
	}
	var recs []check.Record
	for _, m := range msgs {
		recs = append(recs, check.Record{Ev: check.EvMulticast, ID: m.ID.String(), Dst: names(m.Dst)})
	}
	for g, order := range orders {
		for _, m := range order {
			recs = append(recs, check.Record{Ev: check.EvDeliver, Group: top.Name(partition.GroupID(g)), Replica: "r1",
				ID: m.ID.String(), Dst: names(m.Dst)})
		}
	}
	if rep := check.Check(recs, check.Options{Complete: complete}); !rep.OK() {
		return errors.New(rep.Summary())
	}
	return nil
}

// checkInvariants verifies the core's internal invariants: counts, entry
// shapes, the proposal order of the undecided queue, the heap, and that
// nothing deliverable is left undelivered.
func (c *Core) checkInvariants() error {
	undecided, buffered, decided := 0, 0, 0
	for id, e := range c.entries {
		switch {
		case e.msg.ID != id:
			return fmt.Errorf("entry %s is filed under %s", e.msg.ID, id)
		case e.got&^e.msg.Dst != 0:
			return fmt.Errorf("%s: proposals from %s, dst %s", id, e.got, e.msg.Dst)
		case e.ts/c.n > c.clock:
			return fmt.Errorf("%s: proposal %d beyond clock %d", id, e.ts, c.clock)
		case !e.known && (e.got.Empty() || e.got.Has(c.self) || e.index != -1):
			return fmt.Errorf("%s: unknown entry with proposals %s, heap index %d", id, e.got, e.index)
		case e.known && (!e.got.Has(c.self) || e.own%c.n != uint64(c.self) || e.ts < e.own):
			return fmt.Errorf("%s: known entry with proposals %s, own %d, ts %d", id, e.got, e.own, e.ts)
		case e.isDecided() && (e.index < 0 || e.index >= len(c.decided) || c.decided[e.index] != e):
			return fmt.Errorf("%s: decided but not in the heap (index %d)", id, e.index)
		case !e.isDecided() && e.index != -1:
			return fmt.Errorf("%s: undecided but at heap index %d", id, e.index)
		}
		switch {
		case !e.known:
			buffered++
		case e.isDecided():
			decided++
		default:
			undecided++
		}
	}
	if undecided != c.undecidedCount || buffered != c.bufferedCount || decided != c.decided.Len() {
		return fmt.Errorf("counts: undecided %d (counted %d), buffered %d (counted %d), decided %d (heap %d)",
			undecided, c.undecidedCount, buffered, c.bufferedCount, decided, c.decided.Len())
	}
	if c.pendingPeak < len(c.entries) {
		return fmt.Errorf("peak %d below pending %d", c.pendingPeak, len(c.entries))
	}
	inQueue := 0
	for i, e := range c.undecided {
		if c.entries[e.msg.ID] != e {
			return fmt.Errorf("undecided queue holds %s, which is not pending", e.msg.ID)
		}
		if i > 0 && c.undecided[i-1].own >= e.own {
			return fmt.Errorf("undecided queue out of proposal order at %d", i)
		}
		if !e.isDecided() {
			inQueue++
		}
	}
	if inQueue != undecided {
		return fmt.Errorf("undecided queue holds %d undecided messages, want %d", inQueue, undecided)
	}
	for i := 1; i < len(c.decided); i++ {
		if c.decided.Less(i, (i-1)/2) {
			return fmt.Errorf("decided heap out of order at %d", i)
		}
	}
	if len(c.decided) > 0 {
		bound := uint64(1<<64 - 1)
		for _, e := range c.undecided {
			if !e.isDecided() {
				bound = e.own
				break
			}
		}
		if c.decided[0].ts < bound {
			return fmt.Errorf("%s is deliverable (ts %d, smallest undecided proposal %d) but pending",
				c.decided[0].msg.ID, c.decided[0].ts, bound)
		}
	}
	return nil
}

// dumpState encodes the whole state, in sorted order, and the undrained
// output: two cores with the same dump behave the same from then on.
func (c *Core) dumpState() []byte {
	b := wire.AppendUvarint(nil, uint64(c.self))
	for _, v := range []uint64{c.n, uint64(c.pendingMax), c.clock, uint64(c.undecidedCount),
		uint64(c.bufferedCount), uint64(c.pendingPeak), c.deliveredCount} {
		b = wire.AppendUvarint(b, v)
	}
	ids := make([]multicast.MsgID, 0, len(c.entries))
	for id := range c.entries {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(x, y multicast.MsgID) int {
		switch {
		case x.Less(y):
			return -1
		case y.Less(x):
			return 1
		}
		return 0
	})
	for _, id := range ids {
		e := c.entries[id]
		b = wire.AppendMessage(b, e.msg)
		known := uint64(0)
		if e.known {
			known = 1
		}
		for _, v := range []uint64{known, uint64(e.got), e.own, e.ts, uint64(e.index + 1)} {
			b = wire.AppendUvarint(b, v)
		}
	}
	for _, e := range c.undecided {
		b = wire.AppendMsgID(b, e.msg.ID)
	}
	for _, e := range c.decided {
		b = wire.AppendMsgID(b, e.msg.ID)
	}
	for _, s := range c.out.Sends {
		b = wire.AppendUvarint(b, uint64(s.To))
		b = wire.AppendBytes(b, s.Payload)
	}
	for _, m := range c.out.Deliveries {
		b = wire.AppendMessage(b, m)
	}
	return b
}

func msg(client, seq uint64, dst ...partition.GroupID) multicast.Message {
	return multicast.Message{
		ID:      multicast.MsgID{Client: client, Seq: seq},
		Dst:     partition.SetOf(dst...),
		Payload: []byte(fmt.Sprintf("payload %d.%d", client, seq)),
	}
}

func mustBe(t testing.TB, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("got error %v, want %v", err, want)
	}
}

// TestCheckOrdersFindsViolations: the checker glue reports a disagreement, a
// cycle that no pair of groups shows, and a missing delivery.
func TestCheckOrdersFindsViolations(t *testing.T) {
	top := testTopology(t, 3)
	m1, m2, m3, m4 := msg(1, 1, 0, 1), msg(1, 2, 1, 2), msg(1, 3, 0, 2), msg(1, 4, 0, 1)
	msgs := []multicast.Message{m1, m2, m3, m4}
	for _, tc := range []struct {
		name     string
		orders   [][]multicast.Message
		complete bool
		want     string
	}{
		{"pairwise disagreement", [][]multicast.Message{{m1, m4}, {m4, m1}, nil}, false, check.PrefixOrder},
		{"cycle", [][]multicast.Message{{m1, m3}, {m2, m1}, {m3, m2}}, false, check.AcyclicOrder},
		{"missing delivery", [][]multicast.Message{{m1, m3, m4}, {m1, m2, m4}, {m2}}, true, check.Agreement},
	} {
		err := checkOrders(top, msgs, tc.orders, tc.complete)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want a %s violation", tc.name, err, tc.want)
		}
	}
	if err := checkOrders(top, msgs, [][]multicast.Message{{m1, m3, m4}, {m1, m2, m4}, {m2, m3}}, true); err != nil {
		t.Errorf("a correct execution: %v", err)
	}
}
