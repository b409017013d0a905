// Package channel is FlexKV's reliable FIFO channel layer between groups
// (DESIGN 4): it turns links that lose, duplicate and reorder frames into
// channels that hand each envelope up exactly once, in the order it was sent,
// which is what the protocol cores assume (DESIGN 3.1).
//
// A Channel is one group's end of all its links, a link per direction per
// peer group. Like the cores, it is a deterministic state machine: no clock,
// no randomness, no goroutines, no I/O. It lives inside the replicated state
// of its group, so every replica knows what was sent and received; only the
// leader transmits the frames that Ready hands out.
//
// Sender side, per peer: envelopes get consecutive sequence numbers from 1
// and stay in an outbox until the peer acknowledges them. They are sent again
// when the peer names a gap (a nack) and when the acknowledgements stop
// progressing for Config.ResendTicks ticks.
//
// Receiver side, per peer: recv is the last sequence number handed up. A
// frame with recv+1 is handed up, followed by whatever the hold-back queue
// holds next; an older one is a duplicate, dropped (and an acknowledgement
// becomes due, so that the sender learns); a newer one is held back, within a
// window of Config.HoldbackMax sequence numbers beyond the gap, and a nack
// asks for the gap, at most once per tick per peer so that a burst of
// out-of-order frames does not provoke a storm of nacks and resends.
//
// Every frame carries the sender's receive position for the peer as a
// cumulative acknowledgement; a tick sends a control-only frame to each peer
// that is owed an acknowledgement and got no other frame since.
//
// Bounds. The hold-back queue of each peer holds at most HoldbackMax frames.
// The outbox is bounded by back-pressure rather than refusal: Busy reports
// true once some outbox holds OutboxMax envelopes, and the group then admits
// no new client request (package node). Send itself never refuses, because an
// envelope that a core produces in answer to another group's envelope cannot
// be refused without stalling the channel: two groups refusing each other's
// traffic would deadlock. Since each admitted message makes a bounded number
// of envelopes, the outboxes stay bounded by OutboxMax plus the envelopes of
// the messages already admitted. The output waiting for Ready is bounded by
// what one input produces, provided Ready is called after each input.
package channel

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/flexkv/flexkv/partition"
)

// Config configures a Channel. Every replica of a group must use the same.
type Config struct {
	Self   partition.GroupID
	Groups int // groups in the cluster (links to every other group)
	// ResendTicks is the number of ticks without acknowledgement progress
	// after which the unacknowledged data frames of a link are sent again.
	// Each expiry resends the whole outbox, so it should exceed the round
	// trip between the farthest groups, in ticks; a shorter one only wastes
	// bandwidth (the outbox bounds each resend).
	ResendTicks int
	// HoldbackMax is the number of out-of-order data frames kept per sending
	// group; frames beyond that window are dropped (the sender resends them).
	// Zero keeps none: every gap is then filled by resending from the gap on.
	HoldbackMax int
	// OutboxMax is the number of unacknowledged envelopes to one destination
	// at which Busy reports true.
	OutboxMax int
}

// Validate checks c.
func (c Config) Validate() error {
	switch {
	case c.Groups < 1 || c.Groups > partition.GroupsMax:
		return fmt.Errorf("channel: config: groups %d out of range [1,%d]", c.Groups, partition.GroupsMax)
	case c.Self < 0 || int(c.Self) >= c.Groups:
		return fmt.Errorf("channel: config: self %d out of range [0,%d)", c.Self, c.Groups)
	case c.ResendTicks < 1:
		return fmt.Errorf("channel: config: resend ticks %d, want at least 1", c.ResendTicks)
	case c.HoldbackMax < 0:
		return fmt.Errorf("channel: config: holdback max %d is negative", c.HoldbackMax)
	case c.OutboxMax < 1:
		return fmt.Errorf("channel: config: outbox max %d, want at least 1", c.OutboxMax)
	}
	return nil
}

// Inbound is an envelope handed up: the next one from group From, in order.
type Inbound struct {
	From    partition.GroupID
	Payload []byte
}

// Output is what Ready drains. The caller owns the slices.
type Output struct {
	Frames  []Frame   // to transmit, in the order they were made
	Inbound []Inbound // per sender in seq order, each envelope exactly once
}

// Stats counts what a channel did. Acknowledgements ride on every frame;
// AcksSent counts only the control-only frames sent for them.
type Stats struct {
	DataSent          uint64 // data frames sent for the first time
	DataResent        uint64 // data frames sent again, after ResendTicks or on a nack
	Delivered         uint64 // envelopes handed up
	DuplicatesDropped uint64 // data frames already handed up or already held back
	HeldBack          uint64 // data frames put in a hold-back queue
	HoldbackDrops     uint64 // out-of-order data frames beyond the hold-back window
	NacksSent         uint64
	NacksServed       uint64
	AcksSent          uint64
}

// Channel is one group's end of its links to every other group. It is not
// safe for concurrent use.
type Channel struct {
	cfg   Config
	links []link // indexed by peer GroupID; links[cfg.Self] stays zero
	stats Stats

	// Output waiting for Ready; not part of the state proper.
	frames  []Frame
	inbound []Inbound
}

// link is the state of both directions between Self and one peer. It is
// plain data, so that a snapshot encodes it field by field.
type link struct {
	// Sender side: what Self sends to the peer.
	acked      uint64   // the peer's cumulative ack: it applied every seq <= acked
	outbox     [][]byte // unacknowledged payloads; outbox[i] has seq acked+1+i
	idle       int      // ticks without ack progress or resend; 0 when outbox is empty
	nackServed bool     // a nack from the peer was served during this tick

	// Receiver side: what the peer sends to Self.
	recv     uint64 // last seq handed up
	holdback []held // seqs increasing, all in (recv+1, recv+1+HoldbackMax]
	ackDue   bool   // recv advanced, or a duplicate came, since the last frame to the peer
	nackSent bool   // a nack went to the peer during this tick
}

// held is an out-of-order data frame waiting for the gap before it.
type held struct {
	seq     uint64
	payload []byte
}

// sent returns the last seq given to an envelope for the peer.
func (l *link) sent() uint64 { return l.acked + uint64(len(l.outbox)) }

// New returns the channel of group cfg.Self, with nothing sent or received.
func New(cfg Config) (*Channel, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Channel{cfg: cfg, links: make([]link, cfg.Groups)}, nil
}

// Config returns the channel's configuration.
func (c *Channel) Config() Config { return c.cfg }

// peer returns the link to g, which must be another group of the cluster:
// callers of Send are cores, and a core that names a wrong group is broken.
func (c *Channel) peer(g partition.GroupID) *link {
	if g < 0 || int(g) >= c.cfg.Groups || g == c.cfg.Self {
		panic(fmt.Sprintf("channel: group %d is not a peer of group %d in a cluster of %d", g, c.cfg.Self, c.cfg.Groups))
	}
	return &c.links[g]
}

// Send gives payload the next seq for group to, keeps it in the outbox until
// to acknowledges it, and emits a data frame. The channel keeps payload: the
// caller must not modify it afterwards. Send never refuses (see the package
// comment on bounds); to must be another group of the cluster.
func (c *Channel) Send(to partition.GroupID, payload []byte) {
	l := c.peer(to)
	l.outbox = append(l.outbox, payload)
	c.emit(to, l.sent(), 0, payload)
	c.stats.DataSent++
}

// emit queues a frame to peer to, carrying Self's receive position for it,
// which settles any acknowledgement due to it.
func (c *Channel) emit(to partition.GroupID, seq, nack uint64, payload []byte) {
	l := &c.links[to]
	c.frames = append(c.frames, Frame{From: c.cfg.Self, To: to, Seq: seq, Ack: l.recv, Nack: nack, Payload: payload})
	l.ackDue = false
}

// Receive applies a frame that arrived from another group: its ack, its nack
// and its data. A malformed frame (wrong receiver, a group out of range, an
// ack of envelopes never sent, ...) returns an error wrapping
// multicast.ErrInvalid and changes nothing. The channel keeps f.Payload: the
// caller must not modify it afterwards.
func (c *Channel) Receive(f Frame) error {
	if err := checkFrame(f, c.cfg.Groups); err != nil {
		return err
	}
	if f.To != c.cfg.Self {
		return invalid(f, "addressed to another group than %d", c.cfg.Self)
	}
	l := &c.links[f.From]
	if sent := l.sent(); f.Ack > sent {
		return invalid(f, "acknowledges seq %d, but %d were sent", f.Ack, sent)
	}
	c.ack(f.From, f.Ack)
	if f.Nack != 0 {
		c.serveNack(f.From, f.Nack)
	}
	if f.Seq != 0 {
		c.data(f.From, f.Seq, f.Payload)
	}
	return nil
}

// ack trims the outbox to from up to the cumulative ack. Frames may arrive
// out of order, so an ack at or below the last one is stale and ignored.
func (c *Channel) ack(from partition.GroupID, ack uint64) {
	l := &c.links[from]
	if ack <= l.acked {
		return
	}
	n := copy(l.outbox, l.outbox[ack-l.acked:])
	clear(l.outbox[n:]) // let the trimmed payloads be collected
	l.outbox = l.outbox[:n]
	l.acked = ack
	l.idle = 0
}

// serveNack resends the unacknowledged frames to from, which reported a gap
// at seq nack. The frame's ack (nack-1) is applied already, so nack <=
// acked+1; a smaller nack is stale: from has acknowledged beyond it since.
// A nack is served at most once per tick per peer, so that nacks duplicated
// by the network do not multiply resends.
func (c *Channel) serveNack(from partition.GroupID, nack uint64) {
	l := &c.links[from]
	if nack != l.acked+1 || len(l.outbox) == 0 || l.nackServed {
		return
	}
	l.nackServed = true
	c.stats.NacksServed++
	c.resend(from)
}

// resend emits every unacknowledged data frame to peer to, in seq order, and
// restarts its resend timer.
func (c *Channel) resend(to partition.GroupID) {
	l := &c.links[to]
	for i, p := range l.outbox {
		c.emit(to, l.acked+1+uint64(i), 0, p)
	}
	c.stats.DataResent += uint64(len(l.outbox))
	l.idle = 0
}

// data applies data frame seq from peer from.
func (c *Channel) data(from partition.GroupID, seq uint64, payload []byte) {
	l := &c.links[from]
	switch {
	case seq <= l.recv:
		// The sender has not learnt that we have it: tell it on the next tick.
		c.stats.DuplicatesDropped++
		l.ackDue = true
	case seq == l.recv+1:
		c.deliver(from, payload)
		n := 0
		for n < len(l.holdback) && l.holdback[n].seq == l.recv+1 {
			c.deliver(from, l.holdback[n].payload)
			n++
		}
		if n > 0 {
			k := copy(l.holdback, l.holdback[n:])
			clear(l.holdback[k:])
			l.holdback = l.holdback[:k]
		}
	default:
		c.hold(from, seq, payload)
		if !l.nackSent {
			l.nackSent = true
			c.stats.NacksSent++
			c.emit(from, 0, l.recv+1, nil)
		}
	}
}

// deliver hands up the next envelope from peer from.
func (c *Channel) deliver(from partition.GroupID, payload []byte) {
	l := &c.links[from]
	l.recv++
	l.ackDue = true
	c.inbound = append(c.inbound, Inbound{From: from, Payload: payload})
	c.stats.Delivered++
}

// hold keeps data frame seq > recv+1 from peer from if it falls in the
// hold-back window. The window, rather than the first HoldbackMax frames to
// arrive, decides what is kept, so that the queue always holds the frames
// needed next and never more than HoldbackMax of them.
func (c *Channel) hold(from partition.GroupID, seq uint64, payload []byte) {
	l := &c.links[from]
	if seq-l.recv-1 > uint64(c.cfg.HoldbackMax) {
		c.stats.HoldbackDrops++
		return
	}
	i, found := slices.BinarySearchFunc(l.holdback, seq, func(h held, s uint64) int { return cmp.Compare(h.seq, s) })
	if found {
		c.stats.DuplicatesDropped++
		return
	}
	l.holdback = slices.Insert(l.holdback, i, held{seq: seq, payload: payload})
	c.stats.HeldBack++
}

// Tick advances the channel's logical clock by one tick. For each peer, in
// GroupID order: the nack limits restart; the unacknowledged frames are sent
// again if the ack has not progressed for ResendTicks ticks; a control-only
// ack frame goes out if an acknowledgement is due and no frame carried it.
func (c *Channel) Tick() {
	for i := range c.links {
		g := partition.GroupID(i)
		if g == c.cfg.Self {
			continue
		}
		l := &c.links[i]
		l.nackSent = false
		l.nackServed = false
		if len(l.outbox) > 0 {
			l.idle++
			if l.idle >= c.cfg.ResendTicks {
				c.resend(g)
			}
		}
		if l.ackDue {
			c.stats.AcksSent++
			c.emit(g, 0, 0, nil)
		}
	}
}

// Ready returns and forgets the frames to transmit and the envelopes handed
// up since the last call. Call it after every input.
func (c *Channel) Ready() Output {
	out := Output{Frames: c.frames, Inbound: c.inbound}
	c.frames, c.inbound = nil, nil
	return out
}

// Busy reports whether some outbox holds OutboxMax or more unacknowledged
// envelopes; the group should then admit no new request.
func (c *Channel) Busy() bool {
	_, busy := c.BusyWith()
	return busy
}

// BusyWith returns the lowest-ranked group whose outbox is full, and
// whether there is one: the group that does not acknowledge what it is
// sent, unreachable or slow, which Busy refuses new work for.
func (c *Channel) BusyWith() (partition.GroupID, bool) {
	for i := range c.links {
		if len(c.links[i].outbox) >= c.cfg.OutboxMax {
			return partition.GroupID(i), true
		}
	}
	return 0, false
}

// Quiet reports whether the channel has nothing that a tick would move: no
// unacknowledged envelope (to resend), no out-of-order frame held back (to
// nack), no acknowledgement owed and no nack sent this tick. A quiet
// channel stays quiet until an input other than a tick comes.
func (c *Channel) Quiet() bool {
	for i := range c.links {
		l := &c.links[i]
		if len(l.outbox) != 0 || len(l.holdback) != 0 || l.ackDue || l.nackSent || l.nackServed {
			return false
		}
	}
	return true
}

// OutboxLen returns the number of envelopes to group to that are not
// acknowledged yet.
func (c *Channel) OutboxLen(to partition.GroupID) int { return len(c.peer(to).outbox) }

// Unacked returns every unacknowledged data frame for group to, in seq order,
// each carrying the current ack. A new leader's transmitter resends these.
// It changes nothing; the payloads are the channel's and must not be
// modified.
func (c *Channel) Unacked(to partition.GroupID) []Frame {
	l := c.peer(to)
	out := make([]Frame, len(l.outbox))
	for i, p := range l.outbox {
		out[i] = Frame{From: c.cfg.Self, To: to, Seq: l.acked + 1 + uint64(i), Ack: l.recv, Payload: p}
	}
	return out
}

// AckFrame returns a control-only frame to group to that carries the current
// ack, for a new leader to announce its group's position. It changes nothing.
func (c *Channel) AckFrame(to partition.GroupID) Frame {
	return Frame{From: c.cfg.Self, To: to, Ack: c.peer(to).recv}
}

// Stats returns the counters.
func (c *Channel) Stats() Stats { return c.stats }

// check verifies the invariants of the state and returns the first one
// broken. It is cheap: O(groups + held-back frames).
func (c *Channel) check() error {
	if len(c.links) != c.cfg.Groups {
		return fmt.Errorf("channel: %d links for %d groups", len(c.links), c.cfg.Groups)
	}
	for i := range c.links {
		l := &c.links[i]
		g := partition.GroupID(i)
		if g == c.cfg.Self {
			if l.acked != 0 || len(l.outbox) != 0 || l.idle != 0 || l.nackServed ||
				l.recv != 0 || len(l.holdback) != 0 || l.ackDue || l.nackSent {
				return fmt.Errorf("channel: link of group %d to itself is used", g)
			}
			continue
		}
		if l.sent() < l.acked {
			return fmt.Errorf("channel: link to %d: seq overflow", g)
		}
		if l.idle < 0 || l.idle >= c.cfg.ResendTicks || (len(l.outbox) == 0 && l.idle != 0) {
			return fmt.Errorf("channel: link to %d: idle %d with %d unacked, resend ticks %d", g, l.idle, len(l.outbox), c.cfg.ResendTicks)
		}
		if len(l.holdback) > c.cfg.HoldbackMax {
			return fmt.Errorf("channel: link from %d: %d held back, max %d", g, len(l.holdback), c.cfg.HoldbackMax)
		}
		prev := l.recv + 1
		for _, h := range l.holdback {
			if h.seq <= prev || h.seq-l.recv-1 > uint64(c.cfg.HoldbackMax) {
				return fmt.Errorf("channel: link from %d: held seq %d out of order or window (recv %d)", g, h.seq, l.recv)
			}
			prev = h.seq
		}
	}
	return nil
}
