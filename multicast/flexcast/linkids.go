package flexcast

import (
	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// linkSlots is the number of client ids a link remembers. An id whose client
// is in a slot travels as the slot's number and the difference of its
// sequence from the last one the slot carried; any other as the client in
// full and the sequence (see bits.go).
const linkSlots = 127

// linkIDs is the memory of the message ids one link carried, from a group to
// a descendant: both ends keep one, and update it alike as the sender encodes
// and the receiver decodes each envelope, in the link's order (the channel
// below delivers every envelope once, in order). A client takes the next
// free slot, or once all are taken the slot filled longest ago.
//
// Both ends stay alike only if the receiver applies every envelope the
// sender encoded: the core decodes into a copy and keeps it only for an
// envelope it accepts; an envelope it refuses (a faulty sender's) leaves
// the two ends apart, and what follows on that link decodes to other ids
// or fails.
type linkIDs struct {
	client [linkSlots]uint64
	seq    [linkSlots]uint64 // the last sequence the slot carried
	used   int               // slots 0..used-1 hold clients
	next   int               // once all are used, the slot the next new client takes
	// slot maps a client to its slot, at the sending end only (nil at the
	// receiving end, which reads slots by number).
	slot map[uint64]int
	// others[o]: the two sets of destinations besides o that entries of
	// o's chain carried last, the latest first (see bits.go).
	others [partition.GroupsMax][2]partition.GroupSet
	// last[o]: the last entry of o's chain the link carried. A segment
	// starts at the last entry its sender shipped on the link (the
	// one-entry overlap of diff), which then travels as one bit.
	last [partition.GroupsMax]entry
	// end[o]: the position after last[o] in o's order (0: the link
	// carried no entry of o's chain).
	end [partition.GroupsMax]uint64
}

// seenOthers records that an entry of owner's chain went to others too.
func (k *linkIDs) seenOthers(owner partition.GroupID, others partition.GroupSet) {
	m := &k.others[owner]
	if m[0] != others {
		m[0], m[1] = others, m[0]
	}
}

// take gives client a slot and returns it: the next free one, or the oldest.
func (k *linkIDs) take(client uint64) int {
	var s int
	if k.used < linkSlots {
		s = k.used
		k.used++
	} else {
		s = k.next
		k.next = (k.next + 1) % linkSlots
		if k.slot != nil {
			delete(k.slot, k.client[s])
		}
	}
	k.client[s] = client
	k.seq[s] = 0
	if k.slot != nil {
		k.slot[client] = s
	}
	return s
}

// ensureIndex builds the sending end's map from clients to slots.
func (k *linkIDs) ensureIndex() {
	if k.slot == nil {
		k.slot = make(map[uint64]int)
		for s := range k.used {
			k.slot[k.client[s]] = s
		}
	}
}

// delta decodes a difference of sequences (modulo 2^64), zigzag encoded so
// that a small step back is as short as a small step forward.
func delta(u uint64) uint64 { return uint64(int64(u>>1) ^ -int64(u&1)) }

// appendLinkIDs appends k, of a cluster of n groups, for a snapshot: the
// slots in use, their clients and sequences, next, and for each owner the
// latest other destinations of its entries, its last entry and the end.
func appendLinkIDs(b []byte, k *linkIDs, n int) []byte {
	b = wire.AppendUvarint(b, uint64(k.used))
	for s := range k.used {
		b = wire.AppendUvarint(b, k.client[s])
		b = wire.AppendUvarint(b, k.seq[s])
	}
	b = wire.AppendUvarint(b, uint64(k.next))
	for o := range n {
		b = wire.AppendUvarint(b, uint64(k.others[o][0]))
		b = wire.AppendUvarint(b, uint64(k.others[o][1]))
		b = multicast.AppendMsgID(b, k.last[o].id)
		b = wire.AppendUvarint(b, uint64(k.last[o].dst))
		b = wire.AppendUvarint(b, k.end[o])
	}
	return b
}

// restoreLinkIDs decodes appendLinkIDs's encoding, of a cluster of n groups,
// into k. At the sending end
// (sender) every client holds one slot: take never gives a client a second.
func restoreLinkIDs(d *wire.Decoder, k *linkIDs, n int, sender bool) {
	used := d.Uvarint()
	if d.Err() == nil && used > linkSlots {
		d.Fail("%d link slots in use, %d exist", used, linkSlots)
	}
	if d.Err() != nil {
		return
	}
	k.used = int(used)
	for s := range k.used {
		k.client[s] = d.Uvarint()
		k.seq[s] = d.Uvarint()
	}
	next := d.Uvarint()
	if d.Err() == nil && (next >= linkSlots || (k.used < linkSlots && next != 0)) {
		d.Fail("next link slot %d with %d in use", next, k.used)
	}
	if d.Err() != nil {
		return
	}
	k.next = int(next)
	for o := range n {
		for i := range k.others[o] {
			k.others[o][i] = d.GroupSet(n)
		}
		k.last[o] = entry{id: multicast.DecodeMsgID(d), dst: d.GroupSet(n)}
		k.end[o] = d.Uvarint()
		if d.Err() == nil && (k.end[o] == 0) != k.last[o].dst.Empty() {
			d.Fail("link carried chain %d to position %d, last entry %s", o, k.end[o], k.last[o].id)
		}
	}
	if d.Err() != nil {
		return
	}
	if sender {
		k.slot = make(map[uint64]int, k.used)
		for s := range k.used {
			if _, dup := k.slot[k.client[s]]; dup {
				d.Fail("client %d in two link slots", k.client[s])
				return
			}
			k.slot[k.client[s]] = s
		}
	}
}
