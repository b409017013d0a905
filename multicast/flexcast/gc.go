package flexcast

import (
	"slices"

	"github.com/flexkv/flexkv/internal/invariants"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// Garbage collection: what may be dropped from the histories, and how the
// groups learn it without holding back any message.
//
// Write O_g for g's delivery order (global messages only), and pos_g(e) for
// e's position in it, from 0. A cut is a vector S of positions, one per
// group; it is closed when for every group o and every entry e of O_o
// below S_o, every destination d of e delivered e below S_d. An entry is
// stable when some closed cut holds it; the union (componentwise maximum)
// of closed cuts is closed, so the stable entries form the greatest closed
// cut, which only grows. Then:
//
//  1. A stable entry is delivered by all its destinations (the cut is
//     closed), so it is nobody's open dependency and no group waits for
//     any envelope about it.
//  2. The stable entries of a chain are a prefix of it, and every
//     predecessor of a stable node in any precedence graph is stable: an
//     edge u -> v joins consecutive deliveries of some group d, and v
//     below S_d puts u below S_d. So no path between two unstable entries
//     passes through a stable one, and dropping stable entries, from any
//     chain at any group at any time, changes no answer of strategy (a)
//     about unstable messages, which are all it is asked about.
//  3. A stable entry x addressed to h calls for no notification (strategy
//     c): a notification to h about m stands for the messages h may still
//     order before x; those are stable too (x is), so each was delivered
//     by every destination of m that it is addressed to, before m.
//
// Each group holds a closed cut (Core.stable) and the chains from it on.
// Every GCTicks ticks, in a round, a group
//
//   - extends its cut with what it can prove from its chains alone: from
//     the ends of its chains it moves back, in each chain o <= self, to the
//     first entry that has a destination above self (whose order it does
//     not hold) or one whose position in that destination's chain is
//     unknown here or not below the candidate; the result is closed (with
//     the cut it started from, itself closed). The highest group holds
//     every chain and can prove everything; a lower one proves what
//     involves the groups up to it, so that when the highest group is cut
//     off, the traffic among the others is still collected;
//   - sends a cut it extended to every group below it, which take the
//     maximum with theirs and drop what it makes stable. A group above
//     learns a cut before the first envelope the group sends it after the
//     cut changed (sendCutTo): the channel is FIFO, so that a history
//     segment never starts past the end of the chain held where it arrives
//     (a diff starts at the sender's cut at the latest);
//   - ships to every group above it the part of its own chain it has not
//     shipped there yet, so that the groups above, the highest first, hold
//     the orders they need to prove entries stable. (Its ancestors' chains
//     travel with its envelopes as before; each owner ships its own, so an
//     entry travels once to each group above its owner in the rounds.)
//
// None of this is a message that any message waits for: a group that
// cannot be reached stops only the collection of the entries that involve
// it, and the messages that need it (see notifyNext), never the traffic of
// groups that exchange nothing with it. While it is unreachable, the other
// groups' entries that do not involve it keep being collected, so the
// histories stay bounded (TestOutageIsolation).

// gcID names a garbage-collection envelope in logs and metrics. It uses the
// client id reserved for what a core sends on its own (flushes, once), so
// that every tool counts it apart from the messages.
func (c *Core) gcID() multicast.MsgID {
	c.gcSeq++
	return multicast.MsgID{Client: multicast.FlushClient, Seq: c.gcSeq}
}

// gcRound is one garbage-collection round: extend the cut, send it down if
// it moved, and ship the chains up.
func (c *Core) gcRound() {
	if c.n < 2 {
		return
	}
	if s := c.extend(); s != nil {
		c.learnCut(s)
		for d := range c.self {
			c.sendCutTo(d)
		}
	}
	for d := c.self + 1; int(d) < c.n; d++ {
		if h := c.diffOwn(d); len(h) > 0 {
			c.send(d, &envelope{kind: envHist, history: h})
		}
	}
}

// extend returns a closed cut past self's that self proves from its chains,
// or nil if it proves nothing more.
func (c *Core) extend() []uint64 {
	if c.self == 0 {
		// Rank 0 holds its own chain only, and every entry of it has a
		// destination above (local messages are in no chain).
		return nil
	}
	s := slices.Clone(c.stable)
	for o := range c.chains {
		s[o] = c.chains[o].end()
	}
	for changed := true; changed; {
		changed = false
		for o := range c.chains {
			ch := &c.chains[o]
			for p := ch.base; p < s[o]; p++ {
				if !c.provable(ch.entries[p-ch.base], partition.GroupID(o), s) {
					s[o] = p
					changed = true
					break
				}
			}
		}
	}
	if slices.Equal(s, c.stable) {
		return nil
	}
	return s
}

// provable reports whether every destination of e, an entry of owner's
// chain, other than owner, is a group up to self whose chain holds e below
// s.
func (c *Core) provable(e entry, owner partition.GroupID, s []uint64) bool {
	for x := uint64(e.dst.Remove(owner)); x != 0; x &= x - 1 {
		d := lowBit(x)
		if d > c.self {
			return false
		}
		if p, ok := c.chains[d].pos(e.id); !ok || p >= s[d] {
			return false
		}
	}
	return true
}

// learnCut takes the maximum of the cut held and a closed cut s, and drops
// what it makes stable.
func (c *Core) learnCut(s []uint64) {
	moved := false
	for o, p := range s {
		if p > c.stable[o] {
			c.stable[o] = p
			moved = true
		}
	}
	if moved {
		c.truncate()
	}
}

// sendCutTo sends d the cut held here, unless d was sent it already (or it
// is the empty cut, which every group starts from).
func (c *Core) sendCutTo(d partition.GroupID) {
	if slices.Equal(c.cutTo[d], c.stable) || (c.cutTo[d] == nil && !slices.ContainsFunc(c.stable, func(p uint64) bool { return p > 0 })) {
		return
	}
	c.cutTo[d] = append(c.cutTo[d][:0], c.stable...)
	c.out.Sends = append(c.out.Sends, multicast.Send{To: d, Kind: multicast.KindAck, About: c.gcID(), Payload: appendCut(nil, c.stable), Background: true})
	c.stats.GCSent++
}

// truncate drops from every chain the entries below the cut, and rebuilds
// what derives from the chains: indexes, the dag, knows and the open
// dependencies (a stable entry is never one: point 1 above).
func (c *Core) truncate() {
	c.stats.Truncations++
	for o := range c.chains {
		ch := &c.chains[o]
		to := c.stable[o]
		if to <= ch.base {
			continue
		}
		k := min(to-ch.base, uint64(len(ch.entries)))
		if invariants.Enabled {
			if c.forgotten == nil {
				c.forgotten = make(map[multicast.MsgID]bool)
			}
			for _, e := range ch.entries[:k] {
				c.forgotten[e.id] = true
			}
		}
		kept := make([]entry, uint64(len(ch.entries))-k)
		copy(kept, ch.entries[k:])
		ch.entries = kept
		ch.base = to
		ch.index = make(map[multicast.MsgID]int32, len(kept))
		for i, e := range kept {
			ch.index[e.id] = int32(i)
		}
	}
	openBefore := c.dag.openLen()
	c.linkChains()
	clear(c.knows)
	for o := range c.chains {
		for _, e := range c.chains[o].entries {
			c.count(e, 1)
			if partition.GroupID(o) != c.self && e.dst.Has(c.self) && !c.chains[c.self].has(e.id) {
				c.dag.open(e.id)
			}
		}
	}
	if invariants.Enabled && c.dag.openLen() != openBefore && c.cfg.Strategies == (Strategies{}) {
		invariants.Violated("flexcast: group %d had %d open dependencies before truncating at %v, %d after", c.self, openBefore, c.stable, c.dag.openLen())
	}
}

// linkChains rebuilds the dag from the chains: a node per entry and an edge
// between consecutive entries of each chain, which is all appendChain adds.
func (c *Core) linkChains() {
	c.dag.reset()
	for o := range c.chains {
		ch := &c.chains[o]
		ch.nodes = ch.nodes[:0]
		for i, e := range ch.entries {
			j := c.dag.node(e.id)
			if i > 0 {
				c.dag.edgeIdx(ch.nodes[i-1], j)
			}
			ch.nodes = append(ch.nodes, j)
		}
	}
}
