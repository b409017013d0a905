package skeen

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/internal/simnet"
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

// cluster drives one core per group by hand over FIFO links: the test
// picks which link moves next (simnet.Cores), and every core's invariants
// are checked after each of its steps unless Check is cleared.
type cluster = simnet.Cores[*Core]

func newCluster(t testing.TB, n, pendingMax int) *cluster {
	t.Helper()
	top := testTopology(t, n)
	cl := simnet.NewCores(t, top, func(g partition.GroupID) (*Core, error) {
		return New(Config{Self: g, Topology: top, PendingMax: pendingMax})
	})
	cl.Check = func(_ partition.GroupID, c *Core, _ multicast.Output) error { return c.checkInvariants() }
	return cl
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
		b = multicast.AppendMessage(b, e.msg)
		known := uint64(0)
		if e.known {
			known = 1
		}
		for _, v := range []uint64{known, uint64(e.got), e.own, e.ts, uint64(e.index + 1)} {
			b = wire.AppendUvarint(b, v)
		}
	}
	for _, e := range c.undecided {
		b = multicast.AppendMsgID(b, e.msg.ID)
	}
	for _, e := range c.decided {
		b = multicast.AppendMsgID(b, e.msg.ID)
	}
	for _, s := range c.out.Sends {
		b = wire.AppendUvarint(b, uint64(s.To))
		b = wire.AppendBytes(b, s.Payload)
	}
	for _, m := range c.out.Deliveries {
		b = multicast.AppendMessage(b, m)
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
