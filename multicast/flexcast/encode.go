package flexcast

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// envKind is the low four bits of the first byte of every FlexCast envelope
// (envFormat the high four).
type envKind byte

const (
	envMsg   envKind = 1 // MSG{m, history, notifs}: the lca to another destination
	envAck   envKind = 2 // ACK{m.id, m.dst, history, notifs, notifier?, notifID?}
	envNotif envKind = 3 // NOTIF{m.id, m.dst, history, notifID}
	envHist  envKind = 4 // HIST{history}: chains shipped up for garbage collection
	envCut   envKind = 5 // CUT{positions}: a stable cut (gc.go), from any group to any
)

// entry is one element of a chain: a message id and its destinations.
type entry struct {
	id  multicast.MsgID
	dst partition.GroupSet
}

// segment is a piece of one owner's chain: consecutive entries of the
// owner's delivery order (global messages only), the first at position
// start.
type segment struct {
	owner   partition.GroupID
	start   uint64
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
// Format 4: after the first byte, an MSG's payload (a varint length, then the
// bytes), then everything else in one stream of bits (bits.go) to the end of
// the envelope: message ids through the link's memory (linkIDs), history
// entries with their destinations besides their chain's owner, which every
// entry of the chain is addressed to. A CUT is the first byte and a varint
// per group. Format 4 names the position of each history segment in its
// owner's order, and adds HIST and CUT; formats 1 (first byte 1-3, varints,
// ids and sets in full), 2 and 3 (flushes) are no longer read.
const envFormat = 4

// appendEnvelope appends e, sent on the link that k remembers, in a cluster
// of n groups. The bits after the payload:
//
//	id          the message's (linkIDs.writeID); not in a HIST
//	dst         n bits; not in a HIST
//	segments    bits.Len(n) bits: their number; then each: the owner, as
//	            the step from the previous one's plus one (from -1) less one
//	            in an exponential-Golomb code of order 0; where it starts,
//	            as its position less that of the last entry of the owner's
//	            chain that the link carried (linkIDs.last, at linkIDs.end
//	            less one; -1 if none) in an exponential-Golomb code of order
//	            0: 0 when it starts at that entry, which is then left out;
//	            the number of entries written less one (order 2); those
//	            entries (appendEntryBits)
//	msg, ack:   notifications: bits.Len(n) bits, their number; each: the
//	            group in bits.Len(n) bits and the id (order 0)
//	ack:        1 bit, notified; if set, the notifier in bits.Len(n) bits
//	            and the notification id (order 0)
//	notif:      the notification's id (order 0)
func appendEnvelope(b []byte, e *envelope, n int, k *linkIDs) []byte {
	b = append(b, envFormat<<4|byte(e.kind))
	if e.kind == envMsg {
		b = wire.AppendBytes(b, e.msg.Payload)
	}
	w := bitWriter{b: b}
	gw := uint(bits.Len(uint(n)))
	if e.kind != envHist {
		k.writeID(&w, e.msg.ID)
		w.write(uint64(e.msg.Dst), uint(n))
	}
	w.write(uint64(len(e.history)), gw)
	prev := -1
	for _, s := range e.history {
		w.golomb(uint64(int(s.owner)-prev-1), 0)
		prev = int(s.owner)
		es := s.entries
		// The sender's diffs start at the last entry shipped on the link or
		// later (Core.diff): the step is never negative.
		if s.start+1 < k.end[s.owner] {
			panic(fmt.Sprintf("flexcast: history of group %d at %d, before the link's end %d", s.owner, s.start, k.end[s.owner]))
		}
		step := s.start + 1 - k.end[s.owner]
		w.golomb(step, 0)
		if step == 0 {
			es = es[1:]
		}
		w.golomb(uint64(len(es)-1), 2)
		appendEntryBits(&w, es, s.owner, n, k)
		k.last[s.owner] = es[len(es)-1]
		k.end[s.owner] = s.start + uint64(len(s.entries))
	}
	switch e.kind {
	case envMsg, envAck:
		w.write(uint64(len(e.notifs)), gw)
		for _, r := range e.notifs {
			w.write(uint64(r.group), gw)
			w.golomb(r.id, 0)
		}
		if e.kind == envAck {
			if e.notified {
				w.write(1, 1)
				w.write(uint64(e.notifier), gw)
				w.golomb(e.notifID, 0)
			} else {
				w.write(0, 1)
			}
		}
	case envNotif:
		w.golomb(e.notifIDOut, 0)
	case envHist, envCut:
		// A HIST ends with its history; a CUT is not written here.
	}
	return w.flush()
}

// entryBitsMin bounds the bits of one history entry from below, so that a
// corrupt count cannot make the decoder allocate more entries than the
// envelope could hold: an entry's id takes its client's slot (bits.Len(used)
// bits, at least 1 once the link knows a client; before that, none, and the
// client's 64 bits follow) and a sequence delta of at least 3 bits, its
// destinations at least 1 bit. Consecutive messages of one client to the
// same destinations, on a link that knows that client only, take exactly 5
// bits each.
const entryBitsMin = 5

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
	hist, notifs := e.history[:0], e.notifs[:0]
	err := decodeBits(e, b, n, k, hist, notifs)
	if err != nil {
		// Keep the buffers for the next envelope.
		e.history, e.notifs = hist[:0], notifs[:0]
		return fmt.Errorf("%w: %w", wire.ErrCorrupt, err)
	}
	return nil
}

// decodeBits decodes b into e: the header, then, from the first bit after
// it, the message's id and destinations, the history and the fields of e's
// kind. hist and notifs are buffers to reuse.
func decodeBits(e *envelope, b []byte, n int, k *linkIDs, hist []segment, notifs []notifRef) error {
	rest, err := decodeHeader(e, b)
	if err != nil {
		return err
	}
	r := bitReader{b: rest}
	if e.kind != envHist {
		e.msg.ID = k.readID(&r)
		e.msg.Dst = partition.GroupSet(r.read(uint(n)))
		if !r.bad && e.msg.Dst.Empty() {
			return fmt.Errorf("message %s has no destination", e.msg.ID)
		}
	}
	if e.history, err = decodeHistory(&r, n, k, hist); err != nil {
		return err
	}
	if e.kind == envHist && len(e.history) == 0 && !r.bad {
		return errors.New("HIST without history")
	}
	if err := decodeTail(e, &r, n, notifs); err != nil {
		return err
	}
	if !r.done() {
		return fmt.Errorf("flexcast envelope of %d bytes: %d bits decoded", len(b), r.pos)
	}
	return nil
}

// decodeHeader resets e to the kind b's first byte names, checks the
// format, takes a MSG's payload, and returns the bits that follow.
func decodeHeader(e *envelope, b []byte) ([]byte, error) {
	if len(b) == 0 {
		return nil, errors.New("empty flexcast envelope")
	}
	*e = envelope{kind: envKind(b[0] & 0xf)}
	if f := b[0] >> 4; f != envFormat {
		if f == 0 && e.kind >= envMsg && e.kind <= envNotif {
			f = 1
		}
		return nil, fmt.Errorf("flexcast envelope of format %d, this build reads format %d only (every group must run the same format)", f, envFormat)
	}
	if e.kind < envMsg || e.kind > envHist {
		return nil, fmt.Errorf("unknown flexcast envelope kind %d", e.kind)
	}
	rest := b[1:]
	if e.kind == envMsg {
		d := wire.NewDecoder(rest)
		e.msg.Payload = d.Bytes()
		if err := d.Err(); err != nil {
			return nil, err
		}
		rest = rest[len(rest)-d.Len():]
	}
	return rest, nil
}

// decodeHistory reads the history segments into hist's buffers, entries
// continued from the link's memory k, which it moves on. It returns nil
// for an envelope without history.
func decodeHistory(r *bitReader, n int, k *linkIDs, hist []segment) ([]segment, error) {
	gw := uint(bits.Len(uint(n)))
	segs := int(r.read(gw))
	if segs > n {
		return nil, fmt.Errorf("%d history segments for %d groups", segs, n)
	}
	prev := -1
	for i := range segs {
		if r.bad {
			break
		}
		if i < cap(hist) {
			hist = hist[:i+1]
		} else {
			hist = append(hist, segment{})
		}
		s := &hist[i]
		step := r.golomb(0)
		at := r.golomb(0)
		cnt := r.golomb(2) + 1
		owner := uint64(prev+1) + step
		switch {
		case r.bad:
			continue
		case step >= uint64(n) || owner >= uint64(n):
			return nil, fmt.Errorf("history of group %d after group %d: out of range", owner, prev)
		case cnt > r.left()/entryBitsMin:
			return nil, fmt.Errorf("history segment of %d entries in %d bits", cnt, r.left())
		}
		s.owner = partition.GroupID(owner)
		prev = int(owner)
		skip := uint64(0)
		cont := at == 0
		if cont {
			if k.end[s.owner] == 0 {
				return nil, fmt.Errorf("history of group %d continues, and the link carried none", s.owner)
			}
			skip = 1
		}
		s.start = k.end[s.owner] + at - 1
		if s.start >= 1<<62 {
			return nil, fmt.Errorf("history of group %d at position %d", s.owner, s.start)
		}
		if cnt+skip <= uint64(cap(s.entries)) {
			s.entries = s.entries[:cnt+skip]
		} else {
			s.entries = make([]entry, cnt+skip)
		}
		if cont {
			s.entries[0] = k.last[s.owner]
		}
		if err := entryBits(r, s.entries[skip:], s.owner, n, k); err != nil {
			return nil, err
		}
		k.last[s.owner] = s.entries[len(s.entries)-1]
		k.end[s.owner] = s.start + uint64(len(s.entries))
	}
	if segs == 0 {
		return nil, nil
	}
	return hist, nil
}

// decodeTail reads what follows the history: a MSG's or an ACK's
// notification list, an ACK's answer to a notification, a NOTIF's id.
func decodeTail(e *envelope, r *bitReader, n int, notifs []notifRef) error {
	gw := uint(bits.Len(uint(n)))
	group := func(what string) (partition.GroupID, error) {
		v := r.read(gw)
		if v >= uint64(n) && !r.bad {
			return 0, fmt.Errorf("%s %d out of range", what, v)
		}
		return partition.GroupID(v), nil
	}
	switch e.kind {
	case envMsg, envAck:
		cnt := int(r.read(gw))
		if cnt > n {
			return fmt.Errorf("%d notifications for %d groups", cnt, n)
		}
		if cnt > 0 {
			if cnt <= cap(notifs) {
				e.notifs = notifs[:cnt]
			} else {
				e.notifs = make([]notifRef, cnt)
			}
		}
		for i := range e.notifs {
			g, err := group("notified group")
			if err != nil {
				return err
			}
			e.notifs[i] = notifRef{group: g, id: r.golomb(0)}
		}
		if e.kind == envAck && r.read(1) == 1 {
			e.notified = true
			g, err := group("notifier")
			if err != nil {
				return err
			}
			e.notifier = g
			e.notifID = r.golomb(0)
		}
	case envNotif:
		e.notifIDOut = r.golomb(0)
	case envHist, envCut:
		// A HIST ends with its history; a CUT is not read here.
	}
	return nil
}

// appendCut appends a CUT envelope: the first byte, then a varint per group.
func appendCut(b []byte, cut []uint64) []byte {
	b = append(b, envFormat<<4|byte(envCut))
	for _, p := range cut {
		b = wire.AppendUvarint(b, p)
	}
	return b
}

// decodeCut parses a CUT envelope of a cluster of n groups.
func decodeCut(b []byte, n int) ([]uint64, error) {
	if f := b[0] >> 4; f != envFormat {
		return nil, fmt.Errorf("flexcast envelope of format %d, this build reads format %d only (every group must run the same format)", f, envFormat)
	}
	d := wire.NewDecoder(b[1:])
	cut := make([]uint64, n)
	for o := range cut {
		cut[o] = d.Uvarint()
		if d.Err() == nil && cut[o] >= 1<<62 {
			return nil, fmt.Errorf("%w: CUT at position %d of group %d", wire.ErrCorrupt, cut[o], o)
		}
	}
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("%w: CUT: %w", wire.ErrCorrupt, err)
	}
	return cut, nil
}
