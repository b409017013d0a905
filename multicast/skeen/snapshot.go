package skeen

import (
	"bytes"
	"cmp"
	"container/heap"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// The snapshot of a core opens with snapshotMagic, which names the protocol
// (so that another core's snapshot is refused), and snapshotVersion.
const (
	snapshotMagic   = 'S'
	snapshotVersion = 1
)

// Snapshot layout. Integers are unsigned varints, ids two of them, sets one
// (package wire); the known flag is one byte, 0 or 1.
//
//	magic, version, groups n, self
//	clock, delivered count, pending peak
//	entries: count, then by increasing id: id, dst, got, ts, known flag,
//	         and if known: own proposal, payload
//
// The rest is derived, and rebuilt by Restore: the counts; the undecided
// queue, which holds the undecided messages in the order of their own
// proposals (the core's queue may also hold decided messages not yet
// dropped from its front, which deliver skips exactly as if they were
// absent); and the decided heap, whose layout changes nothing, since its
// order (final timestamp, then id) is total.

// AppendSnapshot appends a deterministic encoding of the core's state: equal
// states encode to equal bytes on every replica (entries are written in id
// order). It encodes the state only, not the output waiting for Ready, so it
// panics if Ready has output left to drain: those sends and deliveries would
// be lost.
func (c *Core) AppendSnapshot(b []byte) []byte {
	if !c.out.Empty() {
		panic(fmt.Sprintf("skeen: snapshot with undrained output (%d sends, %d deliveries)", len(c.out.Sends), len(c.out.Deliveries)))
	}
	b = wire.AppendSnapshotHeader(b, wire.SnapshotHeader{Magic: snapshotMagic, Version: snapshotVersion, Groups: int(c.n), Self: c.self})
	b = wire.AppendUvarint(b, c.clock)
	b = wire.AppendUvarint(b, c.deliveredCount)
	b = wire.AppendUvarint(b, uint64(c.pendingPeak))
	ids := slices.SortedFunc(maps.Keys(c.entries), compareIDs)
	b = wire.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		e := c.entries[id]
		b = multicast.AppendMsgID(b, id)
		b = wire.AppendUvarint(b, uint64(e.msg.Dst))
		b = wire.AppendUvarint(b, uint64(e.got))
		b = wire.AppendUvarint(b, e.ts)
		if !e.known {
			b = append(b, 0)
			continue
		}
		b = append(b, 1)
		b = wire.AppendUvarint(b, e.own)
		b = wire.AppendBytes(b, e.msg.Payload)
	}
	return b
}

// Restore returns a core configured by cfg, as New would, in the state that
// AppendSnapshot encoded in b. The snapshot must come from the same group
// (cfg.Self) of a cluster of the same size; it may hold more messages than
// cfg.PendingMax, as a core may (see Step). Restore checks every invariant
// of the state that holds after any sequence of inputs Step accepts. A
// corrupt snapshot, or one that does not fit cfg, yields an error wrapping
// wire.ErrCorrupt; an invalid cfg, New's error. Restore never panics, and
// the core keeps no reference to b (an empty payload comes back nil: the
// encoding does not tell nil from empty).
func Restore(cfg Config, b []byte) (*Core, error) {
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := c.restore(wire.NewDecoder(b)); err != nil {
		return nil, fmt.Errorf("skeen: restore group %d: %w", cfg.Self, err)
	}
	return c, nil
}

func (c *Core) restore(d *wire.Decoder) error {
	d.SnapshotHeader(wire.SnapshotHeader{Magic: snapshotMagic, Version: snapshotVersion, Groups: int(c.n), Self: c.self}, "skeen")
	c.clock = d.Uvarint()
	c.deliveredCount = d.Uvarint()
	if peak := d.Uvarint(); peak <= math.MaxInt {
		c.pendingPeak = int(peak)
	} else {
		d.Fail("pending peak %d overflows", peak)
	}
	cnt := d.Count(6)
	var prev multicast.MsgID
	for i := 0; i < cnt && d.Err() == nil; i++ {
		id := multicast.DecodeMsgID(d)
		if i > 0 && d.Err() == nil && compareIDs(prev, id) >= 0 {
			d.Fail("entries out of order at %s", id)
		}
		prev = id
		e := &entry{index: -1}
		e.msg.ID = id
		e.msg.Dst = d.GroupSet(int(c.n))
		e.got = d.GroupSet(int(c.n))
		e.ts = d.Uvarint()
		switch d.Byte() {
		case 0:
		case 1:
			e.known = true
			e.own = d.Uvarint()
			if p := d.Bytes(); len(p) > 0 {
				e.msg.Payload = bytes.Clone(p)
			}
		default:
			d.Fail("entry %s: bad known flag", id)
		}
		if d.Err() == nil {
			c.checkEntry(d, e)
		}
		c.entries[id] = e
	}
	if err := d.Finish(); err != nil {
		return err
	}
	c.rebuild(d)
	return d.Err()
}

// checkEntry checks what request, relay, proposal and receive guarantee of
// an entry.
func (c *Core) checkEntry(d *wire.Decoder, e *entry) {
	id, dst := e.msg.ID, e.msg.Dst
	switch {
	case id.IsFlush():
		d.Fail("entry for reserved id %s", id)
	case !dst.Has(c.self):
		d.Fail("entry %s to %s at group %d, not a destination", id, dst, c.self)
	case e.got&^dst != 0:
		d.Fail("entry %s to %s holds proposals of %s", id, dst, e.got)
	case !e.got.Has(partition.GroupID(e.ts % c.n)):
		// ts is the largest proposal held, and a proposal of group g is g
		// modulo n.
		d.Fail("entry %s: largest proposal %d from none of %s", id, e.ts, e.got)
	case e.ts/c.n > c.clock:
		d.Fail("entry %s: proposal %d beyond the clock %d", id, e.ts, c.clock)
	case !e.known && (e.got.Empty() || e.got.Has(c.self)):
		d.Fail("entry %s buffered with proposals from %s", id, e.got)
	case !e.known && e.ts > proposalMax:
		d.Fail("entry %s buffered with proposal %d beyond %d", id, e.ts, uint64(proposalMax))
	case e.known && (!e.got.Has(c.self) || e.own%c.n != uint64(c.self) || e.own > e.ts || e.own/c.n > c.clock):
		d.Fail("entry %s: own proposal %d, largest %d, proposals from %s, clock %d", id, e.own, e.ts, e.got, c.clock)
	case e.known && e.ts > proposalMax && e.ts != e.own:
		// Proposals from others are at most proposalMax.
		d.Fail("entry %s: proposal %d beyond %d is not its own", id, e.ts, uint64(proposalMax))
	}
}

// rebuild derives the counts, the undecided queue and the decided heap from
// the entries, and checks what holds of the whole state between steps.
func (c *Core) rebuild(d *wire.Decoder) {
	// Known messages in the order of their own proposals, which are
	// distinct: each receive proposes a new clock value.
	var known []*entry
	for _, id := range slices.SortedFunc(maps.Keys(c.entries), compareIDs) {
		if e := c.entries[id]; e.known {
			known = append(known, e)
		} else {
			c.bufferedCount++
		}
	}
	slices.SortFunc(known, func(x, y *entry) int { return cmp.Compare(x.own, y.own) })
	for i, e := range known {
		if i > 0 && known[i-1].own == e.own {
			d.Fail("messages %s and %s share own proposal %d", known[i-1].msg.ID, e.msg.ID, e.own)
			return
		}
		if e.isDecided() {
			e.index = len(c.decided)
			c.decided = append(c.decided, e)
		} else {
			c.undecidedCount++
			c.undecided = append(c.undecided, e)
		}
	}
	heap.Init(&c.decided)
	if len(c.decided) > 0 && (len(c.undecided) == 0 || c.undecided[0].own >= c.decided[0].ts) {
		// deliver runs after every decision and hands out all it may.
		d.Fail("message %s is deliverable", c.decided[0].msg.ID)
		return
	}
	if c.pendingPeak < len(c.entries) {
		d.Fail("pending peak %d below the %d messages held", c.pendingPeak, len(c.entries))
		return
	}
	// The clock only moves up to an accepted proposal (at most proposalMax)
	// or by one per message received, and each of those is held or was
	// delivered; the bound also keeps propose from running out of clock.
	received := min(c.deliveredCount, math.MaxUint64/4) + uint64(len(known))
	if c.clock > uint64(proposalMax)/c.n+received || c.clock >= (math.MaxUint64-uint64(c.self))/c.n {
		d.Fail("clock %d beyond what %d messages received could reach", c.clock, received)
	}
}

// compareIDs orders ids as multicast.MsgID.Less does.
func compareIDs(x, y multicast.MsgID) int {
	if c := cmp.Compare(x.Client, y.Client); c != 0 {
		return c
	}
	return cmp.Compare(x.Seq, y.Seq)
}
