package channel

import (
	"bytes"
	"fmt"

	"github.com/flexkv/flexkv/internal/invariants"
	"github.com/flexkv/flexkv/internal/wire"
)

// snapshotVersion is the first byte of an encoded channel state. Version 3
// marks the envelopes sent in the background; version 2 added the byte
// clock of backlogs, the repair window and two counters.
const snapshotVersion = 3

// Bits of the per-link flags byte of a snapshot.
const (
	flagNackServed = 1 << iota
	flagAckDue
	flagNackSent
	flagsAll = flagNackServed | flagAckDue | flagNackSent
)

// AppendSnapshot appends a deterministic encoding of the channel's state:
// equal states encode to equal bytes, whichever replica encodes them. It
// encodes the state only, not the output waiting for Ready, so it must be
// called with that output drained; otherwise it panics, since envelopes
// handed up but never consumed would be lost.
//
// Under the invariants tag it restores what it wrote and encodes that
// again: a replica restored from the snapshot has the state encoded.
func (c *Channel) AppendSnapshot(b []byte) []byte {
	if len(c.frames) != 0 || len(c.inbound) != 0 {
		panic(fmt.Sprintf("channel: snapshot with undrained output (%d frames, %d inbound)", len(c.frames), len(c.inbound)))
	}
	start := len(b)
	b = c.appendSnapshot(b)
	if invariants.Enabled {
		r, err := RestoreChannel(b[start:], c.cfg)
		if err != nil {
			invariants.Violated("channel: snapshot of group %d does not restore: %v", c.cfg.Self, err)
		}
		if again := r.appendSnapshot(nil); !bytes.Equal(again, b[start:]) {
			invariants.Violated("channel: snapshot of group %d restores to a state that encodes differently (%d bytes, then %d)", c.cfg.Self, len(b)-start, len(again))
		}
	}
	return b
}

// appendSnapshot appends the encoding of the state (AppendSnapshot).
func (c *Channel) appendSnapshot(b []byte) []byte {
	b = append(b, snapshotVersion)
	b = wire.AppendUvarint(b, uint64(c.cfg.Groups))
	b = wire.AppendUvarint(b, uint64(c.cfg.Self))
	b = wire.AppendUvarint(b, c.sentBytes)
	for i := range c.links {
		if i == int(c.cfg.Self) {
			continue
		}
		l := &c.links[i]
		b = wire.AppendUvarint(b, l.acked)
		b = wire.AppendUvarint(b, uint64(len(l.outbox)))
		for _, p := range l.outbox {
			b = wire.AppendBytes(b, p.payload)
			b = wire.AppendUvarint(b, p.end)
			if p.background {
				b = append(b, 1)
			} else {
				b = append(b, 0)
			}
		}
		b = wire.AppendUvarint(b, uint64(l.idle))
		b = wire.AppendUvarint(b, l.repair)
		b = wire.AppendUvarint(b, l.repairEnd)
		var flags byte
		if l.nackServed {
			flags |= flagNackServed
		}
		if l.ackDue {
			flags |= flagAckDue
		}
		if l.nackSent {
			flags |= flagNackSent
		}
		b = append(b, flags)
		b = wire.AppendUvarint(b, l.recv)
		b = wire.AppendUvarint(b, uint64(len(l.holdback)))
		for _, h := range l.holdback {
			b = wire.AppendUvarint(b, h.seq)
			b = wire.AppendBytes(b, h.payload)
		}
	}
	for _, v := range c.stats.counters() {
		b = wire.AppendUvarint(b, *v)
	}
	return b
}

// RestoreChannel returns a new channel, configured by cfg, in the state that
// AppendSnapshot encoded in b.
// The snapshot must come from a channel of the same group in a cluster of the
// same size, and its state must fit cfg (a hold-back queue within
// HoldbackMax, a resend timer below ResendTicks); otherwise, or if b is
// corrupt, it returns an error wrapping wire.ErrCorrupt. Payloads alias b.
// It never panics.
func RestoreChannel(b []byte, cfg Config) (*Channel, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := wire.NewDecoder(b)
	if v := d.Byte(); d.Err() == nil && v != snapshotVersion {
		d.Fail("snapshot version %d, want %d", v, snapshotVersion)
	}
	if groups := d.Uvarint(); d.Err() == nil && groups != uint64(cfg.Groups) {
		d.Fail("snapshot of a cluster of %d groups, want %d", groups, cfg.Groups)
	}
	if self := d.Uvarint(); d.Err() == nil && self != uint64(cfg.Self) {
		d.Fail("snapshot of group %d, want %d", self, cfg.Self)
	}
	c := &Channel{cfg: cfg.withDefaults(), links: make([]link, cfg.Groups)}
	c.sentBytes = d.Uvarint()
	for i := range c.links {
		if i == int(cfg.Self) {
			continue
		}
		l := &c.links[i]
		l.acked = d.Uvarint()
		if n := d.Count(2); n > 0 {
			l.outbox = make([]pending, n)
			for j := range l.outbox {
				l.outbox[j].payload = d.Bytes()
				l.outbox[j].end = d.Uvarint()
				switch d.Byte() {
				case 0:
				case 1:
					l.outbox[j].background = true
					l.background++
				default:
					d.Fail("link to %d: envelope %d: bad background flag", i, j)
				}
				l.outboxBytes += len(l.outbox[j].payload)
			}
			l.fgSeq = l.firstForeground()
		}
		// idle is checked against ResendTicks by check below; bound it here
		// so that the conversion to int cannot wrap.
		if idle := d.Uvarint(); idle < uint64(cfg.ResendTicks) {
			l.idle = int(idle)
		} else {
			d.Fail("link to %d: resend timer %d, want below %d", i, idle, cfg.ResendTicks)
		}
		l.repair = d.Uvarint()
		l.repairEnd = d.Uvarint()
		flags := d.Byte()
		if flags&^flagsAll != 0 {
			d.Fail("link to %d: unknown flags %#x", i, flags)
		}
		l.nackServed = flags&flagNackServed != 0
		l.ackDue = flags&flagAckDue != 0
		l.nackSent = flags&flagNackSent != 0
		l.recv = d.Uvarint()
		n := d.Count(2)
		if n > cfg.HoldbackMax {
			d.Fail("link from %d: %d frames held back, max %d", i, n, cfg.HoldbackMax)
			n = 0
		}
		if n > 0 {
			l.holdback = make([]held, n)
			for j := range l.holdback {
				l.holdback[j].seq = d.Uvarint()
				l.holdback[j].payload = d.Bytes()
				l.holdbackBytes += len(l.holdback[j].payload)
			}
		}
	}
	for _, v := range c.stats.counters() {
		*v = d.Uvarint()
	}
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("channel: restore: %w", err)
	}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("channel: restore: %w: %w", wire.ErrCorrupt, err)
	}
	return c, nil
}

// counters lists the counters in their snapshot order.
func (s *Stats) counters() []*uint64 {
	return []*uint64{
		&s.DataSent, &s.DataResent, &s.Delivered, &s.DuplicatesDropped,
		&s.HeldBack, &s.HoldbackDrops, &s.NacksSent, &s.NacksServed, &s.AcksSent,
		&s.HoldbackByteDrops, &s.OutboxOverflows,
	}
}
