package tree

import (
	"fmt"
	"math/bits"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/partition"
)

// The snapshot of a core opens with snapshotMagic, which names the protocol
// (so that another core's snapshot is refused), and snapshotVersion.
const (
	snapshotMagic   = 'T'
	snapshotVersion = 1
)

// Snapshot layout, in unsigned varints (package wire) after the first two
// bytes:
//
//	magic, version, groups n, self
//	parent+1 of every group, in rank order (0 for the root)
//	Requests, Envelopes, Forwarded, Delivered
//
// The counters are the core's whole state (see the package comment). The
// tree is part of the configuration; it is written down so that a snapshot
// is refused by a core configured with another tree, where the counters
// would describe a different role.

// AppendSnapshot appends a deterministic encoding of the core's state. It
// encodes the state only, not the output waiting for Ready, so it panics if
// Ready has output left to drain: those sends and deliveries would be lost.
func (c *Core) AppendSnapshot(b []byte) []byte {
	if len(c.sends) != 0 || len(c.deliveries) != 0 {
		panic(fmt.Sprintf("tree: snapshot with undrained output (%d sends, %d deliveries)", len(c.sends), len(c.deliveries)))
	}
	n := c.top.Len()
	b = wire.AppendSnapshotHeader(b, wire.SnapshotHeader{Magic: snapshotMagic, Version: snapshotVersion, Groups: n, Self: c.self})
	for g := range partition.GroupID(n) {
		b = wire.AppendUvarint(b, uint64(c.top.Parent(g)+1))
	}
	for _, v := range c.stats.counters() {
		b = wire.AppendUvarint(b, *v)
	}
	return b
}

// Restore returns a core configured by cfg, as New would, in the state that
// AppendSnapshot encoded in b. The snapshot must come from the same group
// (cfg.Self) of a cluster of the same size and tree. Restore checks what
// holds of the counters after any sequence of inputs Step accepts. A
// corrupt snapshot, or one that does not fit cfg, yields an error wrapping
// wire.ErrCorrupt; an invalid cfg, New's error. Restore never panics.
func Restore(cfg Config, b []byte) (*Core, error) {
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := c.restore(wire.NewDecoder(b)); err != nil {
		return nil, fmt.Errorf("tree: restore group %d: %w", cfg.Self, err)
	}
	return c, nil
}

func (c *Core) restore(d *wire.Decoder) error {
	n := c.top.Len()
	d.SnapshotHeader(wire.SnapshotHeader{Magic: snapshotMagic, Version: snapshotVersion, Groups: n, Self: c.self}, "tree")
	for g := range partition.GroupID(n) {
		if p := d.Uvarint(); d.Err() == nil && p != uint64(c.top.Parent(g)+1) {
			d.Fail("snapshot of another tree: parent of group %d is %d, want %d", g, int64(p)-1, c.top.Parent(g))
		}
	}
	for _, v := range c.stats.counters() {
		*v = d.Uvarint()
	}
	if err := d.Finish(); err != nil {
		return err
	}
	// Every message received is forwarded to at most every child, and
	// delivered at most once; it reaches at least one destination in the
	// subtree (Step checks that), so it is forwarded or delivered. Only a
	// group with a parent receives envelopes.
	s := c.stats
	received, carry := bits.Add64(s.Requests, s.Envelopes, 0)
	handled, carry2 := bits.Add64(s.Forwarded, s.Delivered, 0)
	hi, forwardMax := bits.Mul64(received, uint64(len(c.children)))
	switch {
	case carry != 0 || carry2 != 0:
		d.Fail("counters overflow: %+v", s)
	case c.parent == partition.NoGroup && s.Envelopes != 0:
		d.Fail("the root received %d envelopes", s.Envelopes)
	case s.Delivered > received:
		d.Fail("%d messages delivered of %d received", s.Delivered, received)
	case hi == 0 && s.Forwarded > forwardMax:
		d.Fail("%d messages forwarded of %d received, to %d children", s.Forwarded, received, len(c.children))
	case handled < received:
		d.Fail("%d messages forwarded and %d delivered of %d received", s.Forwarded, s.Delivered, received)
	}
	return d.Err()
}

// counters lists the counters in their snapshot order.
func (s *Stats) counters() []*uint64 {
	return []*uint64{&s.Requests, &s.Envelopes, &s.Forwarded, &s.Delivered}
}
