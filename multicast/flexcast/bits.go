package flexcast

import (
	"fmt"
	"math/bits"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// The entries of a history segment travel bit-packed (see appendEnvelope),
// each as
//
//	slot   bits.Len(used) bits: the slot of the id's client in the link's
//	       memory, or used (no slot), followed by the client in 64 bits
//	step   the difference of the sequence from the slot's last one, zigzag
//	       encoded, in an exponential-Golomb code of order 2 (3 bits up to
//	       3, 5 up to 11, 7 up to 27, ...)
//	others the destinations besides the chain's owner: 0 if they are the
//	       latest that an entry of the owner's chain carried on the link,
//	       10 if the latest but one (linkIDs.others), else 11 and
//	       bits.Len(n) bits: the one destination, or n followed by n bits
//	       of the destinations
//
// where used is the number of the link's slots in use as the entry is
// written (linkIDs), and n the number of groups. Bits fill each byte from its
// lowest; the last byte is padded with zeros. An exponential-Golomb code of
// order k writes v as q = v>>k + 1 in 2*bits.Len(q)-1 bits (as many zeros
// as q has bits after its highest, then q from its highest bit), then the
// low k bits of v.

// bitWriter appends bits to a byte slice.
type bitWriter struct {
	b    []byte
	acc  uint64 // pending bits, lowest first
	nacc uint   // number of pending bits, < 8 between calls
}

// write appends the low n bits of v, n <= 64.
func (w *bitWriter) write(v uint64, n uint) {
	for n > 0 {
		take := min(n, 56-w.nacc)
		w.acc |= (v & (1<<take - 1)) << w.nacc
		w.nacc += take
		v >>= take
		n -= take
		for w.nacc >= 8 {
			w.b = append(w.b, byte(w.acc))
			w.acc >>= 8
			w.nacc -= 8
		}
	}
}

// golomb appends v in an exponential-Golomb code of order k (v < 2^63).
func (w *bitWriter) golomb(v uint64, k uint) {
	q := v>>k + 1
	l := uint(bits.Len64(q))
	w.write(0, l-1)
	w.write(reverse(q, l), l) // the highest bit, a one, first
	w.write(v, k)
}

// flush pads the last byte with zeros and returns the bytes.
func (w *bitWriter) flush() []byte {
	if w.nacc > 0 {
		w.b = append(w.b, byte(w.acc))
		w.acc, w.nacc = 0, 0
	}
	return w.b
}

// reverse returns the low l bits of v in reverse order.
func reverse(v uint64, l uint) uint64 { return bits.Reverse64(v) >> (64 - l) }

// bitReader reads what bitWriter wrote; running past the end fails.
type bitReader struct {
	b   []byte
	pos uint // bits read
	bad bool
}

func (r *bitReader) read(n uint) uint64 {
	var v uint64
	for i := uint(0); i < n; i++ {
		if r.pos >= uint(len(r.b))*8 {
			r.bad = true
			return 0
		}
		v |= uint64(r.b[r.pos/8]>>(r.pos%8)&1) << i
		r.pos++
	}
	return v
}

// golomb reads an exponential-Golomb code of order k.
func (r *bitReader) golomb(k uint) uint64 {
	zeros := uint(0)
	for r.read(1) == 0 {
		if r.bad || zeros == 63-k {
			r.bad = true
			return 0
		}
		zeros++
	}
	q := uint64(1)<<zeros | reverse(r.read(zeros), zeros)
	return (q-1)<<k | r.read(k)
}

// left returns the number of bits not read yet.
func (r *bitReader) left() uint64 { return uint64(len(r.b))*8 - uint64(r.pos) }

// done reports whether the reader stopped in the last byte with only zero
// padding after it.
func (r *bitReader) done() bool {
	if r.bad || (r.pos+7)/8 != uint(len(r.b)) {
		return false
	}
	return r.pos%8 == 0 || r.b[len(r.b)-1]>>(r.pos%8) == 0
}

// appendEntryBits writes the entries of owner's chain segment es, sent on
// the link that k remembers, to a cluster of n groups.
func appendEntryBits(w *bitWriter, es []entry, owner partition.GroupID, n int, k *linkIDs) {
	dstWidth := uint(bits.Len(uint(n)))
	for _, e := range es {
		k.writeID(w, e.id)
		others := e.dst.Remove(owner)
		switch latest := k.others[owner]; {
		case others == latest[0]:
			w.write(0, 1)
		case others == latest[1]:
			w.write(1, 2)
		case others.Len() == 1:
			w.write(3, 2)
			w.write(uint64(others.Min()), dstWidth)
		default:
			w.write(3, 2)
			w.write(uint64(n), dstWidth)
			w.write(uint64(others), uint(n))
		}
		k.seenOthers(owner, others)
	}
}

// entryBits reads appendEntryBits's entries into es (len(es) of them).
func entryBits(r *bitReader, es []entry, owner partition.GroupID, n int, k *linkIDs) error {
	dstWidth := uint(bits.Len(uint(n)))
	for i := range es {
		es[i].id = k.readID(r)
		var others partition.GroupSet
		switch {
		case r.read(1) == 0:
			others = k.others[owner][0]
		case r.read(1) == 0:
			others = k.others[owner][1]
		default:
			switch code := r.read(dstWidth); {
			case code < uint64(n):
				others = partition.SetOf(partition.GroupID(code))
			case code == uint64(n):
				others = partition.GroupSet(r.read(uint(n)))
			case !r.bad:
				return fmt.Errorf("history entry %s: destination code %d", es[i].id, code)
			}
		}
		if r.bad {
			return nil // the caller reports it
		}
		if others.Empty() || others.Has(owner) {
			return fmt.Errorf("history entry %s of group %d's chain: other destinations %s", es[i].id, owner, others)
		}
		k.seenOthers(owner, others)
		es[i].dst = others.Add(owner)
	}
	return nil
}

// writeID writes id and records it (the sending end).
func (k *linkIDs) writeID(w *bitWriter, id multicast.MsgID) {
	k.ensureIndex()
	width := uint(bits.Len(uint(k.used)))
	s, ok := k.slot[id.Client]
	if ok {
		w.write(uint64(s), width)
	} else {
		w.write(uint64(k.used), width)
		w.write(id.Client, 64)
		s = k.take(id.Client)
	}
	v := int64(id.Seq - k.seq[s])
	w.golomb(uint64(v<<1)^uint64(v>>63), 2)
	k.seq[s] = id.Seq
}

// readID reads an id and records it (the receiving end).
func (k *linkIDs) readID(r *bitReader) multicast.MsgID {
	code := r.read(uint(bits.Len(uint(k.used))))
	var s int
	switch {
	case r.bad:
		return multicast.MsgID{}
	case code == uint64(k.used):
		client := r.read(64)
		if r.bad {
			return multicast.MsgID{}
		}
		s = k.take(client)
	case code < uint64(k.used):
		s = int(code)
	default:
		r.bad = true
		return multicast.MsgID{}
	}
	seq := k.seq[s] + delta(r.golomb(2))
	if r.bad {
		return multicast.MsgID{}
	}
	k.seq[s] = seq
	return multicast.MsgID{Client: k.client[s], Seq: seq}
}
