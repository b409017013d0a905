package txn

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// The binary form of a vote, the application payload a voting group sends
// to the other destinations of a transaction on the channel between groups.
// It is deterministic: equal votes encode to equal bytes.
//
//	vote  = version:byte id:msgid group:uvarint flags:byte
//	        ( digest:8 bytes, big endian          when used
//	        | [if:abort] [then:abort] [else:abort] otherwise )
//	abort = index:uvarint reason:bytes
//	flags = bit 0 holds, bit 1 if aborted, bit 2 then aborted,
//	        bit 3 else aborted, bit 4 used, bit 5 other; no other bit
//
// An abort is present exactly when its flag is set. A used vote has the
// used flag, maybe the other flag, and no other; other needs used.

const voteVersion = 1

const (
	voteHolds byte = 1 << iota
	voteIfAbort
	voteThenAbort
	voteElseAbort
	voteUsed
	voteOther
	voteFlagsAll = voteHolds | voteIfAbort | voteThenAbort | voteElseAbort | voteUsed | voteOther
)

// ReasonMax is the length of the longest abort reason kept, in bytes; a
// longer one (a stored procedure's) is cut. The evaluator's own reasons are
// far shorter: they quote at most quoteMax bytes of a key or value.
const ReasonMax = 1 << 10

// VoteBytesMax bounds an encoded vote: a larger payload is not a vote.
const VoteBytesMax = 64 + 3*(ReasonMax+16)

// ClipReason cuts reason to ReasonMax bytes without splitting a UTF-8
// sequence, the same way everywhere.
func ClipReason(reason string) string {
	if len(reason) <= ReasonMax {
		return reason
	}
	return strings.ToValidUTF8(reason[:ReasonMax], "")
}

// AppendVote appends the vote v of group v.Group on transaction id to b.
// Reasons longer than ReasonMax are cut. Of a used vote only Group, Other
// and Digest are written.
func AppendVote(b []byte, id multicast.MsgID, v Vote) []byte {
	b = append(b, voteVersion)
	b = multicast.AppendMsgID(b, id)
	b = wire.AppendUvarint(b, uint64(v.Group))
	if v.Used {
		flags := voteUsed
		if v.Other {
			flags |= voteOther
		}
		b = append(b, flags)
		return binary.BigEndian.AppendUint64(b, v.Digest)
	}
	var flags byte
	if v.Holds {
		flags |= voteHolds
	}
	aborts := [3]Abort{v.If, v.Then, v.Else}
	for i, a := range aborts {
		if a.Aborted() {
			flags |= voteIfAbort << i
		}
	}
	b = append(b, flags)
	for _, a := range aborts {
		if a.Aborted() {
			b = wire.AppendUvarint(b, uint64(a.Index))
			b = wire.AppendBytes(b, []byte(ClipReason(a.Reason)))
		}
	}
	return b
}

// DecodeVote reads what AppendVote wrote. It never panics and the vote does
// not alias b. It rejects, with an error wrapping wire.ErrCorrupt, anything
// AppendVote cannot write: another version, a group outside
// 0..partition.GroupsMax-1, unknown flag bits, a vote that holds with an
// aborted compare, a used vote with another flag than other, other without
// used, an abort index not below OpsMax, an empty reason or one longer than
// ReasonMax, trailing bytes, more than VoteBytesMax bytes.
func DecodeVote(b []byte) (multicast.MsgID, Vote, error) {
	if len(b) > VoteBytesMax {
		return multicast.MsgID{}, Vote{}, fmt.Errorf("txn: decode vote: %w: %d bytes, more than VoteBytesMax (%d)", wire.ErrCorrupt, len(b), VoteBytesMax)
	}
	d := wire.NewDecoder(b)
	if ver := d.Byte(); d.Err() == nil && ver != voteVersion {
		d.Fail("vote version %d, want %d", ver, voteVersion)
	}
	id := multicast.DecodeMsgID(d)
	v := Vote{Group: d.Group(partition.GroupsMax)}
	flags := d.Byte()
	switch {
	case d.Err() != nil:
	case flags&^voteFlagsAll != 0:
		d.Fail("vote flags %#x", flags)
	case flags&voteHolds != 0 && flags&voteIfAbort != 0:
		d.Fail("vote holds with an aborted compare")
	case flags&voteUsed != 0 && flags&^(voteUsed|voteOther) != 0:
		d.Fail("used vote with flags %#x", flags)
	case flags&voteOther != 0 && flags&voteUsed == 0:
		d.Fail("vote flag other without used")
	}
	if flags&voteUsed != 0 {
		v.Used, v.Other = true, flags&voteOther != 0
		v.Digest = fixed64(d)
		if err := d.Finish(); err != nil {
			return multicast.MsgID{}, Vote{}, fmt.Errorf("txn: decode vote: %w", err)
		}
		return id, v, nil
	}
	v.Holds = flags&voteHolds != 0
	for i, a := range []*Abort{&v.If, &v.Then, &v.Else} {
		if flags&(voteIfAbort<<i) == 0 {
			continue
		}
		index := d.Uvarint()
		reason := d.Bytes()
		switch {
		case d.Err() != nil:
		case index >= OpsMax:
			d.Fail("abort index %d, want below OpsMax (%d)", index, OpsMax)
		case len(reason) == 0:
			d.Fail("empty abort reason")
		case len(reason) > ReasonMax:
			d.Fail("abort reason of %d bytes, more than ReasonMax (%d)", len(reason), ReasonMax)
		}
		*a = Abort{Index: int(index), Reason: string(reason)}
	}
	if err := d.Finish(); err != nil {
		return multicast.MsgID{}, Vote{}, fmt.Errorf("txn: decode vote: %w", err)
	}
	return id, v, nil
}

// fixed64 reads 8 bytes, big endian, as AppendUint64 writes them.
func fixed64(d *wire.Decoder) uint64 {
	var v uint64
	for range 8 {
		v = v<<8 | uint64(d.Byte())
	}
	return v
}
