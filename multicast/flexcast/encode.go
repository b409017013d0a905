package flexcast

import (
	"fmt"
	"math"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/wire"
	"github.com/flexkv/flexkv/partition"
)

// envKind is the first byte of every FlexCast envelope.
type envKind byte

const (
	envMsg   envKind = 1 // MSG{m, history, notifs}: the lca to another destination
	envAck   envKind = 2 // ACK{m.id, m.dst, history, notifs, notifier?, notifID?}
	envNotif envKind = 3 // NOTIF{m.id, m.dst, history, notifID}
)

// entry is one element of a chain: a message id and its destinations.
type entry struct {
	id  multicast.MsgID
	dst partition.GroupSet
}

// segment is a piece of one owner's chain: consecutive entries of the
// owner's delivery order (global messages only).
type segment struct {
	owner   partition.GroupID
	entries []entry
}

// notifRef names one notification: the group notified and the notifier's id
// for it. The notifier is the sender of the envelope that carries the ref.
type notifRef struct {
	group partition.GroupID
	id    uint64
}

// envelope is the decoded form of every FlexCast envelope.
type envelope struct {
	kind    envKind
	msg     multicast.Message // envMsg: the whole message; otherwise ID and Dst only
	history []segment
	notifs  []notifRef // notifications the sender issued about msg
	// envAck from a notified group: the notification it answers.
	// notified is false for an ack from a destination.
	notified   bool
	notifier   partition.GroupID
	notifID    uint64
	notifIDOut uint64 // envNotif: this notification's id
}

// envFormat is the format of the envelopes this build writes and reads: the
// high four bits of an envelope's first byte, the kind the low four.
//
// Format 2: message ids travel through the link's memory (linkIDs), and the
// entries of each history segment bit-packed (bits.go), their destinations
// without the segment's owner, which every entry of its chain is addressed
// to. Format 1 (first byte 1-3, ids and sets in full) is no longer read.
const envFormat = 2

// appendEnvelope appends e, sent on the link that k remembers, in a cluster
// of n groups.
func appendEnvelope(b []byte, e *envelope, n int, k *linkIDs) []byte {
	b = append(b, envFormat<<4|byte(e.kind))
	b = k.appendID(b, e.msg.ID)
	b = wire.AppendUvarint(b, uint64(e.msg.Dst))
	if e.kind == envMsg {
		b = wire.AppendBytes(b, e.msg.Payload)
	}
	b = wire.AppendUvarint(b, uint64(len(e.history)))
	for _, s := range e.history {
		b = wire.AppendUvarint(b, uint64(s.owner))
		b = wire.AppendUvarint(b, uint64(len(s.entries)))
		b = appendEntryBlock(b, s.entries, s.owner, n, k)
	}
	switch e.kind {
	case envMsg, envAck:
		b = wire.AppendUvarint(b, uint64(len(e.notifs)))
		for _, n := range e.notifs {
			b = wire.AppendUvarint(b, uint64(n.group))
			b = wire.AppendUvarint(b, n.id)
		}
		if e.kind == envAck {
			if e.notified {
				b = append(b, 1)
				b = wire.AppendUvarint(b, uint64(e.notifier))
				b = wire.AppendUvarint(b, e.notifID)
			} else {
				b = append(b, 0)
			}
		}
	case envNotif:
		b = wire.AppendUvarint(b, e.notifIDOut)
	}
	return b
}

// decodeEnvelope parses an envelope of a cluster of n groups, sent on the
// link that k remembers. It checks the encoding only; the core checks that
// the envelope makes sense where it arrives.
func decodeEnvelope(b []byte, n int, k *linkIDs) (*envelope, error) {
	e := &envelope{}
	if err := decodeInto(e, b, n, k); err != nil {
		return nil, err
	}
	return e, nil
}

// decodeInto decodes into e, reusing the capacity of its slices: the core
// decodes every envelope into one scratch envelope, whose contents it copies
// where it keeps them. It updates k even when it fails: the core passes a
// copy of the link's memory, which it keeps only for an envelope it accepts.
func decodeInto(e *envelope, b []byte, n int, k *linkIDs) error {
	d := wire.NewDecoder(b)
	hist, notifs := e.history[:0], e.notifs[:0]
	first := d.Byte()
	if err := d.Err(); err != nil {
		return err
	}
	*e = envelope{kind: envKind(first & 0xf)}
	if f := first >> 4; f != envFormat {
		if f == 0 && e.kind >= envMsg && e.kind <= envNotif {
			f = 1
		}
		return fmt.Errorf("%w: flexcast envelope of format %d, this build reads format %d only (every group must run the same format)", wire.ErrCorrupt, f, envFormat)
	}
	switch e.kind {
	case envMsg, envAck, envNotif:
		e.msg.ID = k.id(d)
		e.msg.Dst = d.GroupSet(n)
		if e.kind == envMsg {
			e.msg.Payload = d.Bytes()
		}
		if d.Err() == nil && e.msg.Dst.Empty() {
			d.Fail("message %s has no destination", e.msg.ID)
		}
	default:
		return fmt.Errorf("%w: unknown flexcast envelope kind %d", wire.ErrCorrupt, e.kind)
	}
	segs := d.Count(2)
	if segs > n {
		d.Fail("%d history segments for %d groups", segs, n)
		segs = 0
	}
	for i := range segs {
		if i < cap(hist) {
			hist = hist[:i+1]
		} else {
			hist = append(hist, segment{})
		}
		s := &hist[i]
		s.owner = d.Group(n)
		// An entry takes at least 6 bits (bits.go): bound the count by
		// the input left before allocating for it.
		cnt := 0
		if v := d.Uvarint(); v > uint64(d.Len())*8/6 || v > math.MaxInt32 {
			d.Fail("history segment of %d entries in %d bytes", v, d.Len())
		} else {
			cnt = int(v)
		}
		if cnt <= cap(s.entries) {
			s.entries = s.entries[:cnt]
		} else {
			s.entries = make([]entry, cnt)
		}
		if d.Err() == nil {
			entryBlock(d, s.entries, s.owner, n, k)
		}
	}
	if segs > 0 {
		e.history = hist
	}
	switch e.kind {
	case envMsg, envAck:
		cnt := d.Count(2)
		if cnt > n {
			d.Fail("%d notifications for %d groups", cnt, n)
			cnt = 0
		}
		if cnt > 0 {
			if cnt <= cap(notifs) {
				e.notifs = notifs[:cnt]
			} else {
				e.notifs = make([]notifRef, cnt)
			}
		}
		for i := range e.notifs {
			e.notifs[i].group = d.Group(n)
			e.notifs[i].id = d.Uvarint()
		}
		if e.kind == envAck {
			switch d.Byte() {
			case 0:
			case 1:
				e.notified = true
				e.notifier = d.Group(n)
				e.notifID = d.Uvarint()
			default:
				d.Fail("bad ack flag")
			}
		}
	case envNotif:
		e.notifIDOut = d.Uvarint()
	}
	if err := d.Finish(); err != nil {
		// Keep the buffers for the next envelope.
		e.history, e.notifs = hist[:0], notifs[:0]
		return err
	}
	return nil
}
