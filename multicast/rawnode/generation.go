package rawnode

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// Generations of the core (DESIGN 14: a change of the overlay).
//
// FlexCast and the tree protocol order by the overlay: a change of the
// ranks or of the tree starts a new core at the cut, at every group. A
// generation is one core and the epoch it started at (its from); the
// bootstrap core is generation 1. The layer above decides at each change
// whether a new generation starts (Builder.Begin: a change that keeps
// the overlay keeps the core, and Skeen keeps its core across every
// change).
//
// Ranks. A generation's core numbers the groups by their rank in its epoch
// (partition.Topology.RankSpace), so that its lca is again the smallest
// number; the node translates at its edges: the destinations of a request
// and of a delivery, the group of an envelope sent and received.
//
// Envelopes. Every envelope of a core names its generation: tagCore
// envelopes are generation 1's (the bytes of a cluster that never changed
// its overlay are what they were), tagCoreGen ones carry the generation's
// from after the tag. A group receives an envelope of
//   - its current generation: stepped into the current core;
//   - an older one: stepped into that generation's retiring core, if the
//     group still keeps it, else dropped (nobody needs it, see below);
//   - a newer one: never, from a correct sender, which sends an envelope
//     of a generation only to groups that said they started it (below):
//     rejected like a malformed one.
//
// Holding. A group holds its envelopes for a group that has not said it
// started their generation, in order, and sends them when it says so.
// They count like a backlog: past the channel's BacklogBytesMax held for
// one group, the node refuses requests (Busy) as it does for a group that
// does not acknowledge. So a group slow to deliver a change (cut off while
// it was under way) makes the others hold, bounded, what they would send
// it, and never buffers what it cannot step yet.
//
// Retiring. At its delivery of the change a group has delivered every
// message of the ending generation addressed to it (prefix order; the
// stop-sign), and a retiring core delivering anything is a bug the node
// panics on. Other groups may still need its answers (a FlexCast ack or
// notification about a message they have not delivered): the old core is
// kept, stepped with the old generation's envelopes and not ticked, and
// its sends go out tagged with its generation. Each group, on starting a
// generation, tells every other group so (tagStarted, in the background); a
// group drops a retiring core once every other group has said so: each
// has then delivered the change, hence everything of the old generation
// addressed to it, and needs nothing more from it.

// The tags of generation envelopes on the channel (node.go has tagCore and
// tagApp).
const (
	tagCoreGen byte = 2 // uvarint generation, then a core envelope
	tagStarted byte = 3 // uvarint generation: the sender started it
)

// Builder makes the cores of new generations. The layer above implements
// it: it knows the protocol, the topology and how a change's configuration
// reads. Its methods must be deterministic.
type Builder interface {
	// Begin is called at the delivery of every change, c: it returns the
	// core of the generation that c starts, with its ranks, or a nil core
	// when c keeps the current core. The core must have no output waiting
	// in Ready.
	Begin(c Change) (multicast.Core, partition.Ranks, error)
	// RestoreCore returns the core of generation from, restored from its
	// snapshot (the snapshotter encoding of the core), with its ranks.
	RestoreCore(from uint64, b []byte) (multicast.Core, partition.Ranks, error)
}

// generation is a core and the epoch it started at.
type generation struct {
	from  uint64
	core  multicast.Core
	ranks partition.Ranks
}

// heldEnvelope is an envelope for a group that has not said it started the
// envelope's generation.
type heldEnvelope struct {
	to         partition.GroupID
	gen        uint64
	payload    []byte // tagged for the channel
	background bool
}

// SetBuilder sets the builder of new generations. Without one, every
// change keeps the core.
func (n *Node) SetBuilder(b Builder) { n.builder = b }

// Core returns the current generation's core, for reads (its Stats).
func (n *Node) Core() multicast.Core { return n.cur.core }

// Generation returns the epoch the current core started at, and its ranks.
func (n *Node) Generation() (uint64, partition.Ranks) { return n.cur.from, n.cur.ranks }

// Retiring returns the number of older cores the node keeps.
func (n *Node) Retiring() int { return len(n.retiring) }

// stepEnvelope steps an envelope from group from, tagged for generation
// gen, into the core of that generation.
func (n *Node) stepEnvelope(from partition.GroupID, gen uint64, payload []byte) error {
	switch {
	case gen == n.cur.from:
		err := n.cur.core.Step(multicast.Envelope(n.cur.ranks.Rank(from), payload))
		n.drainCore()
		return err
	case gen > n.cur.from:
		return fmt.Errorf("%w: node: envelope from group %d of generation %d, which this group has not started (at %d)", multicast.ErrInvalid, from, gen, n.cur.from)
	}
	i := slices.IndexFunc(n.retiring, func(g generation) bool { return g.from == gen })
	if i < 0 {
		n.dropped++
		return nil
	}
	g := &n.retiring[i]
	err := g.core.Step(multicast.Envelope(g.ranks.Rank(from), payload))
	n.drainRetiring(g)
	return err
}

// started records that group from started generation gen, hence left
// every older one, and sends it what was held for it up to gen.
func (n *Node) started(from partition.GroupID, gen uint64) {
	if n.peerGen == nil {
		n.peerGen = make([]uint64, n.ch.Config().Groups)
	}
	n.peerGen[from] = max(n.peerGen[from], gen)
	n.dropRetired()
	keep := n.held[:0]
	for _, h := range n.held {
		switch {
		case h.to != from || h.gen > n.peerGen[from]:
			keep = append(keep, h)
		case h.background:
			n.ch.SendBackground(h.to, h.payload)
		default:
			n.ch.Send(h.to, h.payload)
		}
	}
	clear(n.held[len(keep):])
	n.held = keep
}

// peerStarted returns the latest generation group h said it started (1,
// the bootstrap one, before it said any).
func (n *Node) peerStarted(h partition.GroupID) uint64 {
	if n.peerGen == nil || n.peerGen[h] == 0 {
		return 1
	}
	return n.peerGen[h]
}

// heldBytes returns the bytes held for group h.
func (n *Node) heldBytes(h partition.GroupID) int {
	b := 0
	for _, e := range n.held {
		if e.to == h {
			b += len(e.payload)
		}
	}
	return b
}

// HeldLen returns the envelopes held for groups that have not started
// their generation.
func (n *Node) HeldLen() int { return len(n.held) }

// heldBusy returns the lowest group for which more than the channel's
// BacklogBytesMax is held.
func (n *Node) heldBusy() (partition.GroupID, bool) {
	if len(n.held) == 0 {
		return partition.NoGroup, false
	}
	limit := n.ch.Config().BacklogBytesMax
	for _, h := range n.others().Slice() {
		if n.heldBytes(h) > limit {
			return h, true
		}
	}
	return partition.NoGroup, false
}

// others returns every group but this one.
func (n *Node) others() partition.GroupSet {
	cfg := n.ch.Config()
	return partition.AllGroups(cfg.Groups).Remove(cfg.Self)
}

// dropRetired forgets the retiring cores that every other group left: each
// started a later generation.
func (n *Node) dropRetired() {
	n.retiring = slices.DeleteFunc(n.retiring, func(g generation) bool {
		for _, h := range n.others().Slice() {
			if n.peerGen == nil || n.peerGen[h] <= g.from {
				return false
			}
		}
		return true
	})
}

// rebuild starts the generation of change c, if the builder makes one:
// the current core retires, and every other group is told.
func (n *Node) rebuild(c Change) {
	if n.builder == nil {
		return
	}
	core, ranks, err := n.builder.Begin(c)
	if err != nil {
		// The group that took the change checked it.
		panic(fmt.Sprintf("node: change of epoch %d: %v", c.Epoch, err))
	}
	if core == nil {
		return
	}
	if out := core.Ready(); !out.Empty() {
		panic(fmt.Sprintf("node: new core of epoch %d has output waiting", c.Epoch+1))
	}
	old := n.cur
	n.cur = generation{from: c.Epoch + 1, core: core, ranks: ranks}
	n.retiring = append(n.retiring, old)
	for _, to := range n.others().Slice() {
		n.ch.SendBackground(to, wire.AppendUvarint([]byte{tagStarted}, n.cur.from))
	}
	n.dropRetired()
}

// drainRetiring routes what a retiring core produced: its sends, tagged
// with its generation. It delivers nothing (see the comment above).
func (n *Node) drainRetiring(g *generation) {
	out := g.core.Ready()
	if len(out.Deliveries) != 0 {
		panic(fmt.Sprintf("node: the core of generation %d delivered %s after this group left it", g.from, out.Deliveries[0].ID))
	}
	n.sendAll(g, out.Sends)
}

// sendAll hands the sends of generation g's core to the channel, in the
// bootstrap numbering.
func (n *Node) sendAll(g *generation, sends []multicast.Send) {
	for i := range sends {
		s := &sends[i]
		s.To = g.ranks.Group(s.To)
		payload := coreEnvelope(g.from, s.Payload)
		if n.peerStarted(s.To) < g.from {
			n.held = append(n.held, heldEnvelope{to: s.To, gen: g.from, payload: payload, background: s.Background})
			continue
		}
		if s.Background {
			n.ch.SendBackground(s.To, payload)
		} else {
			n.ch.Send(s.To, payload)
		}
	}
	n.out.Sends = append(n.out.Sends, sends...)
}

// coreEnvelope returns a core's envelope of generation gen, tagged for the
// channel, in a new slice (the channel keeps it).
func coreEnvelope(gen uint64, payload []byte) []byte {
	if gen == 1 {
		return tagged(tagCore, payload)
	}
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(payload))
	b = append(b, tagCoreGen)
	b = wire.AppendUvarint(b, gen)
	return append(b, payload...)
}

// appendGenerations appends the generations' state to a snapshot: the
// current generation (its core is the caller's to encode), the latest
// generation each group started, the retiring ones with their cores, and
// the envelopes held.
func (n *Node) appendGenerations(b []byte) []byte {
	b = wire.AppendUvarint(b, n.cur.from)
	b = wire.AppendUvarint(b, uint64(len(n.peerGen)))
	for _, g := range n.peerGen {
		b = wire.AppendUvarint(b, g)
	}
	b = wire.AppendUvarint(b, uint64(len(n.retiring)))
	for _, g := range n.retiring {
		b = wire.AppendUvarint(b, g.from)
		sn, ok := g.core.(interface{ AppendSnapshot([]byte) []byte })
		if !ok {
			panic(fmt.Sprintf("node: the core of generation %d cannot be snapshotted", g.from))
		}
		b = wire.AppendBytes(b, sn.AppendSnapshot(nil))
	}
	b = wire.AppendUvarint(b, uint64(len(n.held)))
	for _, h := range n.held {
		b = wire.AppendUvarint(b, uint64(h.to))
		b = wire.AppendUvarint(b, h.gen)
		bg := uint64(0)
		if h.background {
			bg = 1
		}
		b = wire.AppendUvarint(b, bg)
		b = wire.AppendBytes(b, h.payload)
	}
	return wire.AppendUvarint(b, n.dropped)
}

// decodeGenerations reads what appendGenerations wrote into n, whose
// current core the caller restored; the retiring cores are restored by the
// builder.
func (n *Node) decodeGenerations(d *wire.Decoder, b Builder) {
	groups := n.ch.Config().Groups
	from := d.Uvarint()
	if d.Err() == nil && (from == 0 || from > n.epoch) {
		d.Fail("generation %d (epoch %d)", from, n.epoch)
		return
	}
	n.cur.from = from
	if k := d.Count(1); k > 0 {
		if k != groups && d.Err() == nil {
			d.Fail("generations of %d groups, want %d", k, groups)
			return
		}
		n.peerGen = make([]uint64, k)
		for h := range n.peerGen {
			n.peerGen[h] = d.Uvarint()
		}
	}
	k := d.Count(2)
	if k > 0 && b == nil && d.Err() == nil {
		d.Fail("%d retiring generations and no builder", k)
		return
	}
	for range k {
		g := generation{from: d.Uvarint()}
		snap := d.Bytes()
		if d.Err() != nil {
			return
		}
		if g.from == 0 || g.from >= n.cur.from || (len(n.retiring) > 0 && g.from <= n.retiring[len(n.retiring)-1].from) {
			d.Fail("retiring generation %d (current %d)", g.from, n.cur.from)
			return
		}
		core, ranks, err := b.RestoreCore(g.from, snap)
		if err != nil {
			d.Fail("retiring generation %d: %v", g.from, err)
			return
		}
		g.core, g.ranks = core, ranks
		n.retiring = append(n.retiring, g)
	}
	k = d.Count(4)
	for range k {
		h := heldEnvelope{to: partition.GroupID(d.Uvarint()), gen: d.Uvarint()}
		bg := d.Uvarint()
		h.payload = slices.Clone(d.Bytes())
		h.background = bg == 1
		if d.Err() != nil {
			return
		}
		if h.to < 0 || int(h.to) >= groups || h.to == n.ch.Config().Self || h.gen < 2 || h.gen > n.cur.from || bg > 1 || h.gen <= n.peerStarted(h.to) {
			d.Fail("envelope held for group %d of generation %d (current %d)", h.to, h.gen, n.cur.from)
			return
		}
		n.held = append(n.held, h)
	}
	n.dropped = d.Uvarint()
}
