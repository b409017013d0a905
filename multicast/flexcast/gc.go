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
//   - sends a cut it extended to every group below it (the highest: any
//     cut it holds), which take the maximum with theirs and drop what it
//     makes stable. A group above learns a group's cut ahead of every
//     message, ack or notification from it (FIFO), and in a round when the
//     cut drops entries the group shipped it (cutDrops); a chain shipped in
//     a round goes behind the cut only when its segment would start past
//     what the receiver was shipped of that chain (a segment never starts
//     past the end of the chain held where it arrives), or when entries of
//     it became stable here before they were shipped there (diffChains);
//   - ships the part of its own chain it has not shipped yet to the
//     highest group, which so holds every group's chain and proves
//     everything it holds, and to every group between them too while the
//     highest does not keep up (gcRound), so that they prove what they can.
//     (Its ancestors' chains travel with its envelopes as before.)
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

// keepUpRounds is how many garbage-collection rounds the highest group has
// to make what it was shipped stable before the groups between it and the
// shipper collect it too.
const keepUpRounds = 3

// gcRound is one garbage-collection round: extend the cut, send it down if
// it moved, and ship the chains up.
//
// While the highest group keeps up, it alone needs the chains and its cut
// alone needs to go down: it holds every group's own chain, shipped to it
// every round, and proves everything stable that it holds, so the cut any
// group between could prove is below the one the highest sends. It keeps
// up when a cut it sent made every entry of self's chain shipped to it
// keepUpRounds rounds ago stable (time for the other destinations to
// deliver them and ship their chains, for its round to prove them and for
// its cut to arrive). Its own cuts, not the cut held here: entries a group
// between proved stable here may still be held, unprovable, by other groups
// between, which only the cuts of the groups that are behind reach while
// the highest is cut off. Else (it is cut off, or some destination holds its
// entries back) self ships its chain to every group above it and sends a
// cut it moved to every group below, as the groups between must prove what
// they can: a round sends up to n-1 envelopes a group then, and about two
// while the highest keeps up.
func (c *Core) gcRound() {
	if c.n < 2 {
		return
	}
	top := partition.GroupID(c.n - 1)
	behind := c.self != top && c.fromTop < c.topShipped[0]
	s := c.extend()
	if s != nil {
		c.learnCut(s)
	}
	if s != nil || c.self == top {
		// The cut held; at the highest group also one a group below
		// moved it to (sendCutTo sends none twice).
		for d := range c.self {
			c.sendCutTo(d)
		}
	}
	if c.self == top {
		return
	}
	for d := c.self + 1; d <= top; d++ {
		if d == top || behind {
			if h := c.diffOwn(d); len(h) > 0 {
				c.send(d, &envelope{kind: envHist, history: h})
				continue
			}
		}
		// d may hold entries it was shipped from here (with messages)
		// that only this cut lets it drop, and while the highest is cut
		// off nothing else would tell it.
		if c.cutDrops(d) {
			c.sendCutTo(d)
		}
	}
	copy(c.topShipped[:], c.topShipped[1:])
	c.topShipped[keepUpRounds-1] = c.sent[top][c.self]
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

// cutNew reports whether the cut held here is news to d: not the one sent
// to it last, nor the empty cut every group starts from.
func (c *Core) cutNew(d partition.GroupID) bool {
	if c.cutTo[d] == nil {
		return slices.ContainsFunc(c.stable, func(p uint64) bool { return p > 0 })
	}
	return !slices.Equal(c.cutTo[d], c.stable)
}

// cutDrops reports whether the cut held here makes stable, in some chain,
// entries that this group shipped to d past the cut it last sent d.
func (c *Core) cutDrops(d partition.GroupID) bool {
	for o := 0; o <= int(c.self); o++ {
		var told uint64
		if c.cutTo[d] != nil {
			told = c.cutTo[d][o]
		}
		if c.sent[d][o] > told && c.stable[o] > told {
			return true
		}
	}
	return false
}

// sendCutTo sends d the cut held here, unless d was sent it already (or it
// is the empty cut, which every group starts from).
func (c *Core) sendCutTo(d partition.GroupID) {
	if !c.cutNew(d) {
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
