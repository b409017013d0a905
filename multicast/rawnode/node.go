package rawnode

import (
	"errors"
	"fmt"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/partition"
)

// Node is a protocol core over the channel layer: the part of a group's
// state machine that the ordering simulator (multicast/sim) drives alone.
// It is not safe for concurrent use.
//
// Flow. A client request goes to the core unless the channel is Busy (the
// group's admission control, which bounds the outboxes and, through the
// backlog, what the other groups hold of this group's work when a peer
// does not acknowledge); its payload is charged to the backlog clock. A frame goes to the
// channel; every envelope it hands up goes to the core, in order. A tick goes
// to the channel, then to the core. After each step of the core, its sends
// go into the channel (and into Output.Sends, for logs and metrics) and its
// deliveries into Output.Deliveries.
//
// An envelope that the core rejects was already sequenced by the channel, so
// it cannot be offered again: it is skipped, the same way on every replica,
// counted in Stats and reported in Output.Rejected. A core must therefore
// reject an envelope only when it is malformed, never for want of room.
//
// Application payloads. The channel also carries payloads of the layer above
// the core (transaction votes, DESIGN 6) beside the protocol's envelopes, so
// that they get the same reliability, FIFO order and leader-change handling.
// Every envelope on the channel starts with one tag byte: tagCore for the
// core's, tagApp for the application's. SendApp queues an application
// payload; those received come out in Output.App, in channel order, and never
// reach the core. An envelope with another tag is rejected like one the core
// rejects.
type Node struct {
	// cur is the current generation of the core; retiring, the older ones
	// kept for what other groups may need of them (generation.go).
	cur      generation
	retiring []generation
	dropped  uint64 // envelopes of a generation no longer kept
	// peerGen: the latest generation each group told this one it started;
	// held, the envelopes for groups that have not started theirs.
	peerGen  []uint64
	held     []heldEnvelope
	builder  Builder
	ch       *channel.Channel
	out      Output
	rejected uint64
	// epoch is the group's epoch, changing whether this group took a change
	// of it that it has not delivered yet (epoch.go).
	epoch    uint64
	changing bool
}

// Output is what Ready drains. The caller owns the slices.
type Output struct {
	Frames     []channel.Frame     // to transmit
	Deliveries []multicast.Message // in delivery order
	Sends      []multicast.Send    // what the core sent, for logs and metrics
	Rejected   []Rejection         // envelopes the core rejected, for logs
	App        []AppInbound        // application payloads received, in channel order
	Requests   []multicast.Message // client requests the core accepted, for logs
	// Changes are the control messages delivered (epoch.go), each with its
	// place among Deliveries; Aborted, the ids of Deliveries of an epoch
	// that had ended here when they were delivered: every destination
	// aborts them alike.
	Changes []Change
	Aborted []multicast.MsgID
}

// The tags of envelopes on the channel.
const (
	tagCore byte = 0
	tagApp  byte = 1
)

// AppInbound is an application payload (a transaction vote) received from
// another group, in channel order.
type AppInbound struct {
	From    partition.GroupID
	Payload []byte
}

// AppSend is an application payload for another group, which the channel
// layer delivers reliably, in FIFO order with the core's envelopes.
type AppSend struct {
	To      partition.GroupID
	About   multicast.MsgID // the transaction it is about, for logs
	Payload []byte
}

// Rejection is an envelope from another group that the core rejected.
type Rejection struct {
	From partition.GroupID
	Err  error
}

// Stats counts what a node did.
type Stats struct {
	Channel           channel.Stats
	EnvelopesRejected uint64 // envelopes the core rejected and the node skipped
	// EnvelopesStale: envelopes of a retired core this group no longer
	// keeps (every group started a later one), skipped (generation.go).
	EnvelopesStale uint64
}

// New returns the node of group cfg.Self over core, which must have no
// output waiting in Ready.
func New(core multicast.Core, cfg channel.Config) (*Node, error) {
	ch, err := channel.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	return newNode(core, ch)
}

func newNode(core multicast.Core, ch *channel.Channel) (*Node, error) {
	if core == nil {
		return nil, errors.New("node: nil core")
	}
	if out := core.Ready(); !out.Empty() {
		return nil, fmt.Errorf("node: core has %d sends and %d deliveries not drained", len(out.Sends), len(out.Deliveries))
	}
	return &Node{cur: generation{from: 1, core: core}, ch: ch, epoch: 1}, nil
}

// Request steps a client request, routed with the group's epoch, into the
// core (RequestAt names the epoch). It returns an error wrapping
// multicast.ErrBusy, and does not step the core, while the channel is Busy;
// it returns the core's error, wrapped, if the core rejects the request.
func (n *Node) Request(m multicast.Message) error { return n.RequestAt(m, n.epoch) }

// request steps m, of epoch, into the core, its payload behind the epoch's
// header.
func (n *Node) request(m multicast.Message, epoch uint64) error {
	if to, busy := n.ch.BusyWith(); busy {
		cfg := n.ch.Config()
		return fmt.Errorf("node: request %s: %w: group %d is unreachable or slow: it has not acknowledged %d envelopes (max %d), %d bytes sent since the oldest of them (max %d)",
			m.ID, multicast.ErrBusy, to, n.ch.OutboxLen(to), cfg.OutboxMax, n.ch.Backlog(to), cfg.BacklogBytesMax)
	}
	if to, busy := n.heldBusy(); busy {
		return fmt.Errorf("node: request %s: %w: group %d is unreachable or slow: it has not started the protocol core of epoch %d, and %d bytes wait for it (max %d)",
			m.ID, multicast.ErrBusy, to, n.cur.from, n.heldBytes(to), n.ch.Config().BacklogBytesMax)
	}
	wrapped := m
	wrapped.Payload = appendEpochHeader(epoch, m.Payload)
	wrapped.Dst = n.cur.ranks.ToRanks(m.Dst)
	err := n.cur.core.Step(multicast.Request(wrapped))
	n.drainCore()
	if err != nil {
		return fmt.Errorf("node: request %s: %w", m.ID, err)
	}
	// The core holds m until it delivers it, which may wait for the
	// group that makes the node busy.
	n.ch.Charge(len(m.Payload))
	n.out.Requests = append(n.out.Requests, m)
	return nil
}

// Receive applies a frame from another group, then steps every envelope the
// channel hands up into the core, in order. A malformed frame returns the
// channel's error (wrapping multicast.ErrInvalid) and changes nothing. The
// node keeps f.Payload: the caller must not modify it afterwards.
func (n *Node) Receive(f channel.Frame) error {
	if err := n.ch.Receive(f); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	out := n.ch.Ready()
	n.out.Frames = append(n.out.Frames, out.Frames...)
	for _, in := range out.Inbound {
		if err := n.inbound(in.From, in.Payload); err != nil {
			n.reject(in.From, err)
		}
	}
	return nil
}

// inbound routes one envelope the channel handed up, by its tag.
func (n *Node) inbound(from partition.GroupID, payload []byte) error {
	if len(payload) == 0 {
		return fmt.Errorf("%w: node: empty envelope from group %d", multicast.ErrInvalid, from)
	}
	switch payload[0] {
	case tagApp:
		n.out.App = append(n.out.App, AppInbound{From: from, Payload: payload[1:]})
		return nil
	case tagCore:
		return n.stepEnvelope(from, 1, payload[1:])
	case tagCoreGen, tagStarted:
		d := wire.NewDecoder(payload[1:])
		gen := d.Uvarint()
		if d.Err() != nil || gen < 2 {
			return fmt.Errorf("%w: node: envelope from group %d with a malformed generation", multicast.ErrInvalid, from)
		}
		if payload[0] == tagStarted {
			if err := d.Finish(); err != nil {
				return fmt.Errorf("%w: node: start of a generation from group %d: %w", multicast.ErrInvalid, from, err)
			}
			n.started(from, gen)
			return nil
		}
		return n.stepEnvelope(from, gen, payload[len(payload)-d.Len():])
	default:
		return fmt.Errorf("%w: node: envelope from group %d without a known tag", multicast.ErrInvalid, from)
	}
}

// reject counts an envelope a core rejected, which the node skips.
func (n *Node) reject(from partition.GroupID, err error) {
	if errors.Is(err, multicast.ErrBusy) {
		// Skipping it would lose an envelope that the sender will never
		// offer again: the core breaks its contract.
		panic(fmt.Sprintf("node: core refused an envelope from group %d as busy: %v", from, err))
	}
	n.rejected++
	n.out.Rejected = append(n.out.Rejected, Rejection{From: from, Err: err})
}

// Tick advances the channel's clock, then the core's, by one tick. While
// the node is Busy the core's clock stands still: the only timer of the
// cores is FlexCast's flush, whose envelopes would pile up, one per timer
// period, in the outbox of the group that does not acknowledge, and at the
// groups that wait for it; a flush that cannot complete frees nothing.
func (n *Node) Tick() {
	n.ch.Tick()
	if n.ch.Busy() {
		return
	}
	if err := n.cur.core.Step(multicast.Tick()); err != nil {
		// A tick is never malformed.
		panic(fmt.Sprintf("node: core rejected a tick: %v", err))
	}
	n.drainCore()
}

// drainCore routes what the core produced: its sends into the channel, its
// deliveries to the output. A send the core marks Background goes in the
// background, so that a peer that does not acknowledge it does not make
// the group refuse requests (channel.SendBackground).
func (n *Node) drainCore() {
	// A copy: a change among the deliveries starts a new generation.
	g := n.cur
	out := g.core.Ready()
	n.sendAll(&g, out.Sends)
	for _, m := range out.Deliveries {
		if n.cur.from != g.from {
			// A change among them started a new generation: by the
			// stop-sign, nothing of the old one comes after it.
			panic(fmt.Sprintf("node: the core of generation %d delivered %s after the change that ended it", g.from, m.ID))
		}
		m.Dst = g.ranks.ToGroups(m.Dst)
		n.deliver(m)
	}
}

// tagged returns payload behind tag, in a new slice (the channel keeps it).
func tagged(tag byte, payload []byte) []byte {
	b := make([]byte, 1+len(payload))
	b[0] = tag
	copy(b[1:], payload)
	return b
}

// SendApp queues application payloads for other groups on the channel. It is
// never refused: admission control applies to requests, and an application
// payload answers something already admitted. It panics on a destination
// that is not a peer (a caller's bug: the executor sends only to the
// destinations of a delivered message).
func (n *Node) SendApp(sends []AppSend) {
	for _, s := range sends {
		n.ch.Send(s.To, tagged(tagApp, s.Payload))
	}
}

// Ready returns and forgets what the node produced since the last call.
func (n *Node) Ready() Output {
	ch := n.ch.Ready()
	if len(ch.Inbound) != 0 {
		// Only Receive makes the channel hand envelopes up, and it steps
		// them into the core at once.
		panic(fmt.Sprintf("node: %d envelopes handed up outside Receive", len(ch.Inbound)))
	}
	out := n.out
	out.Frames = append(out.Frames, ch.Frames...)
	n.out = Output{}
	return out
}

// Quiet reports whether ticks would change nothing now: the channel is
// quiet (channel.Channel.Quiet) and the core has no timer running (a core
// that implements multicast.Timed and says so). The replica's leader may
// then stop proposing ticks until another input comes.
func (n *Node) Quiet() bool {
	if t, ok := n.cur.core.(multicast.Timed); ok && t.TimerRunning() {
		return false
	}
	return n.ch.Quiet()
}

// Busy reports whether the node refuses new requests (channel.Channel.Busy).
func (n *Node) Busy() bool {
	_, busy := n.BusyWith()
	return busy
}

// BusyWith returns the group whose full outbox makes the node refuse new
// requests (channel.Channel.BusyWith).
func (n *Node) BusyWith() (partition.GroupID, bool) {
	if to, busy := n.ch.BusyWith(); busy {
		return to, busy
	}
	return n.heldBusy()
}

// OutboxLen returns the number of envelopes to group to not acknowledged yet.
func (n *Node) OutboxLen(to partition.GroupID) int { return n.ch.OutboxLen(to) }

// OutboxBytes returns the payload bytes to group to not acknowledged yet.
func (n *Node) OutboxBytes(to partition.GroupID) int { return n.ch.OutboxBytes(to) }

// Backlog returns the bytes sent to any group since the oldest envelope
// that group to has not acknowledged (channel.Channel.Backlog).
func (n *Node) Backlog(to partition.GroupID) uint64 { return n.ch.Backlog(to) }

// HoldbackBytes returns the payload bytes from group from held back.
func (n *Node) HoldbackBytes(from partition.GroupID) int { return n.ch.HoldbackBytes(from) }

// Unacked returns the unacknowledged data frames for group to, for a new
// leader to resend (channel.Channel.Unacked). It changes nothing.
func (n *Node) Unacked(to partition.GroupID) []channel.Frame { return n.ch.Unacked(to) }

// AckFrame returns a control-only frame carrying the group's position for
// group to (channel.Channel.AckFrame). It changes nothing.
func (n *Node) AckFrame(to partition.GroupID) channel.Frame { return n.ch.AckFrame(to) }

// Stats returns the counters of the node and of its channel.
func (n *Node) Stats() Stats {
	return Stats{Channel: n.ch.Stats(), EnvelopesRejected: n.rejected, EnvelopesStale: n.dropped}
}

// AppendSnapshot appends a deterministic encoding of the node's own state:
// the channel and the node's counters. The core's state is the core's to
// encode. Call it with the output drained, as
// (*channel.Channel).AppendSnapshot requires.
func (n *Node) AppendSnapshot(b []byte) []byte {
	if len(n.out.Frames) != 0 || len(n.out.Deliveries) != 0 || len(n.out.Sends) != 0 || len(n.out.Rejected) != 0 || len(n.out.App) != 0 || len(n.out.Requests) != 0 || len(n.out.Changes) != 0 {
		panic("node: snapshot with undrained output")
	}
	b = append(b, 0, nodeSnapshotVersion)
	b = wire.AppendBytes(b, n.ch.AppendSnapshot(nil))
	b = wire.AppendUvarint(b, n.rejected)
	b = n.appendEpochs(b)
	return n.appendGenerations(b)
}

// nodeSnapshotVersion is the version of the node's snapshot, written after
// a zero byte: version 1 had no version, and starts with the length of the
// channel's snapshot, never zero; it has no epoch state, and restores at
// epoch 1. Version 2 ends with the epoch state; version 3 adds the
// generations of the core (generation.go).
const (
	nodeSnapshotV2      = 2
	nodeSnapshotVersion = 3
)

// Restore returns a node over core, the current generation's with its
// ranks, whose state the caller restored, with the channel, counters and generations that
// AppendSnapshot encoded in b; bld restores the retiring cores, and makes
// the next generations (SetBuilder); nil when every change keeps the core.
// Errors wrap wire.ErrCorrupt when b is corrupt or does not fit cfg.
func Restore(core multicast.Core, ranks partition.Ranks, cfg channel.Config, b []byte, bld Builder) (*Node, error) {
	d := wire.NewDecoder(b)
	v := byte(1)
	if len(b) > 0 && b[0] == 0 {
		d.Byte()
		if v = d.Byte(); d.Err() == nil && v != nodeSnapshotV2 && v != nodeSnapshotVersion {
			d.Fail("node snapshot version %d, want %d or %d", v, nodeSnapshotV2, nodeSnapshotVersion)
		}
	}
	snap := d.Bytes()
	rejected := d.Uvarint()
	if d.Err() != nil {
		return nil, fmt.Errorf("node: restore: %w", d.Err())
	}
	ch, err := channel.RestoreChannel(snap, cfg)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n, err := newNode(core, ch)
	if err != nil {
		return nil, err
	}
	n.builder = bld
	n.cur.ranks = ranks
	n.rejected = rejected
	if v >= nodeSnapshotV2 {
		n.decodeEpochs(d)
	}
	if v >= nodeSnapshotVersion && d.Err() == nil {
		n.decodeGenerations(d, bld)
	}
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("node: restore: %w", err)
	}
	return n, nil
}
