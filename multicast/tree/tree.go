// Package tree is the hierarchical ordering protocol (DESIGN 3.4, in the
// style of ByzCast): the baseline that FlexCast is compared with.
//
// Groups form a tree given by the topology. A client sends a message m to
// the tree-lca of its destinations (possibly not a destination itself: the
// protocol is not genuine). A group that receives m, from a client or from its
// parent, forwards m to each child whose subtree holds a destination, once
// per child, and then delivers m if it is a destination.
//
// Why groups agree: if groups g and h both deliver m and m', both messages
// pass through a, the tree-lca of g and h, since each travels down from its
// own tree-lca (an ancestor of a) to every destination. a handles them in
// its log order; every group below a handles its inputs in its log order and
// forwards in that order over FIFO channels, so g and h receive, and deliver,
// m and m' in a's order. The simulator (package sim) checks this, and the
// acyclicity of all the groups' orders together, on every run.
//
// Core is a deterministic state machine with no clock, randomness or I/O;
// its only state is the output not yet drained by Ready and its counters.
// Duplicate client requests are filtered above it (the replication layer
// deduplicates by client id and sequence number); duplicate envelopes by the
// channel layer.
package tree

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// PendingMaxDefault is the bound on undrained outputs used when
// Config.PendingMax is zero.
const PendingMaxDefault = 4096

// Config configures a Core.
type Config struct {
	// Self is the group this core runs at.
	Self partition.GroupID
	// Topology must have a tree.
	Topology *partition.Topology
	// PendingMax bounds admission: a client request whose outputs could
	// make the outputs (sends and deliveries) held for Ready exceed it fails
	// with multicast.ErrBusy and changes nothing; the client retries once
	// Ready drained them. Envelopes are never refused (a refused envelope
	// could not be offered again), so the held outputs stay below
	// PendingMax plus children+1 per envelope stepped since the last Ready:
	// one message's worth when Ready follows every step, as package node
	// does. Zero means PendingMaxDefault; a value below the outputs of one
	// message (children + 1) is refused by New.
	PendingMax int
}

// Stats counts what a core handled. Overhead, the paper's Table 4 figure,
// derives from them.
type Stats struct {
	Requests  uint64 // client requests accepted (this group is their tree-lca)
	Envelopes uint64 // messages received from the parent
	Forwarded uint64 // messages sent to children
	Delivered uint64 // messages delivered
}

// Received returns the payload messages received: requests and envelopes.
func (s Stats) Received() uint64 { return s.Requests + s.Envelopes }

// Overhead returns 1 - delivered/received: the share of the messages a group
// received that it only forwarded. Zero when it received nothing.
func (s Stats) Overhead() float64 {
	if s.Received() == 0 {
		return 0
	}
	return 1 - float64(s.Delivered)/float64(s.Received())
}

// Core is the tree protocol at one group. It is not safe for concurrent use.
type Core struct {
	self       partition.GroupID
	top        *partition.Topology
	parent     partition.GroupID
	children   []partition.GroupID
	subtree    partition.GroupSet
	pendingMax int

	sends      []multicast.Send
	deliveries []multicast.Message
	stats      Stats
}

var _ multicast.Core = (*Core)(nil)

// New returns the core of group cfg.Self.
func New(cfg Config) (*Core, error) {
	if cfg.Topology == nil {
		return nil, errors.New("tree: no topology")
	}
	if !cfg.Topology.HasTree() {
		return nil, errors.New("tree: the topology has no tree")
	}
	if !cfg.Topology.Valid(cfg.Self) {
		return nil, fmt.Errorf("tree: group %d is not in the topology of %d groups", cfg.Self, cfg.Topology.Len())
	}
	if cfg.PendingMax < 0 {
		return nil, fmt.Errorf("tree: PendingMax %d is negative", cfg.PendingMax)
	}
	if cfg.PendingMax == 0 {
		cfg.PendingMax = PendingMaxDefault
	}
	children := cfg.Topology.Children(cfg.Self)
	if cfg.PendingMax < len(children)+1 {
		// One input yields at most one send per child and one delivery; a
		// smaller bound would refuse some inputs forever.
		return nil, fmt.Errorf("tree: PendingMax %d is below the %d outputs one message may produce at group %d",
			cfg.PendingMax, len(children)+1, cfg.Self)
	}
	return &Core{
		self:       cfg.Self,
		top:        cfg.Topology,
		parent:     cfg.Topology.Parent(cfg.Self),
		children:   children,
		subtree:    cfg.Topology.Subtree(cfg.Self),
		pendingMax: cfg.PendingMax,
	}, nil
}

// Entry returns the group a client sends a message to dst to: the tree-lca
// of dst. The topology must have a tree and dst must be a non-empty set of
// its groups; otherwise Entry returns partition.NoGroup.
func Entry(top *partition.Topology, dst partition.GroupSet) partition.GroupID {
	if top == nil || !top.ValidSet(dst) {
		return partition.NoGroup
	}
	return top.TreeLCA(dst)
}

// Stats returns the counters so far.
func (c *Core) Stats() Stats { return c.stats }

// Step handles one input. It returns an error wrapping multicast.ErrNotEntry
// for a request that is not at its tree-lca, multicast.ErrInvalid for a
// malformed request or an envelope that is undecodable or did not come from
// this group's parent along the message's path, and multicast.ErrBusy for a
// request while PendingMax outputs wait for Ready. On error nothing changes.
func (c *Core) Step(in multicast.Input) error {
	switch in.Kind {
	case multicast.InputTick:
		return nil // the protocol has no timeouts
	case multicast.InputRequest:
		m := in.Msg
		if err := multicast.ValidateRequest(c.top, m); err != nil {
			return fmt.Errorf("tree: request at group %d: %w", c.self, err)
		}
		if entry := c.top.TreeLCA(m.Dst); entry != c.self {
			return fmt.Errorf("tree: %w: message %s to %s has tree-lca %d, not group %d",
				multicast.ErrNotEntry, m.ID, m.Dst, entry, c.self)
		}
		if err := c.checkRoom(); err != nil {
			return err
		}
		c.stats.Requests++
		c.handle(multicast.Message{ID: m.ID, Dst: m.Dst, Payload: bytes.Clone(m.Payload)})
		return nil
	case multicast.InputEnvelope:
		// Never refused for want of room: the channel layer has sequenced
		// the envelope and cannot offer it again (package node).
		m, err := c.checkEnvelope(in.From, in.Payload)
		if err != nil {
			return err
		}
		c.stats.Envelopes++
		// The decoded payload aliases the input, which the caller owns.
		m.Payload = bytes.Clone(m.Payload)
		c.handle(m)
		return nil
	default:
		return fmt.Errorf("tree: %w: input kind %d", multicast.ErrInvalid, in.Kind)
	}
}

// checkEnvelope decodes an envelope and checks that it could have been sent
// by a correct parent: it comes from the parent, names a valid application
// message, and the message's tree-lca is a strict ancestor of this group
// (so the parent received it) whose destinations reach into this subtree
// (so the parent forwarded it here).
func (c *Core) checkEnvelope(from partition.GroupID, payload []byte) (multicast.Message, error) {
	if c.parent == partition.NoGroup || from != c.parent {
		return multicast.Message{}, fmt.Errorf("tree: %w: envelope at group %d from group %d, which is not its parent",
			multicast.ErrInvalid, c.self, from)
	}
	m, err := decode(payload, c.top.Len())
	if err != nil {
		return multicast.Message{}, fmt.Errorf("tree: %w: envelope from group %d: %w", multicast.ErrInvalid, from, err)
	}
	if m.ID.IsFlush() {
		return multicast.Message{}, fmt.Errorf("tree: %w: envelope from group %d carries flush id %s",
			multicast.ErrInvalid, from, m.ID)
	}
	if m.Dst&c.subtree == 0 {
		return multicast.Message{}, fmt.Errorf("tree: %w: message %s to %s has no destination in the subtree of group %d",
			multicast.ErrInvalid, m.ID, m.Dst, c.self)
	}
	if lca := c.top.TreeLCA(m.Dst); lca == c.self || !c.top.Subtree(lca).Has(c.self) {
		return multicast.Message{}, fmt.Errorf("tree: %w: message %s to %s has tree-lca %d, not a strict ancestor of group %d",
			multicast.ErrInvalid, m.ID, m.Dst, lca, c.self)
	}
	return m, nil
}

func (c *Core) checkRoom() error {
	if n := len(c.sends) + len(c.deliveries); n+len(c.children)+1 > c.pendingMax {
		return fmt.Errorf("tree: %w: %d outputs wait for Ready at group %d (PendingMax %d)",
			multicast.ErrBusy, n, c.self, c.pendingMax)
	}
	return nil
}

// handle forwards m down the tree, then delivers it here if this group is a
// destination (DESIGN 3.4). Children are visited in rank order, so the sends
// are deterministic.
func (c *Core) handle(m multicast.Message) {
	var payload []byte
	for _, ch := range c.children {
		if c.top.Subtree(ch)&m.Dst == 0 {
			continue
		}
		if payload == nil {
			payload = Encode(nil, m)
		}
		c.sends = append(c.sends, multicast.Send{To: ch, Kind: multicast.KindMsg, About: m.ID, Payload: payload})
		c.stats.Forwarded++
	}
	if m.Dst.Has(c.self) {
		c.deliveries = append(c.deliveries, m)
		c.stats.Delivered++
	}
}

// Ready returns and forgets the sends and deliveries produced so far.
// Sends that carry one message to several children share one payload slice;
// receivers must not modify it.
func (c *Core) Ready() multicast.Output {
	out := multicast.Output{Sends: c.sends, Deliveries: c.deliveries}
	c.sends, c.deliveries = nil, nil
	return out
}

// envelopeMsg tags the only kind of envelope of the protocol, so that a
// future kind cannot be mistaken for a message.
const envelopeMsg byte = 1

// Encode appends the envelope that carries m to a child.
func Encode(b []byte, m multicast.Message) []byte {
	b = append(b, envelopeMsg)
	return multicast.AppendMessage(b, m)
}

// Decode reads an envelope written by Encode for a topology of n groups. The
// returned payload aliases b.
func Decode(b []byte, n int) (multicast.Message, error) {
	m, err := decode(b, n)
	if err != nil {
		return multicast.Message{}, fmt.Errorf("tree: %w", err)
	}
	return m, nil
}

func decode(b []byte, n int) (multicast.Message, error) {
	d := wire.NewDecoder(b)
	if tag := d.Byte(); d.Err() == nil && tag != envelopeMsg {
		d.Fail("unknown envelope tag %d", tag)
	}
	m := multicast.DecodeMessage(d, n)
	if err := d.Finish(); err != nil {
		return multicast.Message{}, err
	}
	return m, nil
}
