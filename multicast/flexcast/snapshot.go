package flexcast

import (
	"bytes"
	"cmp"
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
	snapshotMagic = 'F'
	// Version 7: the positions of self's chain shipped to the highest
	// group at the end of the latest keepUpRounds garbage-collection
	// rounds (topShipped), and how far the highest group's cuts made it
	// stable (fromTop); a version 6 snapshot restores with them at 0.
	// Version 6: the stable cut (stable), chains from it on, positions for
	// what was shipped (sent, links), the cuts sent (cutTo); no flushes.
	// Version 5: the flush last cut at (cut) and the envelopes held back
	// (deferred, waits), for flushes acknowledged along the ranks. Version
	// 4: the memory of the ids each link carried (links), which
	// envelope format 2 needs. Version 3: every queued notification holds
	// the blockers it took on arrival (no armed flag); no record of the
	// notifications issued about each message (version 2's, which
	// notifyNext does not need).
	snapshotVersion = 7
	// snapshotOldest is the oldest version restore reads.
	snapshotOldest = 6
)

// Snapshot layout. Integers are unsigned varints, ids two of them, sets one
// (package wire); flags are one byte, 0 or 1.
//
//	magic, version, groups n, self
//	stable[o], o = 0..n-1:   the stable cut
//	chains[o], o = 0..self:  count, then id and dst per entry, in chain order
//	                         (the first at position stable[o])
//	sent[d][o]:              d = self+1..n-1, o = 0..self
//	links[g], g != self:     slots used, then client and last sequence per
//	                         slot, next, and for o = 0..n-1 the two latest
//	                         other destinations, the last entry and the end
//	                         (see linkIDs)
//	open dependencies:       count, then ids in the dag's open order
//	queue[a], a = 0..self-1: count, then ids in queue order
//	pending:                 count, then by increasing id: id, arrived flag,
//	                         dst and payload if arrived, acks, notifReq,
//	                         notifGot (each a count, then notifier, group, id)
//	notifQ:                  count, then in queue order: id, dst, notifier,
//	                         notifID, blockers (count, ids)
//	notifSeq, gcTicks, gcSeq
//	topShipped[i], i = 0..keepUpRounds-1, fromTop (version 7)
//	cutTo[d], d != self:     0 if none was sent, else 1 and n positions
//	counters:                Stats.snapshotCounters, then HistoryLenMax and
//	                         PendingMaxSeen
//
// Derived state is rebuilt, not encoded: the chains' indexes; knows (counted
// from the chains, as truncate does); and the dag. Its edges join the
// consecutive entries of every chain: appendChain adds exactly those, and
// truncate rebuilds exactly those, so the graph of the chains is the graph
// the core held. The order of its nodes and of their successors changes no
// answer (blocked and reaches are questions about reachability), and the
// reachability cache is recomputed on first use. Only the order of the open
// dependencies reaches the state, through the blockers a notification
// copies from them on arrival; it is encoded, and Restore opens them in that
// order. The map from a blocker to the notification that holds it
// (blocking) is rebuilt from the queue.
//
// The invariants build's record of truncated ids (forgotten) is a check, not
// state: a restored core starts it afresh.

// AppendSnapshot appends a deterministic encoding of the core's state: equal
// states encode to equal bytes on every replica (maps are written in id
// order). It encodes the state only, not the output waiting for Ready, so it
// panics if Ready has output left to drain: those sends and deliveries would
// be lost.
func (c *Core) AppendSnapshot(b []byte) []byte { return c.appendSnapshot(b, snapshotVersion) }

// appendSnapshot is AppendSnapshot in the format of version (snapshotOldest
// to snapshotVersion: the tests make older snapshots with it).
func (c *Core) appendSnapshot(b []byte, version byte) []byte {
	if !c.out.Empty() {
		panic(fmt.Sprintf("flexcast: snapshot with undrained output (%d sends, %d deliveries)", len(c.out.Sends), len(c.out.Deliveries)))
	}
	b = wire.AppendSnapshotHeader(b, wire.SnapshotHeader{Magic: snapshotMagic, Version: version, Groups: c.n, Self: c.self})
	for _, p := range c.stable {
		b = wire.AppendUvarint(b, p)
	}
	for o := range c.chains {
		b = appendEntries(b, c.chains[o].entries)
	}
	for d := int(c.self) + 1; d < c.n; d++ {
		for _, s := range c.sent[d] {
			b = wire.AppendUvarint(b, s)
		}
	}
	for g := range c.links {
		if g != int(c.self) {
			b = appendLinkIDs(b, &c.links[g], c.n)
		}
	}
	b = appendIDs(b, c.dag.openIDs(nil))
	for _, q := range c.queue {
		b = appendIDs(b, q)
	}
	ids := slices.SortedFunc(maps.Keys(c.pending), compareIDs)
	b = wire.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		p := c.pending[id]
		b = multicast.AppendMsgID(b, id)
		if p.arrived {
			b = append(b, 1)
			b = wire.AppendUvarint(b, uint64(p.msg.Dst))
			b = wire.AppendBytes(b, p.msg.Payload)
		} else {
			b = append(b, 0)
		}
		b = wire.AppendUvarint(b, uint64(p.acks))
		b = appendKeys(b, p.notifReq)
		b = appendKeys(b, p.notifGot)
	}
	b = wire.AppendUvarint(b, uint64(len(c.notifQ)))
	for _, pn := range c.notifQ {
		b = multicast.AppendMsgID(b, pn.id)
		b = wire.AppendUvarint(b, uint64(pn.dst))
		b = wire.AppendUvarint(b, uint64(pn.notifier))
		b = wire.AppendUvarint(b, pn.notifID)
		b = appendIDs(b, pn.blockers)
	}
	b = wire.AppendUvarint(b, c.notifSeq)
	b = wire.AppendUvarint(b, uint64(c.gcTicks))
	b = wire.AppendUvarint(b, c.gcSeq)
	if version >= 7 {
		for _, p := range c.topShipped {
			b = wire.AppendUvarint(b, p)
		}
		b = wire.AppendUvarint(b, c.fromTop)
	}
	for g, cut := range c.cutTo {
		switch {
		case g == int(c.self):
		case cut == nil:
			b = append(b, 0)
		default:
			b = append(b, 1)
			for _, p := range cut {
				b = wire.AppendUvarint(b, p)
			}
		}
	}
	for _, v := range c.stats.snapshotCounters() {
		b = wire.AppendUvarint(b, *v)
	}
	b = wire.AppendUvarint(b, uint64(c.stats.HistoryLenMax))
	return wire.AppendUvarint(b, uint64(c.stats.PendingMaxSeen))
}

// Restore returns a core configured by cfg, as New would, in the state that
// AppendSnapshot encoded in b. The snapshot must come from the same group
// (cfg.Self) of a cluster of the same size. Restore checks every invariant
// of the state that holds after any sequence of inputs Step accepts, not
// only those of correct peers, so that the snapshot of a core fed a faulty
// group's envelopes restores too. A corrupt snapshot, or one that does not
// fit cfg, yields an error wrapping wire.ErrCorrupt; an invalid cfg, New's
// error. Restore never panics, and the core keeps no reference to b (an
// empty payload comes back nil: the encoding does not tell nil from empty).
func Restore(cfg Config, b []byte) (*Core, error) {
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := c.restore(wire.NewDecoder(b)); err != nil {
		return nil, fmt.Errorf("flexcast: restore group %d: %w", cfg.Self, err)
	}
	return c, nil
}

// restore decodes the state into c, fresh from New. Each stage returns as
// soon as the decoder failed, so that later stages build derived state from
// checked parts only.
func (c *Core) restore(d *wire.Decoder) error {
	c.forgottenAll = false
	version := d.SnapshotHeaderSince(wire.SnapshotHeader{Magic: snapshotMagic, Version: snapshotVersion, Groups: c.n, Self: c.self}, snapshotOldest, "flexcast")
	for o := range c.stable {
		c.stable[o] = d.Uvarint()
		if d.Err() == nil && c.stable[o] >= 1<<62 {
			d.Fail("stable cut of group %d at %d", o, c.stable[o])
		}
	}
	c.restoreChains(d)
	for dd := int(c.self) + 1; dd < c.n; dd++ {
		for o := range c.sent[dd] {
			v := d.Uvarint()
			if d.Err() == nil && v > c.chains[o].end() {
				d.Fail("shipped chain %d to position %d to group %d, past its end, %d", o, v, dd, c.chains[o].end())
			}
			c.sent[dd][o] = v
		}
	}
	for g := range c.links {
		if g != int(c.self) && d.Err() == nil {
			restoreLinkIDs(d, &c.links[g], c.n, g > int(c.self))
		}
	}
	// A link carries chains of its sender and its sender's ancestors only,
	// and a descendant's link no further than what was shipped to it (diff
	// marks a chain shipped to its end also when nothing of it was left to
	// ship).
	for g := range c.links {
		for o, end := range c.links[g].end {
			sender := partition.GroupID(g)
			if g > int(c.self) {
				sender = c.self
			}
			switch {
			case d.Err() != nil || end == 0:
			case partition.GroupID(o) > sender:
				d.Fail("link with group %d carried chain %d", g, o)
			case g > int(c.self) && end > c.sent[g][o]:
				d.Fail("link to group %d carried chain %d to %d, past what was shipped, %d", g, o, end, c.sent[g][o])
			}
		}
	}
	open := restoreIDs(d)
	c.restoreDAG(d, open)
	c.restoreKnows(d)
	c.restorePending(d)
	c.restoreNotifQ(d)
	c.notifSeq = d.Uvarint()
	c.gcTicks = decodeInt(d, "ticks since the last garbage-collection round")
	c.gcSeq = d.Uvarint()
	if version >= 7 {
		for i := range c.topShipped {
			c.topShipped[i] = d.Uvarint()
		}
		c.fromTop = d.Uvarint()
	}
	c.restoreCutTo(d)
	for _, v := range c.stats.snapshotCounters() {
		*v = d.Uvarint()
	}
	c.stats.HistoryLenMax = decodeInt(d, "largest history")
	c.stats.PendingMaxSeen = decodeInt(d, "largest pending count")
	if err := d.Finish(); err != nil {
		return err
	}
	// afterStep keeps both maxima up to date after every step.
	if h := c.historyLen(); c.stats.HistoryLenMax < h {
		d.Fail("largest history %d below the current %d", c.stats.HistoryLenMax, h)
	}
	if p := len(c.pending) + len(c.notifQ); c.stats.PendingMaxSeen < p {
		d.Fail("largest pending count %d below the current %d", c.stats.PendingMaxSeen, p)
	}
	return d.Err()
}

// restoreCutTo decodes the cuts last sent to each group.
func (c *Core) restoreCutTo(d *wire.Decoder) {
	for g := range c.cutTo {
		if g == int(c.self) || d.Err() != nil {
			continue
		}
		switch d.Byte() {
		case 0:
		case 1:
			cut := make([]uint64, c.n)
			for o := range cut {
				cut[o] = d.Uvarint()
			}
			c.cutTo[g] = cut
		default:
			d.Fail("cut sent to group %d: bad flag", g)
		}
	}
}

// restoreChains decodes the chains and rebuilds their indexes. Entries of a
// chain are distinct (appendChain skips those it holds).
func (c *Core) restoreChains(d *wire.Decoder) {
	for o := range c.chains {
		ch := &c.chains[o]
		ch.base = c.stable[o]
		cnt := d.Count(3)
		if cnt > math.MaxInt32 {
			d.Fail("chain %d of %d entries", o, cnt)
		}
		if d.Err() != nil {
			return
		}
		ch.entries = make([]entry, cnt)
		for i := range ch.entries {
			e := &ch.entries[i]
			e.id = multicast.DecodeMsgID(d)
			e.dst = nonEmptySet(d, c.n, "chain entry")
			if _, dup := ch.index[e.id]; dup && d.Err() == nil {
				d.Fail("chain %d holds %s twice", o, e.id)
			}
			if d.Err() != nil {
				return
			}
			ch.index[e.id] = int32(i)
		}
	}
}

// restoreDAG rebuilds the precedence graph from the chains, as truncate
// does, and opens the dependencies in their encoded order. Every open
// dependency is an entry of an ancestor's chain addressed to self: appendChain
// opens only those, and truncate keeps such entries while it rebuilds.
func (c *Core) restoreDAG(d *wire.Decoder, open []multicast.MsgID) {
	if d.Err() != nil {
		return
	}
	c.linkChains()
	for _, id := range open {
		if !c.addressedByAncestor(id) {
			d.Fail("open dependency %s is no ancestor's entry addressed to group %d", id, c.self)
			return
		}
		if i := c.dag.index[id]; c.dag.openPos[i] >= 0 {
			d.Fail("open dependency %s listed twice", id)
			return
		}
		c.dag.open(id)
	}
	// And every such entry not delivered is open (appendChain opens each).
	for o := range c.self {
		for _, e := range c.chains[o].entries {
			if e.dst.Has(c.self) && !c.chains[c.self].has(e.id) && c.dag.openPos[c.dag.index[e.id]] < 0 {
				d.Fail("%s of group %d's chain, addressed to group %d and not delivered, is no open dependency", e.id, o, c.self)
				return
			}
		}
	}
}

func (c *Core) addressedByAncestor(id multicast.MsgID) bool {
	for o := range c.self {
		if i, ok := c.chains[o].index[id]; ok && c.chains[o].entries[i].dst.Has(c.self) {
			return true
		}
	}
	return false
}

// restoreKnows counts the chains' entries into knows.
func (c *Core) restoreKnows(d *wire.Decoder) {
	if d.Err() != nil {
		return
	}
	for o := range c.chains {
		for _, e := range c.chains[o].entries {
			c.count(e, 1)
		}
	}
}

// restorePending decodes the queues and the pending messages. Every message
// in a queue arrived and waits in the queue of its lca, and every message
// that arrived is in exactly one queue: onMsg files both, remoteDeliver
// removes both.
func (c *Core) restorePending(d *wire.Decoder) {
	queued := make(map[multicast.MsgID]partition.GroupID)
	for a := range c.queue {
		q := restoreIDs(d)
		for _, id := range q {
			if _, dup := queued[id]; dup && d.Err() == nil {
				d.Fail("message %s queued twice", id)
			}
			queued[id] = partition.GroupID(a)
		}
		c.queue[a] = q
	}
	cnt := d.Count(6)
	arrived := 0
	var prev multicast.MsgID
	below := partition.AllGroups(int(c.self))
	for i := 0; i < cnt && d.Err() == nil; i++ {
		id := multicast.DecodeMsgID(d)
		if i > 0 && d.Err() == nil && compareIDs(prev, id) >= 0 {
			d.Fail("pending messages out of order at %s", id)
		}
		prev = id
		p := &pend{}
		switch d.Byte() {
		case 0:
		case 1:
			p.arrived = true
			arrived++
			p.msg = multicast.Message{ID: id, Dst: nonEmptySet(d, c.n, "pending message")}
			if payload := d.Bytes(); len(payload) > 0 {
				p.msg.Payload = bytes.Clone(payload)
			}
		default:
			d.Fail("pending %s: bad arrived flag", id)
		}
		p.acks = d.GroupSet(c.n)
		p.notifReq = restoreKeys(d, c.self)
		p.notifGot = restoreKeys(d, c.self)
		if d.Err() != nil {
			return
		}
		// Acks come from ancestors; a message that arrived came from its
		// lca, an ancestor, to a destination, and is in no chain of self's
		// until delivered; an entry created by an ack holds that ack.
		dst := p.msg.Dst
		a, inQueue := queued[id]
		switch {
		case p.acks&^below != 0:
			d.Fail("pending %s: acks from %s, not all ancestors", id, p.acks)
		case p.arrived && (!dst.Has(c.self) || dst.Min() >= c.self):
			d.Fail("pending %s to %s arrived at group %d, not a destination below its lca", id, dst, c.self)
		case p.arrived && c.chains[c.self].has(id):
			d.Fail("pending %s is delivered already", id)
		case p.arrived && (!inQueue || a != dst.Min()):
			d.Fail("pending %s to %s is not in the queue of its lca", id, dst)
		case !p.arrived && inQueue:
			d.Fail("queued %s has not arrived", id)
		case !p.arrived && p.acks.Empty() && len(p.notifGot) == 0:
			d.Fail("pending %s neither arrived nor acknowledged", id)
		}
		c.pending[id] = p
	}
	// Each message that arrived is queued, once: if as many are queued, no
	// queued message is missing from pending.
	if d.Err() == nil && arrived != len(queued) {
		d.Fail("%d messages queued, %d arrived", len(queued), arrived)
	}
}

// restoreNotifQ decodes the notifications waiting for open dependencies.
// Each blocker is an open dependency held by one notification only, and the
// head has blockers left (release answers it when none is).
func (c *Core) restoreNotifQ(d *wire.Decoder) {
	cnt := d.Count(6)
	if d.Err() != nil || cnt == 0 {
		return
	}
	c.notifQ = make([]*pendingNotif, cnt)
	for i := range c.notifQ {
		pn := &pendingNotif{id: multicast.DecodeMsgID(d), dst: nonEmptySet(d, c.n, "notification")}
		pn.notifier = d.Group(c.n)
		pn.notifID = d.Uvarint()
		pn.blockers = restoreIDs(d)
		if d.Err() != nil {
			return
		}
		switch {
		case pn.dst.Has(c.self) || pn.dst.Max() <= c.self:
			d.Fail("notification %s to %s at a destination or above every destination", pn.id, pn.dst)
		case pn.notifier >= c.self:
			d.Fail("notification %s from group %d, not an ancestor", pn.id, pn.notifier)
		case i == 0 && len(pn.blockers) == 0:
			d.Fail("notification %s heads the queue without blockers", pn.id)
		}
		for _, id := range pn.blockers {
			if i, ok := c.dag.index[id]; !ok || c.dag.openPos[i] < 0 {
				d.Fail("notification %s blocked by %s, which is not an open dependency", pn.id, id)
				return
			}
			if c.blocking[id] != nil {
				d.Fail("notification %s blocked by %s, which another or the same notification waits for", pn.id, id)
				return
			}
			c.blocking[id] = pn
		}
		c.notifQ[i] = pn
	}
}

// snapshotCounters lists the counters a snapshot holds, in its order.
// HistoryLenMax and PendingMaxSeen follow them; the other gauges are
// computed by Core.Stats.
func (s *Stats) snapshotCounters() []*uint64 {
	return []*uint64{&s.Deliveries, &s.Truncations, &s.MsgsSent, &s.AcksSent, &s.NotifsSent, &s.EntriesSent, &s.LateAcks, &s.StaleEntries, &s.GCSent}
}

func appendEntries(b []byte, ents []entry) []byte {
	b = wire.AppendUvarint(b, uint64(len(ents)))
	for _, e := range ents {
		b = multicast.AppendMsgID(b, e.id)
		b = wire.AppendUvarint(b, uint64(e.dst))
	}
	return b
}

func appendIDs(b []byte, ids []multicast.MsgID) []byte {
	b = wire.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = multicast.AppendMsgID(b, id)
	}
	return b
}

func restoreIDs(d *wire.Decoder) []multicast.MsgID {
	cnt := d.Count(2)
	if cnt == 0 {
		return nil
	}
	ids := make([]multicast.MsgID, cnt)
	for i := range ids {
		ids[i] = multicast.DecodeMsgID(d)
	}
	return ids
}

func appendKeys(b []byte, ks []notifKey) []byte {
	b = wire.AppendUvarint(b, uint64(len(ks)))
	for _, k := range ks {
		b = wire.AppendUvarint(b, uint64(k.notifier))
		b = wire.AppendUvarint(b, uint64(k.group))
		b = wire.AppendUvarint(b, k.id)
	}
	return b
}

// restoreKeys decodes a list of notification keys, distinct (require and
// onAck add a key only once), whose notifier and notified group are
// ancestors of self.
func restoreKeys(d *wire.Decoder, self partition.GroupID) []notifKey {
	cnt := d.Count(3)
	if cnt == 0 {
		return nil
	}
	ks := make([]notifKey, cnt)
	seen := make(map[notifKey]bool, cnt)
	for i := range ks {
		k := notifKey{notifier: d.Group(int(self)), group: d.Group(int(self)), id: d.Uvarint()}
		if seen[k] && d.Err() == nil {
			d.Fail("notification key %+v listed twice", k)
		}
		seen[k] = true
		ks[i] = k
	}
	return ks
}

func nonEmptySet(d *wire.Decoder, n int, what string) partition.GroupSet {
	s := d.GroupSet(n)
	if d.Err() == nil && s.Empty() {
		d.Fail("%s without destinations", what)
	}
	return s
}

// decodeInt reads a varint that must fit an int.
func decodeInt(d *wire.Decoder, what string) int {
	v := d.Uvarint()
	if v > math.MaxInt {
		d.Fail("%s: %d overflows", what, v)
		return 0
	}
	return int(v)
}

// compareIDs orders ids as multicast.MsgID.Less does.
func compareIDs(x, y multicast.MsgID) int {
	if c := cmp.Compare(x.Client, y.Client); c != 0 {
		return c
	}
	return cmp.Compare(x.Seq, y.Seq)
}
