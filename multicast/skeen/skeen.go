// Package skeen is Skeen's atomic multicast protocol (DESIGN 3.3): the
// distributed, genuine baseline that FlexCast is compared with.
//
// A client sends message m to its entry group, a destination of m (see
// Entry), which relays m to every other destination: the eager relay of
// DESIGN 4.3, so that a message that reached one correct group reaches all
// of them even if its client crashes. On the first copy of m, each
// destination g ticks its logical clock and proposes the timestamp
// clock*n + g (n groups; the residue makes proposals of distinct groups
// distinct), keeps its own proposal and sends it to the other destinations.
// Proposals that arrive before m are buffered. Once g holds the proposal of
// every destination, m's final timestamp is their maximum: every destination
// computes the same value from the same proposals. g delivers decided
// messages in final timestamp order, holding back a decided message while an
// undecided one might still be given a smaller final timestamp (the comment
// on deliver, in skeen.go, argues why this is safe). Every destination thus
// delivers in one total order, that of the final timestamps, so the union of
// the groups' orders has no cycle.
//
// A local message (one destination) is decided at once with g's proposal and
// waits in the same queue, so it is ordered against the global messages of
// its group.
//
// Core is a deterministic state machine (DESIGN 3.1): it reads no clock,
// draws no random numbers, starts no goroutine and does no I/O, and no map
// iteration reaches its outputs. It assumes what the layers around it
// provide: envelopes from each group arrive exactly once and in FIFO order
// (package channel), and a client request is stepped once per message id
// and at one entry group only (the replication layer deduplicates requests
// by client id and sequence number; the client picks one entry). A second
// copy of a message the core still holds is ignored, but a copy that arrives
// after delivery cannot be recognised: the core forgets delivered messages.
//
// Envelope payloads are a kind byte followed by the kind's fields, written
// with package wire:
//
//	relay: 0x05 id dst payload          (multicast.KindRelay, the message)
//	ts:    0x04 id dst timestamp        (multicast.KindTS, a proposal)
//
// A proposal carries the message's destinations so that it can be checked
// even when it arrives before the message itself.
package skeen

import (
	"bytes"
	"container/heap"
	"errors"
	"fmt"
	"math"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// PendingMaxDefault is the admission bound used when Config.PendingMax is 0.
const PendingMaxDefault = 4096

// proposalMax bounds the timestamps a group accepts from others. Honest
// clocks grow by one per message, so they stay far below it; a received
// proposal raises the clock to at most proposalMax/n, which leaves some
// 2^57 own proposals or more before a timestamp could overflow (propose).
const proposalMax = math.MaxUint64 / 2

// Config configures a Core.
type Config struct {
	// Self is the group this core runs at.
	Self partition.GroupID
	// Topology lists the groups; the tree is not used.
	Topology *partition.Topology
	// PendingMax bounds admission: a client request is refused with
	// multicast.ErrBusy while the messages known and not yet delivered plus
	// the ids holding buffered proposals number PendingMax or more. Envelopes
	// are never refused (see Core.Step). Zero means PendingMaxDefault.
	PendingMax int
}

// Stats describes a core's state. Pending = Undecided + Decided + Buffered
// is the figure that Config.PendingMax bounds at admission.
type Stats struct {
	Pending      int    // messages held: Undecided + Decided + Buffered
	PendingBytes int    // payload bytes of the messages held
	Undecided    int    // known, waiting for proposals
	Decided      int    // final timestamp known, waiting for delivery
	Buffered     int    // ids whose proposals arrived before the message
	PendingPeak  int    // the largest Pending seen
	Delivered    uint64 // messages delivered so far
	Clock        uint64 // the logical clock
}

// Core is Skeen's protocol at one group. Create it with New; it implements
// multicast.Core. It is not safe for concurrent use.
type Core struct {
	self       partition.GroupID
	n          uint64 // number of groups, the stride of timestamps
	top        *partition.Topology
	pendingMax int

	// clock is the logical clock: g's next proposal is (clock+1)*n + self.
	clock uint64
	// entries holds every message known and not delivered, and every id
	// whose proposals arrived before it. Deliveries remove them.
	entries map[multicast.MsgID]*entry
	// undecided holds the known, undecided messages in the order of g's own
	// proposals, which is the order g received them (each proposal exceeds
	// the previous one). Decided messages leave it lazily, from the front,
	// so its head, once cleaned, has the smallest own proposal of all
	// undecided messages.
	undecided []*entry
	// decided is a min-heap of the decided, undelivered messages by final
	// timestamp.
	decided decidedHeap

	undecidedCount int // known entries not decided yet
	bufferedCount  int // entries of unknown messages
	pendingPeak    int
	deliveredCount uint64

	out multicast.Output
}

var _ multicast.Core = (*Core)(nil)

// entry is what g knows about one message id.
type entry struct {
	// msg is the message once g received it (known); before, only ID and
	// Dst are set, from a proposal.
	msg   multicast.Message
	known bool
	// got holds the destinations whose proposal g has, g included once known.
	got partition.GroupSet
	// own is g's proposal (valid once known).
	own uint64
	// ts is the largest proposal held: the final timestamp once got == Dst.
	ts uint64
	// index is the entry's position in the decided heap, -1 outside it.
	index int
}

func (e *entry) isDecided() bool { return e.known && e.got == e.msg.Dst }

// New validates cfg and returns a core with an empty state.
func New(cfg Config) (*Core, error) {
	if cfg.Topology == nil {
		return nil, errors.New("skeen: config has no topology")
	}
	if !cfg.Topology.Valid(cfg.Self) {
		return nil, fmt.Errorf("skeen: self %d is not a group of the topology (%d groups)", cfg.Self, cfg.Topology.Len())
	}
	if cfg.PendingMax < 0 {
		return nil, fmt.Errorf("skeen: PendingMax %d is negative", cfg.PendingMax)
	}
	if cfg.PendingMax == 0 {
		cfg.PendingMax = PendingMaxDefault
	}
	return &Core{
		self:       cfg.Self,
		n:          uint64(cfg.Topology.Len()),
		top:        cfg.Topology,
		pendingMax: cfg.PendingMax,
		entries:    make(map[multicast.MsgID]*entry),
	}, nil
}

// Stats returns a summary of the core's state.
func (c *Core) Stats() Stats {
	size := 0
	for _, e := range c.entries { //flexkv:unordered a sum
		size += len(e.msg.Payload)
	}
	return Stats{
		PendingBytes: size,
		Pending:      len(c.entries),
		Undecided:    c.undecidedCount,
		Decided:      c.decided.Len(),
		Buffered:     c.bufferedCount,
		PendingPeak:  c.pendingPeak,
		Delivered:    c.deliveredCount,
		Clock:        c.clock,
	}
}

// Ready returns the sends and deliveries produced since the last call, and
// forgets them. Every slice it returns is fresh and owned by the caller.
func (c *Core) Ready() multicast.Output {
	out := c.out
	c.out = multicast.Output{}
	return out
}

// Step applies one input. It checks the input fully before changing
// anything: on error the state and the undrained output are as before.
//
// A client request is accepted at a destination of its message (else
// multicast.ErrNotEntry) while fewer than PendingMax messages are pending
// (else multicast.ErrBusy). A request for a message the core still holds is
// ignored. Ticks are ignored: the protocol has no timeouts.
//
// Envelopes are never refused for lack of room. Refusing one would stall its
// FIFO channel, and what waits behind it on that channel may be the very
// proposal that lets this group deliver and free room: a deadlock. How far
// admission at the entry groups limits what envelopes add:
//
//   - Buffered ids: a proposal for m can reach g before m only when g is not
//     m's entry e. m then stays undecided at e, one of the at most
//     PendingMax messages that e admitted and still holds, until g's
//     proposal (sent when m reaches g) arrives at e. So Buffered is at most
//     the sum of the other groups' PendingMax.
//   - Known messages: m counts against its entry's PendingMax until the
//     entry holds every proposal, g's included, so the messages in flight
//     to g, and those g holds before its proposal reached the entry, are
//     bounded by admission. Once the entry has decided m, though, g may
//     still wait for a third group's proposal of an older message and must
//     hold m back (m's final timestamp is larger), while the entry keeps
//     admitting. That part of g's backlog grows with the entries' admission
//     rate times the time g is blocked, not with a configured figure: in
//     Skeen, deliveries at g wait on every group g shares messages with.
//     Stats.PendingPeak shows it; a hard bound would need back-pressure from
//     destinations to entries (a destination's backlog carried in its
//     proposals, say).
func (c *Core) Step(in multicast.Input) error {
	switch in.Kind {
	case multicast.InputRequest:
		return c.request(in.Msg)
	case multicast.InputEnvelope:
		return c.envelope(in.From, in.Payload)
	case multicast.InputTick:
		return nil
	default:
		return fmt.Errorf("skeen: input kind %d: %w", in.Kind, multicast.ErrInvalid)
	}
}

// request handles a client's message at its entry group.
func (c *Core) request(m multicast.Message) error {
	if err := multicast.ValidateRequest(c.top, m); err != nil {
		return fmt.Errorf("skeen: request: %w", err)
	}
	if !m.Dst.Has(c.self) {
		return fmt.Errorf("skeen: request %s to %s at group %d: %w", m.ID, m.Dst, c.self, multicast.ErrNotEntry)
	}
	e := c.entries[m.ID]
	if e != nil {
		if e.msg.Dst != m.Dst {
			return fmt.Errorf("skeen: request %s to %s, but group %d holds it to %s: %w",
				m.ID, m.Dst, c.self, e.msg.Dst, multicast.ErrInvalid)
		}
		if e.known {
			return nil // a second copy of a message held: ignored
		}
	} else if len(c.entries) >= c.pendingMax {
		return fmt.Errorf("skeen: group %d holds %d pending messages (PendingMax %d): %w",
			c.self, len(c.entries), c.pendingMax, multicast.ErrBusy)
	}
	// Eager relay (DESIGN 4.3): the entry hands m to every other
	// destination before its proposal, on the same FIFO channels. If
	// proposals for m are buffered here, another group acted as entry too
	// (the client tried twice); relaying again is harmless: no destination
	// can have delivered m before receiving this group's proposal, which
	// follows the relay, so each still holds m and ignores the copy.
	for _, d := range m.Dst.Remove(c.self).Slice() {
		c.send(d, multicast.KindRelay, m.ID, appendRelay(nil, m))
	}
	c.receive(e, m)
	return nil
}

// envelope handles a payload sent by group from.
func (c *Core) envelope(from partition.GroupID, payload []byte) error {
	if !c.top.Valid(from) || from == c.self {
		return fmt.Errorf("skeen: envelope from group %d at group %d: %w", from, c.self, multicast.ErrInvalid)
	}
	env, err := decode(payload, int(c.n))
	if err != nil {
		return fmt.Errorf("skeen: envelope from group %d: %w: %w", from, multicast.ErrInvalid, err)
	}
	switch env.kind {
	case multicast.KindRelay:
		return c.relay(from, env.msg)
	case multicast.KindTS:
		return c.proposal(from, env.msg.ID, env.msg.Dst, env.ts)
	default:
		panic(fmt.Sprintf("skeen: decode returned envelope kind %s", env.kind))
	}
}

// relay handles message m relayed by its entry group from.
func (c *Core) relay(from partition.GroupID, m multicast.Message) error {
	if err := multicast.ValidateRequest(c.top, m); err != nil {
		return fmt.Errorf("skeen: relay from group %d: %w", from, err)
	}
	if !m.Dst.Has(c.self) || !m.Dst.Has(from) {
		return fmt.Errorf("skeen: relay of %s to %s from group %d at group %d: %w",
			m.ID, m.Dst, from, c.self, multicast.ErrInvalid)
	}
	e := c.entries[m.ID]
	if e != nil {
		if e.msg.Dst != m.Dst {
			return fmt.Errorf("skeen: relay of %s to %s from group %d, but group %d holds it to %s: %w",
				m.ID, m.Dst, from, c.self, e.msg.Dst, multicast.ErrInvalid)
		}
		if e.known {
			return nil // a second copy of a message held: ignored
		}
	}
	c.receive(e, m)
	return nil
}

// proposal handles group from's proposal ts for message id to dst.
func (c *Core) proposal(from partition.GroupID, id multicast.MsgID, dst partition.GroupSet, ts uint64) error {
	switch {
	case id.IsFlush():
		return fmt.Errorf("skeen: proposal from group %d for reserved id %s: %w", from, id, multicast.ErrInvalid)
	case !dst.Has(c.self) || !dst.Has(from):
		return fmt.Errorf("skeen: proposal from group %d for %s to %s at group %d: %w",
			from, id, dst, c.self, multicast.ErrInvalid)
	case ts%c.n != uint64(from):
		return fmt.Errorf("skeen: proposal %d from group %d for %s is not a timestamp of that group: %w",
			ts, from, id, multicast.ErrInvalid)
	case ts > proposalMax:
		return fmt.Errorf("skeen: proposal %d from group %d for %s exceeds %d: %w",
			ts, from, id, uint64(proposalMax), multicast.ErrInvalid)
	}
	e := c.entries[id]
	if e != nil {
		if e.msg.Dst != dst {
			return fmt.Errorf("skeen: proposal from group %d for %s to %s, but group %d holds it to %s: %w",
				from, id, dst, c.self, e.msg.Dst, multicast.ErrInvalid)
		}
		if e.got.Has(from) {
			return fmt.Errorf("skeen: second proposal from group %d for %s: %w", from, id, multicast.ErrInvalid)
		}
	} else {
		// Buffered until the message arrives. Not subject to PendingMax:
		// see Step.
		e = &entry{msg: multicast.Message{ID: id, Dst: dst}, index: -1}
		c.entries[id] = e
		c.bufferedCount++
		c.notePeak()
	}
	// Receiving a proposal advances the clock past it, so every later
	// proposal of g exceeds it.
	c.clock = max(c.clock, ts/c.n)
	e.got = e.got.Add(from)
	e.ts = max(e.ts, ts)
	if e.isDecided() {
		c.undecidedCount--
		c.decide(e)
		c.deliver()
	}
	return nil
}

// receive handles the first copy of m at a destination; e holds the
// proposals buffered for it, if any.
func (c *Core) receive(e *entry, m multicast.Message) {
	if e == nil {
		e = &entry{index: -1}
		c.entries[m.ID] = e
		c.notePeak()
	} else {
		c.bufferedCount--
	}
	m.Payload = bytes.Clone(m.Payload) // the input's buffer is the caller's
	e.msg = m
	e.known = true
	e.own = c.propose()
	e.got = e.got.Add(c.self)
	e.ts = max(e.ts, e.own)
	for _, d := range m.Dst.Remove(c.self).Slice() {
		c.send(d, multicast.KindTS, m.ID, appendProposal(nil, m.ID, m.Dst, e.own))
	}
	if e.isDecided() {
		// A local message, or every other proposal came first.
		c.decide(e)
		c.deliver()
		return
	}
	c.undecidedCount++
	c.undecided = append(c.undecided, e)
}

// propose ticks the clock and returns g's next timestamp.
func (c *Core) propose() uint64 {
	if c.clock >= (math.MaxUint64-uint64(c.self))/c.n {
		// Unreachable: accepted proposals keep the clock below
		// proposalMax/n, and each message adds one.
		panic(fmt.Sprintf("skeen: invariant violated: logical clock %d exhausted", c.clock))
	}
	c.clock++
	return c.clock*c.n + uint64(c.self)
}

// decide records that e's final timestamp is known. The caller has
// accounted for e leaving the undecided messages.
func (c *Core) decide(e *entry) {
	// Every proposal already advanced the clock on arrival; restated here
	// because the delivery rule depends on it: g's later proposals exceed
	// every final timestamp g has decided.
	c.clock = max(c.clock, e.ts/c.n)
	heap.Push(&c.decided, e)
}

// deliver hands out, in final timestamp order, every decided message that
// no undecided message can precede.
//
// Why this is safe. Timestamps never tie: two proposals of one group differ
// in their clock part, and proposals of two groups differ modulo n; a final
// timestamp is one of the proposals, so distinct messages have distinct
// final timestamps, and every destination of m computes the same one. Let g
// deliver m, with final timestamp F, and let m' be any other message to g not
// delivered yet. Then F(m') > F:
//   - m' decided at g: the heap yields m first only if F < F(m').
//   - m' known but undecided at g: m is delivered only while g's own
//     proposal P for m' exceeds F, and F(m'), the maximum of the proposals,
//     is at least P.
//   - m' not yet received by g: deciding m set g's clock to at least F/n, so
//     the proposal g makes when m' arrives, and with it F(m'), exceeds F.
//
// So each group delivers its messages in increasing final timestamp order,
// the same order at every group: agreement on order, and no cycle.
func (c *Core) deliver() {
	for c.decided.Len() > 0 {
		// Drop decided messages from the front: the head is then the
		// undecided message with the smallest own proposal.
		for len(c.undecided) > 0 && c.undecided[0].isDecided() {
			c.undecided[0] = nil
			c.undecided = c.undecided[1:]
		}
		next := c.decided[0]
		if len(c.undecided) > 0 && c.undecided[0].own < next.ts {
			return // that message may still be ordered before next
		}
		heap.Pop(&c.decided)
		delete(c.entries, next.msg.ID)
		c.deliveredCount++
		c.out.Deliveries = append(c.out.Deliveries, next.msg)
	}
	if len(c.undecided) == 0 {
		c.undecided = nil // release the backing array of a drained queue
	}
}

func (c *Core) send(to partition.GroupID, kind multicast.Kind, about multicast.MsgID, payload []byte) {
	c.out.Sends = append(c.out.Sends, multicast.Send{To: to, Kind: kind, About: about, Payload: payload})
}

func (c *Core) notePeak() { c.pendingPeak = max(c.pendingPeak, len(c.entries)) }

// decidedHeap orders decided entries by final timestamp. The id breaks ties
// only to keep the order total should the no-tie argument of deliver ever
// fail; it never does.
type decidedHeap []*entry

func (h decidedHeap) Len() int { return len(h) }

func (h decidedHeap) Less(i, j int) bool {
	if h[i].ts != h[j].ts {
		return h[i].ts < h[j].ts
	}
	return h[i].msg.ID.Less(h[j].msg.ID)
}

func (h decidedHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}

func (h *decidedHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}

func (h *decidedHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}
