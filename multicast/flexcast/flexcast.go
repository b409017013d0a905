// Package flexcast implements FlexCast, a genuine atomic multicast protocol
// over a complete DAG of groups (DESIGN 3.2), as a deterministic state
// machine: one Core per group, driven through multicast.Core.
//
// Groups are ranked 0..n-1 (the GroupID is the rank). A message goes first to
// its lca, the lowest-ranked destination, which delivers it at once and
// forwards it to the other destinations with its history: the suffix of its
// own delivery order, and of every ancestor's that it knows, not yet shipped
// to that destination. A destination g delivers m, in the order of m's lca,
// once
//
//	(a) no message addressed to g that g has not delivered precedes m in the
//	    union of the histories it knows (the precedence graph);
//	(b) every destination of m ranked between lca(m) and g acknowledged m,
//	    with its own history attached;
//	(c) every group notified about m, ranked below g, acknowledged m.
//
// Notifications about m travel up one path: the lca, and later each group on
// the path, notifies the lowest group h above itself and below m's next
// destination that is not a destination of m but to which it knows an
// earlier message was addressed; h's ack carries h's history to that next
// destination, whose own ack carries it further, so that every destination
// above h learns the orders h established. h answers only once it has
// delivered every message it knew was addressed to it when notified
// (answering earlier produces ordering cycles). See notifyNext.
//
// Histories are trimmed from stable entries (gc.go): an entry is stable
// once every destination delivered it and every entry before it in each
// destination's order is stable. The stable entries of every chain form a
// prefix, the set of all of them a cut of the delivery orders; any group may
// drop any stable entry at any time, because no path of the precedence
// graph between two unstable entries passes through a stable one. Groups
// learn the cut from each other, off the delivery queues: each group ships
// its chains up the ranks on a period, computes what it can prove stable,
// and sends the cut it found down the ranks. Nothing any message waits for
// is a garbage-collection message, so a group that cannot be reached holds
// up only the messages that need it.
package flexcast

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/flexkv/flexkv/internal/invariants"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// Defaults for zero Config fields.
const (
	PendingMaxDefault = 1 << 14
	// GCTicksDefault: a garbage-collection round every 10 ticks (200 ms at
	// the replicas' 20 ms tick) in a cluster of up to three groups; see
	// GCTicksFor.
	GCTicksDefault = 10
)

// GCTicksFor returns the period of the garbage-collection rounds, in
// ticks, of a Core of a cluster of n groups whose Config names none:
// GCTicksDefault per three groups. A round sends up to n-1 envelopes (the
// cut to the groups below, the chain to the groups above), each of which
// the receiving group commits through its log, so a fixed period costs
// each group in proportion to n and the cluster in proportion to n²; a
// period in proportion to n keeps each group's share constant as the
// cluster grows. Nothing waits for a round (gc.go), so a longer period
// only keeps stable entries in the histories longer.
func GCTicksFor(n int) int { return GCTicksDefault * max(1, (n+2)/3) }

// Config configures a Core.
type Config struct {
	Self     partition.GroupID
	Topology *partition.Topology
	// PendingMax bounds the messages and notifications a group holds
	// undelivered or unanswered. A client request beyond it is refused with
	// multicast.ErrBusy. Envelopes from other groups are always accepted:
	// refusing them would break reliability; their number is bounded by the
	// admission control of the groups that originate them.
	PendingMax int
	// GCTicks: a garbage-collection round (see gc.go) every this many
	// ticks (0: GCTicksFor the topology's size). Negative: never (tests of
	// unbounded histories only).
	GCTicks int
	// Strategies switches parts of the protocol off. Only tests do this, to
	// show that the simulator and the checker catch the resulting violations.
	Strategies Strategies
}

// Strategies turns off the parts of FlexCast that make it correct. The zero
// value is the correct protocol.
type Strategies struct {
	NoHistoryWait bool // (a): deliver without waiting for preceding messages
	NoAcks        bool // (b): neither send nor wait for destination acks
	NoNotifs      bool // (c): send no notifications
	NoNotifWait   bool // answer notifications before open dependencies are delivered
}

// Stats are counters and gauges of a Core.
type Stats struct {
	Deliveries     uint64 // application messages delivered
	Truncations    uint64 // times the stable cut moved and the chains were cut
	MsgsSent       uint64
	AcksSent       uint64
	NotifsSent     uint64
	EntriesSent    uint64 // history entries shipped in envelopes
	LateAcks       uint64 // acks about messages already delivered (ignored)
	HistoryLen     int    // entries in all chains now
	HistoryLenMax  int    // largest HistoryLen seen
	DAGNodes       int
	Pending        int // messages received or acked, not delivered
	PendingBytes   int // payload bytes of the pending messages that arrived
	Open           int // messages known to be addressed here, not delivered
	NotifQueue     int // notifications waiting for open dependencies
	PendingMaxSeen int
	// StaleEntries counts history entries received after this group had
	// dropped them as stable (an envelope sent before its sender learned
	// the cut), dropped on arrival.
	StaleEntries uint64
	// GCSent counts the garbage-collection envelopes sent: chains shipped
	// up the ranks, and cuts.
	GCSent uint64
}

type chain struct {
	// base is the position, in the owner's delivery order (global messages
	// only, from 0), of entries[0]: the stable cut of the owner's order
	// known here (Core.stable), below which every entry is dropped.
	base    uint64
	entries []entry
	nodes   []int32 // nodes[i]: the dag node of entries[i]
	index   map[multicast.MsgID]int32
}

func (c *chain) has(id multicast.MsgID) bool { _, ok := c.index[id]; return ok }

// end is the position after the chain's last entry.
func (c *chain) end() uint64 { return c.base + uint64(len(c.entries)) }

// pos returns the position of id in the owner's order, if held.
func (c *chain) pos(id multicast.MsgID) (uint64, bool) {
	i, ok := c.index[id]
	return c.base + uint64(i), ok
}

// notifKey names one notification: who notified whom, with the notifier's id.
type notifKey struct {
	notifier, group partition.GroupID
	id              uint64
}

// pend is what a destination knows about a message it has not delivered.
type pend struct {
	msg      multicast.Message // valid once arrived
	arrived  bool
	acks     partition.GroupSet // destinations that acknowledged (a set: retries may duplicate)
	notifReq []notifKey         // notifications below self that must be answered
	notifGot []notifKey         // notification acks received
}

// pendingNotif is a notification waiting for open dependencies: it is
// answered once it heads the queue and its blockers are delivered. Its
// blockers are the open dependencies known when it arrived that no earlier
// queued notification waits for (see onNotif).
type pendingNotif struct {
	id       multicast.MsgID
	dst      partition.GroupSet
	notifier partition.GroupID
	notifID  uint64
	blockers []multicast.MsgID
}

// Core is the FlexCast state machine of one group.
type Core struct {
	cfg  Config
	self partition.GroupID
	n    int
	all  partition.GroupSet

	// chains[o] for o <= self: the known part of o's delivery order (global
	// messages only) from the stable cut on; chains[self] is this group's
	// own.
	chains []chain
	// sent[d][o] for d > self: the end position of chains[o] shipped to d
	// (0: none yet).
	sent [][]uint64
	// dag: the precedence graph, with the open dependencies: entries of
	// ancestors' chains addressed to self, not delivered.
	dag *dag
	// knows[h]: chain entries addressed to h.
	knows []int32
	// queue[a] for a < self: arrived or expected messages whose lca is a, in
	// a's delivery order (FIFO channel from a).
	queue   [][]multicast.MsgID
	pending map[multicast.MsgID]*pend
	notifQ  []*pendingNotif
	// blocking[id]: the queued notification whose blockers hold id (at most
	// one does). Derived from notifQ.
	blocking map[multicast.MsgID]*pendingNotif

	notifSeq uint64

	// stable[o], for every group o: the stable cut known here, a position
	// in o's delivery order below which every entry is stable (gc.go). For
	// o <= self it is chains[o].base.
	stable []uint64
	// cutTo[d], d != self: the cut last sent to d (nil: none).
	cutTo [][]uint64
	// gcTicks counts the ticks since the last garbage-collection round;
	// gcSeq numbers the garbage-collection envelopes this group sent.
	gcTicks int
	gcSeq   uint64
	// topShipped: how far self's chain was shipped to the highest group
	// (sent[n-1][self]) at the end of each of the latest keepUpRounds
	// garbage-collection rounds, the oldest first (gc.go, gcRound).
	topShipped [keepUpRounds]uint64
	// fromTop: how far self's chain is stable by the cuts the highest group
	// sent (gcRound: whether it keeps up).
	fromTop uint64

	out   multicast.Output
	stats Stats
	// scratch receives every decoded envelope (its slices are reused).
	scratch envelope
	// links[g]: the memory of the ids carried on the link to g, a
	// descendant, or from g, an ancestor (see linkIDs); linkScratch, the
	// copy an arriving envelope is decoded with.
	links       []linkIDs
	linkScratch linkIDs

	// forgotten holds, with the invariants tag, every id truncation dropped:
	// none may come back. forgottenAll: since New, not Restore, so that
	// forgotten holds every id truncated, and a stale entry not in it is an
	// error.
	forgotten    map[multicast.MsgID]bool
	forgottenAll bool
}

var _ multicast.Core = (*Core)(nil)

// New returns the Core of group cfg.Self.
func New(cfg Config) (*Core, error) {
	if cfg.Topology == nil {
		return nil, errors.New("flexcast: no topology")
	}
	if !cfg.Topology.Valid(cfg.Self) {
		return nil, fmt.Errorf("flexcast: group %d is not in the topology", cfg.Self)
	}
	if cfg.PendingMax == 0 {
		cfg.PendingMax = PendingMaxDefault
	}
	if cfg.PendingMax < 0 {
		return nil, fmt.Errorf("flexcast: PendingMax %d < 0", cfg.PendingMax)
	}
	n := cfg.Topology.Len()
	if cfg.GCTicks == 0 {
		cfg.GCTicks = GCTicksFor(n)
	}
	c := &Core{
		cfg:     cfg,
		self:    cfg.Self,
		n:       n,
		all:     cfg.Topology.All(),
		chains:  make([]chain, cfg.Self+1),
		sent:    make([][]uint64, n),
		dag:     newDAG(),
		knows:   make([]int32, n),
		queue:   make([][]multicast.MsgID, cfg.Self),
		pending: make(map[multicast.MsgID]*pend),
		links:   make([]linkIDs, n),
		stable:  make([]uint64, n),
		cutTo:   make([][]uint64, n),

		blocking: make(map[multicast.MsgID]*pendingNotif),

		forgottenAll: true,
	}
	for o := range c.chains {
		c.chains[o].index = make(map[multicast.MsgID]int32)
	}
	for d := int(cfg.Self) + 1; d < n; d++ {
		c.sent[d] = make([]uint64, cfg.Self+1)
	}
	return c, nil
}

// Entry returns the group a client sends a message for dst to: its lca.
func Entry(dst partition.GroupSet) partition.GroupID { return dst.Min() }

// Ready drains sends and deliveries.
func (c *Core) Ready() multicast.Output {
	out := c.out
	c.out = multicast.Output{}
	return out
}

// Stats returns the counters and gauges.
func (c *Core) Stats() Stats {
	s := c.stats
	s.HistoryLen = c.historyLen()
	s.DAGNodes = c.dag.len()
	s.Pending = len(c.pending)
	for _, p := range c.pending { //flexkv:unordered a sum
		s.PendingBytes += len(p.msg.Payload)
	}
	s.Open = c.dag.openLen()
	s.NotifQueue = len(c.notifQ)
	return s
}

func (c *Core) historyLen() int {
	t := 0
	for o := range c.chains {
		t += len(c.chains[o].entries)
	}
	return t
}

// Step applies one input.
func (c *Core) Step(in multicast.Input) error {
	switch in.Kind {
	case multicast.InputRequest:
		if err := c.checkRequest(in.Msg); err != nil {
			return err
		}
		c.lcaDeliver(in.Msg)
	case multicast.InputEnvelope:
		if err := c.onEnvelope(in.From, in.Payload); err != nil {
			return err
		}
	case multicast.InputTick:
		c.gcTicks++
		if c.cfg.GCTicks > 0 && c.gcTicks >= c.cfg.GCTicks {
			c.gcTicks = 0
			c.gcRound()
		}
	default:
		return fmt.Errorf("%w: flexcast: input kind %d", multicast.ErrInvalid, in.Kind)
	}
	c.afterStep()
	return nil
}

// TimerRunning implements multicast.Timed: a group ticks while it holds
// history, which the garbage-collection rounds of its ticks ship up and
// trim (an entry is dropped once it is stable, which the groups learn from
// each other's rounds). A group whose chains are empty has nothing to ship
// and no cut to prove; it ticks on while its next round sends a cut that
// another group needs (cutUnsent).
func (c *Core) TimerRunning() bool {
	return c.cfg.GCTicks > 0 && c.n > 1 && (c.historyLen() > 0 || c.cutUnsent())
}

// cutUnsent reports whether the next round sends a cut that no envelope
// has carried yet: the highest group's to a group below (the groups below
// judge by its cuts whether it keeps up), another's to a group above that
// holds entries it makes stable (cutDrops).
func (c *Core) cutUnsent() bool {
	if int(c.self) == c.n-1 {
		for d := range c.self {
			if c.cutNew(d) {
				return true
			}
		}
		return false
	}
	for d := c.self + 1; int(d) < c.n; d++ {
		if c.cutDrops(d) {
			return true
		}
	}
	return false
}

func (c *Core) afterStep() {
	if h := c.historyLen(); h > c.stats.HistoryLenMax {
		c.stats.HistoryLenMax = h
	}
	if p := len(c.pending) + len(c.notifQ); p > c.stats.PendingMaxSeen {
		c.stats.PendingMaxSeen = p
	}
}

// onEnvelope takes an envelope from another group: a cut from any group,
// anything else from an ancestor.
func (c *Core) onEnvelope(from partition.GroupID, payload []byte) error {
	if !c.cfg.Topology.Valid(from) || from == c.self {
		return fmt.Errorf("%w: flexcast: group %d from %d: no such sender", multicast.ErrInvalid, c.self, from)
	}
	if len(payload) == 0 {
		return fmt.Errorf("%w: flexcast: group %d from %d: empty envelope", multicast.ErrInvalid, c.self, from)
	}
	if envKind(payload[0]&0xf) == envCut {
		cut, err := decodeCut(payload, c.n)
		if err != nil {
			return fmt.Errorf("%w: flexcast: group %d from %d: %w", multicast.ErrInvalid, c.self, from, err)
		}
		if top := partition.GroupID(c.n - 1); from == top {
			c.fromTop = max(c.fromTop, cut[c.self])
		}
		c.learnCut(cut)
		return nil
	}
	if from > c.self {
		return fmt.Errorf("%w: flexcast: group %d from %d: envelopes other than cuts travel from lower to higher ranks only", multicast.ErrInvalid, c.self, from)
	}
	e, err := c.checkEnvelope(from, payload)
	if err != nil {
		return err
	}
	switch e.kind {
	case envMsg:
		c.onMsg(from, e)
	case envAck:
		c.onAck(from, e)
	case envNotif:
		c.onNotif(from, e)
	case envHist:
		// No delivery to try: history adds orders and open dependencies,
		// which hold messages back, never release one.
		c.merge(e.history)
	case envCut:
		// Taken above.
	}
	return nil
}

func (c *Core) checkRequest(m multicast.Message) error {
	if err := multicast.ValidateRequest(c.cfg.Topology, m); err != nil {
		return err
	}
	if lca := m.Dst.Min(); lca != c.self {
		return fmt.Errorf("%w: flexcast: message %s belongs at group %d, its lca, not %d", multicast.ErrNotEntry, m.ID, lca, c.self)
	}
	if c.chains[c.self].has(m.ID) {
		return fmt.Errorf("%w: flexcast: message %s delivered already", multicast.ErrInvalid, m.ID)
	}
	if p := len(c.pending) + len(c.notifQ); p >= c.cfg.PendingMax {
		return fmt.Errorf("%w: flexcast: group %d holds %d undelivered messages and notifications (PendingMax %d)",
			multicast.ErrBusy, c.self, p, c.cfg.PendingMax)
	}
	return nil
}

// checkEnvelope decodes an envelope from an ancestor and checks that it
// makes sense here, before anything is changed.
func (c *Core) checkEnvelope(from partition.GroupID, payload []byte) (*envelope, error) {
	e := &c.scratch
	c.linkScratch = c.links[from]
	if err := decodeInto(e, payload, c.n, &c.linkScratch); err != nil {
		return nil, fmt.Errorf("%w: flexcast: group %d from %d: %w", multicast.ErrInvalid, c.self, from, err)
	}
	kept, stale, err := c.checkHistory(from, e.history)
	if err != nil {
		return nil, err
	}
	e.history = kept
	if e.kind != envHist {
		if err := c.checkAbout(from, e); err != nil {
			return nil, err
		}
	}
	// Accepted: the link's memory moves on as the sender's did.
	c.links[from] = c.linkScratch
	c.stats.StaleEntries += stale
	return e, nil
}

// badEnvelope is checkEnvelope's error for an envelope from that makes no
// sense here.
func (c *Core) badEnvelope(from partition.GroupID, format string, args ...any) error {
	return fmt.Errorf("%w: flexcast: group %d from %d: %s", multicast.ErrInvalid, c.self, from, fmt.Sprintf(format, args...))
}

// checkHistory checks the history segments of an envelope from: each is a
// piece of its owner's order at the positions it names, and joins the
// chain held here. It returns them with the entries this group dropped as
// stable already left out, and the number of those. It reorders h in
// place, a segment dropped whole swapped behind those kept, so that the
// decoder's buffers, which h's segments are, stay distinct.
//
// A segment of a correct sender starts at the last entry it shipped here
// (the one-entry overlap of diff), or at its own stable cut, which it sent
// here before (see sendCutTo): the chain held here reaches the segment's
// start, or the stable cut held here is past it. A gap is an error: the
// entries in it would be lost.
func (c *Core) checkHistory(from partition.GroupID, h []segment) (kept []segment, stale uint64, err error) {
	kept = h[:0]
	prevOwner := -1
	for i := range h {
		s := h[i]
		if s.owner > from {
			return nil, 0, c.badEnvelope(from, "history of group %d, which is not an ancestor of the sender", s.owner)
		}
		if int(s.owner) <= prevOwner {
			return nil, 0, c.badEnvelope(from, "history segments out of order")
		}
		prevOwner = int(s.owner)
		if len(s.entries) == 0 {
			return nil, 0, c.badEnvelope(from, "empty history segment of group %d", s.owner)
		}
		ch := &c.chains[s.owner]
		if s.start < ch.base {
			k := min(ch.base-s.start, uint64(len(s.entries)))
			if invariants.Enabled && c.forgottenAll && c.cfg.Strategies == (Strategies{}) {
				// Stable entries addressed here were delivered here, and
				// dropped from this group's own chain (the cut is closed);
				// others this group may never have held.
				for _, x := range s.entries[:k] {
					if x.dst.Has(c.self) && !c.forgotten[x.id] {
						invariants.Violated("flexcast: group %d: stale history of group %d from %d holds %s, addressed here and never dropped here", c.self, s.owner, from, x.id)
					}
				}
			}
			stale += k
			s.entries = s.entries[k:]
			s.start += k
			if len(s.entries) == 0 {
				continue
			}
		}
		end := ch.end()
		if s.start > end {
			return nil, 0, c.badEnvelope(from, "history of group %d starts at position %d, past the end of the chain held here, %d", s.owner, s.start, end)
		}
		held := min(end-s.start, uint64(len(s.entries)))
		for k, x := range s.entries[:held] {
			if y := ch.entries[s.start-ch.base+uint64(k)].id; y != x.id {
				return nil, 0, c.badEnvelope(from, "history of group %d holds %s at position %d, where %s is held here", s.owner, x.id, s.start+uint64(k), y)
			}
		}
		if id, ok := c.repeated(ch, s.entries[held:]); ok {
			return nil, 0, c.badEnvelope(from, "history of group %d holds %s twice", s.owner, id)
		}
		j := len(kept)
		h[i] = h[j]
		h[j] = s
		kept = h[:j+1]
	}
	return kept, stale, nil
}

// repeated finds an id of es held in ch, or twice in es: an order holds a
// message once.
func (c *Core) repeated(ch *chain, es []entry) (multicast.MsgID, bool) {
	var seen map[multicast.MsgID]bool
	if len(es) > 16 {
		seen = make(map[multicast.MsgID]bool, len(es))
	}
	for k, x := range es {
		if ch.has(x.id) {
			return x.id, true
		}
		if seen != nil {
			if seen[x.id] {
				return x.id, true
			}
			seen[x.id] = true
			continue
		}
		for _, y := range es[:k] {
			if y.id == x.id {
				return x.id, true
			}
		}
	}
	return multicast.MsgID{}, false
}

// checkAbout checks what an envelope from says about its message: who may
// send its kind about the message to self, and the notifications it lists.
func (c *Core) checkAbout(from partition.GroupID, e *envelope) error {
	m := e.msg
	lca := m.Dst.Min()
	switch e.kind {
	case envMsg:
		if lca != from || !m.Dst.Has(c.self) {
			return c.badEnvelope(from, "MSG %s to %s must come from its lca to a destination", m.ID, m.Dst)
		}
		if p := c.pending[m.ID]; (p != nil && p.arrived) || c.chains[c.self].has(m.ID) {
			return c.badEnvelope(from, "MSG %s received twice", m.ID)
		}
	case envAck:
		if !m.Dst.Has(c.self) {
			return c.badEnvelope(from, "ACK %s to %s at a non-destination", m.ID, m.Dst)
		}
		if e.notified {
			if m.Dst.Has(from) || e.notifier >= from {
				return c.badEnvelope(from, "notification ACK %s from a destination, or answering a notification from above", m.ID)
			}
			if next := m.Dst.Above(from).Min(); next != c.self {
				return c.badEnvelope(from, "notification ACK %s to %s at %d, not at %d, the lowest destination above the sender", m.ID, m.Dst, c.self, next)
			}
		} else if !c.acksAwaited(m.Dst).Has(from) {
			return c.badEnvelope(from, "ACK %s from %d, not a destination above the lca that acknowledges it here", m.ID, from)
		}
	case envNotif:
		if m.Dst.Has(c.self) || c.self >= m.Dst.Max() {
			return c.badEnvelope(from, "NOTIF %s to %s at a destination or above every destination", m.ID, m.Dst)
		}
	case envHist, envCut:
		// About no message (checkEnvelope does not ask).
	}
	// notifyNext notifies at most one group, below the lowest destination
	// above the sender.
	if len(e.notifs) > 1 {
		return c.badEnvelope(from, "%d notifications listed about %s, at most one is issued", len(e.notifs), m.ID)
	}
	for _, r := range e.notifs {
		if above := m.Dst.Above(from); r.group <= from || above.Empty() || r.group >= above.Min() {
			return c.badEnvelope(from, "notification of group %d about %s to %s", r.group, m.ID, m.Dst)
		}
	}
	return nil
}

// lcaDeliver handles a message at its lca: deliver at once, then forward it
// with the history (FlexCast Alg. 1, a-multicast at the lca).
func (c *Core) lcaDeliver(m multicast.Message) {
	c.emit(m)
	if m.Dst == partition.SetOf(c.self) {
		// Local messages never travel in histories: they are addressed to no
		// descendant, and dropping them keeps every order among the others.
		return
	}
	c.appendChain(c.self, entry{id: m.ID, dst: m.Dst})
	refs := c.notifyNext(m.ID, m.Dst)
	for _, d := range m.Dst.Above(c.self).Slice() {
		c.send(d, &envelope{kind: envMsg, msg: m, history: c.diff(d), notifs: refs})
		c.stats.MsgsSent++
	}
}

func (c *Core) onMsg(from partition.GroupID, e *envelope) {
	c.merge(e.history)
	p := c.pend(e.msg.ID)
	p.msg = e.msg
	p.arrived = true
	c.require(p, from, e.msg.Dst, e.notifs)
	c.queue[from] = append(c.queue[from], e.msg.ID)
	c.tryDeliver()
}

func (c *Core) onAck(from partition.GroupID, e *envelope) {
	c.merge(e.history)
	id := e.msg.ID
	if c.chains[c.self].has(id) {
		// Every ack a destination receives is one it waits for, so this does
		// not happen; the history was merged all the same.
		c.stats.LateAcks++
		c.tryDeliver()
		return
	}
	p := c.pend(id)
	if e.notified {
		k := notifKey{notifier: e.notifier, group: from, id: e.notifID}
		if !hasKey(p.notifGot, k) {
			p.notifGot = append(p.notifGot, k)
		}
	} else {
		p.acks = p.acks.Add(from)
	}
	c.require(p, from, e.msg.Dst, e.notifs)
	c.tryDeliver()
}

// onNotif handles a notification: self answers it once every open
// dependency known when it arrived is delivered, and every notification
// queued before it is answered.
//
// Why the open dependencies at arrival, not (as the first version had it)
// those known when the notification reaches the head of the queue: under
// steady load a group almost always has open dependencies, so taking a
// fresh set at the head made each queued notification wait for another
// round of deliveries, one answer per round, while notifications kept
// coming: at 12 groups (seed 5, 30,000 messages) one group held 23,000
// queued notifications, the destinations waiting for their acks held their
// messages, and the histories above grew without bound. What the wait is for: the ack carries self's history
// to m's destinations above self, and every message addressed to self that
// precedes m in what self knows must be placed in self's chain in that
// history, with everything self delivered before it, or a destination may
// deliver m before a message that self ordered before a predecessor of m
// (the cycle of scenario (d)). What self knows precedes m comes with the
// notification (the notifier's history, merged above); the open
// dependencies then cover it. A dependency learned later came in another
// envelope, and an answer given at once (no open dependency at arrival)
// ignores such dependencies the same way; an answer given later only
// carries more of self's history, every entry of it true. The simulator's
// seeds (make sim) attack the rule.
//
// A later notification's open dependencies at arrival include every one an
// earlier queued notification still waits for, so answering in queue order
// never holds one back: each open dependency is held by the first queued
// notification that saw it (blocking), the later ones hold only new ones,
// and the stored blockers never exceed the open dependencies in number.
func (c *Core) onNotif(from partition.GroupID, e *envelope) {
	c.merge(e.history)
	pn := &pendingNotif{id: e.msg.ID, dst: e.msg.Dst, notifier: from, notifID: e.notifIDOut}
	if c.cfg.Strategies.NoNotifWait {
		c.answer(pn)
		return
	}
	for _, id := range c.dag.openIDs(nil) {
		if c.blocking[id] == nil {
			pn.blockers = append(pn.blockers, id)
		}
	}
	if len(c.notifQ) == 0 && len(pn.blockers) == 0 {
		c.answer(pn)
		return
	}
	c.notifQ = append(c.notifQ, pn)
	for _, id := range pn.blockers {
		c.blocking[id] = pn
	}
}

// release answers, in queue order, the notifications left without blockers
// after id was delivered.
func (c *Core) release(id multicast.MsgID) {
	if pn := c.blocking[id]; pn != nil {
		delete(c.blocking, id)
		for i, b := range pn.blockers {
			if b == id {
				pn.blockers[i] = pn.blockers[len(pn.blockers)-1]
				pn.blockers = pn.blockers[:len(pn.blockers)-1]
				break
			}
		}
	}
	for len(c.notifQ) > 0 && len(c.notifQ[0].blockers) == 0 {
		head := c.notifQ[0]
		c.notifQ[0] = nil
		c.notifQ = c.notifQ[1:]
		c.answer(head)
	}
}

// answer acknowledges a notification to m's lowest destination above self,
// the only one that waits for it: its own ack, sent once it delivered m,
// carries what self's ack brought to the destinations above it (see
// notifyNext).
func (c *Core) answer(pn *pendingNotif) {
	refs := c.notifyNext(pn.id, pn.dst)
	c.send(pn.dst.Above(c.self).Min(), &envelope{
		kind: envAck, msg: multicast.Message{ID: pn.id, Dst: pn.dst},
		history: c.diff(pn.dst.Above(c.self).Min()), notifs: refs,
		notified: true, notifier: pn.notifier, notifID: pn.notifID,
	})
	c.stats.AcksSent++
}

// require records the notifications a destination must hear answered
// before delivering p: those that sender issued about it to groups whose
// lowest destination of m above them is self (see notifyNext).
func (c *Core) require(p *pend, sender partition.GroupID, dst partition.GroupSet, refs []notifRef) {
	for _, r := range refs {
		if r.group >= c.self || dst.Above(r.group).Min() != c.self {
			continue
		}
		k := notifKey{notifier: sender, group: r.group, id: r.id}
		if !hasKey(p.notifReq, k) {
			p.notifReq = append(p.notifReq, k)
		}
	}
}

func hasKey(ks []notifKey, k notifKey) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

func (c *Core) pend(id multicast.MsgID) *pend {
	p := c.pending[id]
	if p == nil {
		p = &pend{}
		c.pending[id] = p
	}
	return p
}

// notifyNext is strategy (c): the notification self sends when it acts on
// (id, dst): as its lca when it delivers it, as a destination when it
// delivers it, or as a notified group when it answers. Self notifies one
// group: the lowest h above self and below next, m's lowest destination
// above self, to which self knows an earlier message was addressed (h is no
// destination: next is the lowest above self). It returns the notification
// to list in what self sends about the message: none, or that one.
//
// The notifications about m thus travel up one path, lca < h1 < h2 < ... <
// d1 < h3 < ... < d2, every group on it notified by the one before, and
// each destination waits for the acks of the groups notified below it and
// above the destination before it. DESIGN 3.2's rule has every group that
// acts on m notify every group above it that it knows of, and every
// notified group ack to every destination above it; the cascade of
// notifications that rule makes (k intermediate groups: up to k(k+1)/2
// notifications after the notify-once rule, each answered to up to every
// destination above) is what this replaces: at most one notification and
// one ack per intermediate group, 2n aux messages at most per multicast.
// Why nothing is lost:
//   - Knowledge only grows along the path. Each group on it acts after
//     merging the history of the one before (the notification's, or the
//     ack's for a destination, which waits for the acks of the groups
//     notified below it), so it knows every entry any earlier group on the
//     path knew when it acted, and every group those would have notified
//     between them and next is known here, but for entries dropped as
//     stable, which call for no notification: if x, addressed to h, is
//     stable, so is every message h ordered before x, and each of those
//     addressed to a destination d of m was delivered by d, before m.
//   - A notified group h is notified later than under the rule it
//     replaces, with more history: it waits for every open dependency any
//     notifier there would have made it wait for, and its ack carries a
//     longer prefix of its own order.
//   - A destination d above next never hears from h directly, but waits
//     for next's ack (strategy b), which next sends after it delivered m,
//     which it did after h's ack came (h < next): next's history then holds
//     h's chain as h's ack carried it, and next's diff to d ships it. By
//     induction every destination above h learns that chain before it
//     delivers m.
//
// The simulator's seeds (make sim) attack the rule; sim's test of the aux
// bound holds it to 2n per multicast.
//
// What a group B that is cut off must hold up, with any garbage collection:
// let A < B < C, m a message addressed to C and not to B, and x a message
// addressed to B that precedes m in what A knows when it acts on m (as
// m's lca, a destination or a notified group): typically A delivered x,
// then m. C may not deliver m before it holds B's delivery order up to x,
// that is before B delivered x and an envelope B sent after that reached
// C (here, B's answer to the notification about m, which B gives once it
// delivered x). Until then B may still deliver, before x, some y addressed
// to C, and C must deliver y before m (y < x at B, x < m at A: DESIGN
// 3.2's scenario (c), testdata/figure3.txt, whose negative form is the
// cycle C makes when it does not wait). Nothing about m reaches B
// otherwise (B is no destination), so C waits for B's answer for as long
// as B is cut, if x was in flight to B, or B's order up to x had not
// reached C, when the cut began. That wait is inherent to FlexCast, which
// fixes the order of x and m at A without asking B (Skeen orders m among
// its destinations only, and C's later timestamp proposals put y after m).
// So while B is cut, C owes B the wait for: the messages addressed to B
// too (B's ack, strategy b); the messages m above; and what follows either
// kind in what C knows (strategy a: later messages of the same lca, and
// messages they precede in the histories). Nothing else needs B: garbage
// collection sends nothing that anyone waits for (see gc.go and
// TestOutageIsolation). Once B delivered x, and every destination every
// message B ordered before x, x is stable; dropped, it no longer makes
// anyone notify B (knows counts held entries only).
func (c *Core) notifyNext(id multicast.MsgID, dst partition.GroupSet) []notifRef {
	if c.cfg.Strategies.NoNotifs {
		return nil
	}
	next := dst.Above(c.self)
	if next.Empty() {
		return nil
	}
	// A message in no chain here was dropped as stable: every destination
	// delivered it, and none waits for a notification about it. (Self acts
	// on a message after merging a history that holds it: the one that
	// brought its MSG, or the notification it answers.)
	if !c.dag.has(id) {
		return nil
	}
	for h := c.self + 1; h < next.Min(); h++ {
		if c.knows[h] == 0 {
			continue
		}
		c.notifSeq++
		c.send(h, &envelope{kind: envNotif, msg: multicast.Message{ID: id, Dst: dst}, history: c.diff(h), notifIDOut: c.notifSeq})
		c.stats.NotifsSent++
		return []notifRef{{group: h, id: c.notifSeq}}
	}
	return nil
}

// tryDeliver delivers, until nothing changes, the head of each ancestor's
// queue that may be delivered (strategy a).
func (c *Core) tryDeliver() {
	for progress := true; progress; {
		progress = false
		for a := range c.queue {
			for len(c.queue[a]) > 0 {
				id := c.queue[a][0]
				p := c.pending[id]
				if !c.deliverable(id, p) {
					break
				}
				c.queue[a][0] = multicast.MsgID{}
				c.queue[a] = c.queue[a][1:]
				c.remoteDeliver(p)
				progress = true
			}
		}
	}
}

func (c *Core) deliverable(id multicast.MsgID, p *pend) bool {
	if !p.arrived {
		return false
	}
	dst := p.msg.Dst
	if !c.cfg.Strategies.NoAcks {
		if need := c.acksAwaited(dst); p.acks&need != need {
			return false
		}
	}
	for _, k := range p.notifReq {
		if !hasKey(p.notifGot, k) {
			return false
		}
	}
	if c.cfg.Strategies.NoHistoryWait {
		return true
	}
	blocked := c.dag.blocked(id)
	if invariants.Enabled {
		slow := false
		for _, x := range c.dag.openIDs(nil) {
			if x != id && c.dag.reaches(x, id) {
				slow = true
			}
		}
		if slow != blocked {
			invariants.Violated("flexcast: group %d: %s blocked=%v, search says %v", c.self, id, blocked, slow)
		}
	}
	return !blocked
}

// acksAwaited returns the groups whose acks self waits for before it
// delivers a message to dst (strategy b): every destination between the
// lca and self. acksOwed is the other end: the groups self acknowledges it
// to once it delivered it.
func (c *Core) acksAwaited(dst partition.GroupSet) partition.GroupSet {
	return dst.Above(dst.Min()).Below(c.self)
}

func (c *Core) acksOwed(dst partition.GroupSet) partition.GroupSet {
	return dst.Above(c.self)
}

// remoteDeliver delivers a message whose lca is an ancestor, acknowledges it
// to the destinations above, and answers notifications it unblocked.
func (c *Core) remoteDeliver(p *pend) {
	m := p.msg
	delete(c.pending, m.ID)
	c.appendChain(c.self, entry{id: m.ID, dst: m.Dst})
	c.dag.close(m.ID)
	c.emit(m)
	if !c.cfg.Strategies.NoAcks {
		refs := c.notifyNext(m.ID, m.Dst)
		for _, d := range c.acksOwed(m.Dst).Slice() {
			c.send(d, &envelope{kind: envAck, msg: multicast.Message{ID: m.ID, Dst: m.Dst}, history: c.diff(d), notifs: refs})
			c.stats.AcksSent++
		}
	}
	c.release(m.ID)
}

func (c *Core) emit(m multicast.Message) {
	c.out.Deliveries = append(c.out.Deliveries, m)
	c.stats.Deliveries++
}

// appendChain appends e to owner's chain unless it is there already, with an
// edge from the chain's previous last entry: a chain is a prefix of its
// owner's delivery order, so consecutive entries are consecutive deliveries.
func (c *Core) appendChain(owner partition.GroupID, e entry) {
	ch := &c.chains[owner]
	if ch.has(e.id) {
		return
	}
	if invariants.Enabled && c.forgotten[e.id] {
		invariants.Violated("flexcast: group %d appends %s to chain %d after truncating it", c.self, e.id, owner)
	}
	j := c.dag.node(e.id)
	if k := len(ch.nodes); k > 0 {
		c.dag.edgeIdx(ch.nodes[k-1], j)
	}
	ch.index[e.id] = int32(len(ch.entries))
	ch.entries = append(ch.entries, e)
	ch.nodes = append(ch.nodes, j)
	c.count(e, 1)
	if owner != c.self && e.dst.Has(c.self) && !c.chains[c.self].has(e.id) {
		c.dag.open(e.id)
	}
}

// count adjusts knows for e.
func (c *Core) count(e entry, delta int32) {
	for x := uint64(e.dst); x != 0; x &= x - 1 {
		h := lowBit(x)
		c.knows[h] += delta
	}
}

// merge adds a received history, checked by checkHistory: each segment
// names the position of its first entry in its owner's order, reaches the
// chain held here and agrees with it where they overlap, so the entries past
// the chain's end are appended in order, each with an edge from the one
// before: consecutive entries are consecutive deliveries of the owner.
func (c *Core) merge(h []segment) {
	for _, s := range h {
		ch := &c.chains[s.owner]
		held := min(ch.end()-s.start, uint64(len(s.entries)))
		for _, e := range s.entries[held:] {
			c.appendChain(s.owner, e)
		}
	}
}

// diff returns, for self and each ancestor, the chain from the last entry
// shipped to d (inclusive, when still held) to its end, and marks it
// shipped. A chain cut past what d was shipped restarts at its base, the
// stable cut, which sendCutTo sends d ahead of the envelope, as the
// segment would otherwise start past the end of the chain d holds (send
// sends it ahead of every envelope but a round's chain anyway).
func (c *Core) diff(d partition.GroupID) []segment { return c.diffChains(d, 0) }

// diffOwn is diff of self's own chain alone.
func (c *Core) diffOwn(d partition.GroupID) []segment { return c.diffChains(d, int(c.self)) }

// diffChains is diff of the chains first..self.
func (c *Core) diffChains(d partition.GroupID, first int) []segment {
	var h []segment
	for o := first; o < len(c.chains); o++ {
		ch := &c.chains[o]
		end := ch.end()
		sent := c.sent[d][o]
		if sent >= end || len(ch.entries) == 0 {
			// Nothing new, or what is new is stable already: then d learns
			// that from the cut, also if no envelope follows (a
			// garbage-collection round), as it may hold entries of other
			// chains that only this cut lets it drop.
			if sent < end {
				c.sendCutTo(d)
			}
			c.sent[d][o] = end
			continue
		}
		if ch.base > sent {
			c.sendCutTo(d)
		}
		from := ch.base
		if sent > 0 && sent-1 > from {
			from = sent - 1
		}
		h = append(h, segment{owner: partition.GroupID(o), start: from, entries: ch.entries[from-ch.base:]})
		c.sent[d][o] = end
	}
	return h
}

func (c *Core) send(to partition.GroupID, e *envelope) {
	if e.kind != envHist {
		// The cut goes ahead of the messages' envelopes, so that the
		// groups they reach drop what it makes stable even when the
		// highest group cannot reach them; a chain shipped in a round
		// takes it only where its segment needs it (diffChains).
		c.sendCutTo(to)
	}
	var kind multicast.Kind
	about, background := e.msg.ID, false
	switch e.kind {
	case envMsg:
		kind = multicast.KindMsg
	case envAck:
		kind = multicast.KindAck
	case envNotif:
		kind = multicast.KindNotif
	case envHist, envCut:
		kind, about, background = multicast.KindAck, c.gcID(), true
		c.stats.GCSent++
	}
	for _, s := range e.history {
		c.stats.EntriesSent += uint64(len(s.entries))
	}
	c.out.Sends = append(c.out.Sends, multicast.Send{To: to, Kind: kind, About: about, Payload: appendEnvelope(nil, e, c.n, &c.links[to]), Background: background})
}

func lowBit(x uint64) partition.GroupID { return partition.GroupID(bits.TrailingZeros64(x)) }
