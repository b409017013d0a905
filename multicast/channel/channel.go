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
// Bounds. The hold-back queue of each peer holds at most HoldbackMax frames
// and HoldbackBytesMax payload bytes. The outbox is bounded by back-pressure
// rather than refusal: Busy reports true once some outbox holds OutboxMax
// envelopes, or once the backlog behind some peer reaches BacklogBytesMax,
// and the group then admits no new client request (package group). Send
// itself never refuses, because an envelope that a core produces in answer
// to another group's envelope cannot be refused without stalling the
// channel: two groups refusing each other's traffic would deadlock. Since
// each admitted message makes a bounded number of envelopes, the outboxes
// stay bounded by the busy limits plus the envelopes of the messages already
// admitted, which OutboxBytesMax, at least twice BacklogBytesMax, leaves room
// for; a Send past it is counted in Stats.OutboxOverflows.
//
// The backlog behind peer p is the number of payload bytes Self has sent to
// any peer, or taken on otherwise (Charge), since (and including) the oldest
// envelope p has not acknowledged, background envelopes (SendBackground)
// left out: a protocol's own bookkeeping, which no work waits for, such as
// FlexCast's garbage collection. Counting them would make a group that sent
// one to an unreachable peer refuse every request once it has sent the
// backlog bound to anyone, although none of its work waits for that peer.
// It bounds more than the outbox to p: when p is unreachable, the other
// groups hold what Self sent them that waits for p (a FlexCast message
// waiting for p's ack at a group ranked above p, a Skeen message waiting
// behind one whose timestamp p has not proposed), and all of it was sent
// after Self's oldest envelope that p did not acknowledge, give or take what
// p received just before it became unreachable.
//
// Resends cover a window: at most ResendFramesMax frames and ResendBytesMax
// bytes from the oldest unacknowledged one. A repair (a resend after
// ResendTicks or for a nack) then goes on, a window at a time as the
// acknowledgements cover the previous one, up to what was sent when it
// began; what was sent later goes out again only if it, in turn, is nacked
// or times out. The output waiting for Ready is bounded by what one input
// produces, provided Ready is called after each input.
package channel

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/flexkv/flexkv/internal/invariants"
	"github.com/flexkv/flexkv/partition"
)

// Config configures a Channel. Every replica of a group must use the same.
type Config struct {
	Self   partition.GroupID
	Groups int // groups in the cluster (links to every other group)
	// ResendTicks is the number of ticks without acknowledgement progress
	// after which the unacknowledged data frames of a link are sent again,
	// a window at a time (ResendFramesMax, ResendBytesMax). It should exceed
	// the round trip between the farthest groups, in ticks; a shorter one
	// only wastes bandwidth.
	ResendTicks int
	// HoldbackMax is the number of out-of-order data frames kept per sending
	// group; frames beyond that window are dropped (the sender resends them).
	// Zero keeps none: every gap is then filled by resending from the gap on.
	HoldbackMax int
	// OutboxMax is the number of unacknowledged envelopes to one destination
	// at which Busy reports true.
	OutboxMax int

	// The fields below count payload bytes; zero takes the Default value.

	// HoldbackBytesMax bounds the payload bytes held back per sending group;
	// the frames farthest from the gap are dropped first.
	HoldbackBytesMax int
	// BacklogBytesMax is the backlog behind one peer (see the package
	// comment) at which Busy reports true.
	BacklogBytesMax int
	// OutboxBytesMax is the bound on the unacknowledged bytes to one
	// destination that admission control keeps: at least twice
	// BacklogBytesMax, so that the envelopes of admitted work and the
	// protocol's answers (acks, notifications, flushes) fit beyond the
	// point where requests are refused. Send never refuses; one that
	// leaves an outbox beyond it is counted in Stats.OutboxOverflows.
	OutboxBytesMax int
	// ResendFramesMax and ResendBytesMax bound one resend window (at least
	// one frame goes out, whatever its size).
	ResendFramesMax int
	ResendBytesMax  int
}

// Defaults of the byte bounds and resend windows left zero in a Config.
const (
	HoldbackBytesMaxDefault = 8 << 20
	BacklogBytesMaxDefault  = 16 << 20
	OutboxBytesMaxDefault   = 64 << 20
	ResendFramesMaxDefault  = 256
	ResendBytesMaxDefault   = 1 << 20
)

// withDefaults returns c with the zero byte bounds and windows set to their
// defaults. A zero OutboxBytesMax follows a BacklogBytesMax set above a
// quarter of the default, so that setting the busy limit alone stays valid.
func (c Config) withDefaults() Config {
	if c.HoldbackBytesMax == 0 {
		c.HoldbackBytesMax = HoldbackBytesMaxDefault
	}
	if c.BacklogBytesMax == 0 {
		c.BacklogBytesMax = BacklogBytesMaxDefault
	}
	if c.OutboxBytesMax == 0 {
		c.OutboxBytesMax = max(OutboxBytesMaxDefault, 4*c.BacklogBytesMax)
	}
	if c.ResendFramesMax == 0 {
		c.ResendFramesMax = ResendFramesMaxDefault
	}
	if c.ResendBytesMax == 0 {
		c.ResendBytesMax = ResendBytesMaxDefault
	}
	return c
}

// Validate checks c, with the zero byte bounds and windows taken as their
// defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
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
	case c.HoldbackBytesMax < 0:
		return fmt.Errorf("channel: config: holdback bytes max %d is negative", c.HoldbackBytesMax)
	case c.BacklogBytesMax < 0:
		return fmt.Errorf("channel: config: backlog bytes max %d is negative", c.BacklogBytesMax)
	case c.OutboxBytesMax < 0:
		return fmt.Errorf("channel: config: outbox bytes max %d is negative", c.OutboxBytesMax)
	case c.OutboxBytesMax/2 < c.BacklogBytesMax:
		return fmt.Errorf("channel: config: outbox bytes max %d below twice backlog bytes max %d: admitted work would not fit past the busy limit", c.OutboxBytesMax, c.BacklogBytesMax)
	case c.ResendFramesMax < 0:
		return fmt.Errorf("channel: config: resend frames max %d is negative", c.ResendFramesMax)
	case c.ResendBytesMax < 0:
		return fmt.Errorf("channel: config: resend bytes max %d is negative", c.ResendBytesMax)
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
	HoldbackByteDrops uint64 // held-back or arriving frames dropped for HoldbackBytesMax
	OutboxOverflows   uint64 // Sends that left an outbox beyond OutboxBytesMax
}

// Channel is one group's end of its links to every other group. It is not
// safe for concurrent use.
type Channel struct {
	cfg   Config
	links []link // indexed by peer GroupID; links[cfg.Self] stays zero
	stats Stats
	// sentBytes counts the payload bytes of every envelope Send took, to
	// any peer, and the bytes charged: the clock that backlogs are measured
	// on.
	sentBytes uint64

	// Output waiting for Ready; not part of the state proper.
	frames  []Frame
	inbound []Inbound
}

// link is the state of both directions between Self and one peer. It is
// plain data, so that a snapshot encodes it field by field.
type link struct {
	// Sender side: what Self sends to the peer.
	acked       uint64    // the peer's cumulative ack: it applied every seq <= acked
	outbox      []pending // unacknowledged envelopes; outbox[i] has seq acked+1+i
	outboxBytes int       // payload bytes in outbox
	background  int       // envelopes of outbox sent in the background
	// fgSeq is the seq of the oldest envelope of outbox not sent in the
	// background (0: none), so that Backlog finds it without a search on
	// every request while background envelopes pile up before it.
	fgSeq      uint64
	idle       int  // ticks without ack progress or resend; 0 when outbox is empty
	nackServed bool // a nack from the peer was served during this tick
	// A repair in progress resent every seq up to repair (0: none) and goes
	// on, a window at a time, up to repairEnd, the last seq sent when it
	// began.
	repair, repairEnd uint64

	// Receiver side: what the peer sends to Self.
	recv          uint64 // last seq handed up
	holdback      []held // seqs increasing, all in (recv+1, recv+1+HoldbackMax]
	holdbackBytes int    // payload bytes in holdback
	ackDue        bool   // recv advanced, or a duplicate came, since the last frame to the peer
	nackSent      bool   // a nack went to the peer during this tick
}

// pending is an unacknowledged envelope. end is the channel's sentBytes
// once Send took it, so that the backlog behind a peer is sentBytes minus
// the start (end minus size) of its oldest pending envelope.
type pending struct {
	payload    []byte
	end        uint64
	background bool // sent by SendBackground
}

// held is an out-of-order data frame waiting for the gap before it.
type held struct {
	seq     uint64
	payload []byte
}

// firstForeground returns the seq of the oldest envelope of the outbox not
// sent in the background, 0 if none.
func (l *link) firstForeground() uint64 {
	for i, p := range l.outbox {
		if !p.background {
			return l.acked + 1 + uint64(i)
		}
	}
	return 0
}

// sent returns the last seq given to an envelope for the peer.
func (l *link) sent() uint64 { return l.acked + uint64(len(l.outbox)) }

// New returns the channel of group cfg.Self, with nothing sent or received.
func New(cfg Config) (*Channel, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Channel{cfg: cfg.withDefaults(), links: make([]link, cfg.Groups)}, nil
}

// Config returns the channel's configuration, with the defaults filled in.
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
func (c *Channel) Send(to partition.GroupID, payload []byte) { c.send(to, payload, false) }

// SendBackground is Send of an envelope that no work waits for: Busy and
// the backlog leave it out (see the package comment on bounds). It is
// carried like any other, reliably and in order.
func (c *Channel) SendBackground(to partition.GroupID, payload []byte) { c.send(to, payload, true) }

func (c *Channel) send(to partition.GroupID, payload []byte, background bool) {
	l := c.peer(to)
	c.sentBytes += uint64(len(payload))
	l.outbox = append(l.outbox, pending{payload: payload, end: c.sentBytes, background: background})
	if background {
		l.background++
	} else if l.fgSeq == 0 {
		l.fgSeq = l.sent()
	}
	l.outboxBytes += len(payload)
	if l.outboxBytes > c.cfg.OutboxBytesMax {
		c.stats.OutboxOverflows++
	}
	c.emit(to, l.sent(), 0, payload)
	c.stats.DataSent++
	if invariants.Enabled {
		invariants.Hold(c.check())
	}
}

// Charge counts n bytes of work that the group took on outside the channel
// (a client request its core holds) on the clock that backlogs are measured
// on, as if they had been sent: work admitted after an envelope a peer has
// not acknowledged may wait for that peer as much as what was sent after it
// (a local Skeen message behind a global one that the peer has not
// proposed a timestamp for).
func (c *Channel) Charge(n int) {
	if n < 0 {
		panic(fmt.Sprintf("channel: charge of %d bytes", n))
	}
	c.sentBytes += uint64(n)
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
	if invariants.Enabled {
		invariants.Hold(c.check())
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
	for _, p := range l.outbox[:ack-l.acked] {
		l.outboxBytes -= len(p.payload)
		if p.background {
			l.background--
		}
	}
	n := copy(l.outbox, l.outbox[ack-l.acked:])
	clear(l.outbox[n:]) // let the trimmed payloads be collected
	l.outbox = l.outbox[:n]
	l.acked = ack
	if l.fgSeq != 0 && l.fgSeq <= ack {
		// Each background envelope is passed here once: the next search
		// starts behind the foreground one found now.
		l.fgSeq = l.firstForeground()
	}
	l.idle = 0
	if l.repair != 0 && ack >= l.repair {
		// The last window arrived: send the next one, or end the repair.
		if ack >= l.repairEnd || len(l.outbox) == 0 {
			l.repair, l.repairEnd = 0, 0
		} else {
			c.resendWindow(from)
		}
	}
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

// resend starts a repair of the link to peer to: everything sent so far is
// to go out again, from the oldest unacknowledged frame, a window at a time.
func (c *Channel) resend(to partition.GroupID) {
	l := &c.links[to]
	l.repairEnd = l.sent()
	c.resendWindow(to)
}

// resendWindow emits the next window of the repair of the link to peer to:
// from the oldest unacknowledged frame, at most ResendFramesMax frames and
// ResendBytesMax bytes (at least one frame), up to repairEnd. It restarts
// the resend timer.
func (c *Channel) resendWindow(to partition.GroupID) {
	l := &c.links[to]
	size := 0
	n := 0
	for n < len(l.outbox) && n < c.cfg.ResendFramesMax && l.acked+1+uint64(n) <= l.repairEnd {
		p := l.outbox[n].payload
		if n > 0 && size+len(p) > c.cfg.ResendBytesMax {
			break
		}
		size += len(p)
		c.emit(to, l.acked+1+uint64(n), 0, p)
		n++
	}
	c.stats.DataResent += uint64(n)
	l.repair = l.acked + uint64(n)
	if n == 0 {
		l.repair, l.repairEnd = 0, 0
	}
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
			for _, h := range l.holdback[:n] {
				l.holdbackBytes -= len(h.payload)
			}
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
// needed next and never more than HoldbackMax of them. The byte bound is
// kept the same way: past HoldbackBytesMax, the frames farthest from the gap
// go first, the arriving one included.
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
	l.holdbackBytes += len(payload)
	c.stats.HeldBack++
	for l.holdbackBytes > c.cfg.HoldbackBytesMax {
		last := len(l.holdback) - 1
		l.holdbackBytes -= len(l.holdback[last].payload)
		l.holdback[last] = held{}
		l.holdback = l.holdback[:last]
		c.stats.HoldbackByteDrops++
	}
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
	if invariants.Enabled {
		invariants.Hold(c.check())
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
// envelopes, or the backlog behind some peer reached BacklogBytesMax; the
// group should then admit no new request.
func (c *Channel) Busy() bool {
	_, busy := c.BusyWith()
	return busy
}

// BusyWith returns the lowest-ranked group that makes the channel Busy, and
// whether there is one: the group that does not acknowledge what it is
// sent, unreachable or slow, which Busy refuses new work for.
func (c *Channel) BusyWith() (partition.GroupID, bool) {
	for i := range c.links {
		g := partition.GroupID(i)
		if g == c.cfg.Self {
			continue
		}
		if l := &c.links[i]; len(l.outbox)-l.background >= c.cfg.OutboxMax || c.Backlog(g) >= uint64(c.cfg.BacklogBytesMax) {
			return g, true
		}
	}
	return 0, false
}

// Backlog returns the backlog behind group to: the payload bytes sent to
// any group, or charged, since (and including) the oldest envelope to that
// has not acknowledged, background ones left out; 0 when to acknowledged
// everything else.
func (c *Channel) Backlog(to partition.GroupID) uint64 {
	l := c.peer(to)
	if l.fgSeq == 0 {
		return 0
	}
	first := l.outbox[l.fgSeq-l.acked-1]
	return c.sentBytes - (first.end - uint64(len(first.payload)))
}

// OutboxBytes returns the payload bytes to group to not acknowledged yet.
func (c *Channel) OutboxBytes(to partition.GroupID) int { return c.peer(to).outboxBytes }

// HoldbackBytes returns the payload bytes from group from held back.
func (c *Channel) HoldbackBytes(from partition.GroupID) int { return c.peer(from).holdbackBytes }

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
		out[i] = Frame{From: c.cfg.Self, To: to, Seq: l.acked + 1 + uint64(i), Ack: l.recv, Payload: p.payload}
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
// broken: O(groups + unacknowledged and held-back frames). RestoreChannel
// checks what it decoded with it; under the invariants tag, every input
// checks the state it leaves.
func (c *Channel) check() error {
	if len(c.links) != c.cfg.Groups {
		return fmt.Errorf("channel: %d links for %d groups", len(c.links), c.cfg.Groups)
	}
	for i := range c.links {
		l := &c.links[i]
		g := partition.GroupID(i)
		if g == c.cfg.Self {
			if l.acked != 0 || len(l.outbox) != 0 || l.outboxBytes != 0 || l.idle != 0 || l.nackServed || l.repair != 0 || l.repairEnd != 0 ||
				l.recv != 0 || len(l.holdback) != 0 || l.holdbackBytes != 0 || l.ackDue || l.nackSent {
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
		if l.repair != 0 && (l.repair <= l.acked || l.repair > l.repairEnd || l.repairEnd > l.sent()) {
			return fmt.Errorf("channel: link to %d: repair at %d up to %d, acked %d, sent %d", g, l.repair, l.repairEnd, l.acked, l.sent())
		}
		if l.repair == 0 && l.repairEnd != 0 {
			return fmt.Errorf("channel: link to %d: repair end %d without a repair", g, l.repairEnd)
		}
		bytes, prevEnd, background := 0, uint64(0), 0
		for _, p := range l.outbox {
			bytes += len(p.payload)
			if p.background {
				background++
			}
			if p.end < prevEnd+uint64(len(p.payload)) || p.end > c.sentBytes {
				return fmt.Errorf("channel: link to %d: envelope ends at byte %d, after %d, of %d sent", g, p.end, prevEnd, c.sentBytes)
			}
			prevEnd = p.end
		}
		if background != l.background {
			return fmt.Errorf("channel: link to %d: %d background envelopes, counted %d", g, l.background, background)
		}
		if fg := l.firstForeground(); fg != l.fgSeq {
			return fmt.Errorf("channel: link to %d: oldest foreground envelope %d, found %d", g, l.fgSeq, fg)
		}
		if bytes != l.outboxBytes {
			return fmt.Errorf("channel: link to %d: outbox bytes %d, counted %d", g, l.outboxBytes, bytes)
		}
		if len(l.holdback) > c.cfg.HoldbackMax {
			return fmt.Errorf("channel: link from %d: %d held back, max %d", g, len(l.holdback), c.cfg.HoldbackMax)
		}
		prev := l.recv + 1
		bytes = 0
		for _, h := range l.holdback {
			if h.seq <= prev || h.seq-l.recv-1 > uint64(c.cfg.HoldbackMax) {
				return fmt.Errorf("channel: link from %d: held seq %d out of order or window (recv %d)", g, h.seq, l.recv)
			}
			prev = h.seq
			bytes += len(h.payload)
		}
		if bytes != l.holdbackBytes || bytes > c.cfg.HoldbackBytesMax {
			return fmt.Errorf("channel: link from %d: %d bytes held back, counted %d, max %d", g, bytes, l.holdbackBytes, c.cfg.HoldbackBytesMax)
		}
	}
	return nil
}
