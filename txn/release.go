package txn

import (
	"fmt"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// The binary form of a release note, the application payload a destination
// of a transaction sends to the transaction's other destinations once its
// piece is released there (DESIGN 6, real-time order: every transaction
// that conflicts with the piece and ran before it at that group is
// complete). It shares the channel with votes, whose first byte is the
// vote version (1); a note's first byte is releaseTag, which no vote has.
//
//	note = tag:byte id:msgid group:uvarint

const releaseTag = 0x80 | 'R'

// releaseBytesMax bounds an encoded note: two ids' uvarints and a group.
const releaseBytesMax = 1 + 2*10 + 10

// AppendRelease appends the note that group g released its piece of
// transaction id.
func AppendRelease(b []byte, id multicast.MsgID, g partition.GroupID) []byte {
	b = append(b, releaseTag)
	b = multicast.AppendMsgID(b, id)
	return wire.AppendUvarint(b, uint64(g))
}

// IsRelease reports whether payload is meant as a release note (it may
// still fail DecodeRelease), not a vote.
func IsRelease(payload []byte) bool { return len(payload) > 0 && payload[0] == releaseTag }

// DecodeRelease reads what AppendRelease wrote, of a group below
// partition.GroupsMax.
func DecodeRelease(b []byte) (multicast.MsgID, partition.GroupID, error) {
	if len(b) > releaseBytesMax {
		return multicast.MsgID{}, 0, fmt.Errorf("txn: decode release note: %w: %d bytes, more than %d", wire.ErrCorrupt, len(b), releaseBytesMax)
	}
	d := wire.NewDecoder(b)
	if tag := d.Byte(); d.Err() == nil && tag != releaseTag {
		d.Fail("release note tag %#x, want %#x", tag, releaseTag)
	}
	id := multicast.DecodeMsgID(d)
	g := d.Group(partition.GroupsMax)
	if err := d.Finish(); err != nil {
		return multicast.MsgID{}, 0, fmt.Errorf("txn: decode release note: %w", err)
	}
	return id, g, nil
}
