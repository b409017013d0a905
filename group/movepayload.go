package group

import (
	"fmt"

	"github.com/flexkv/flexkv/internal/wire"
)

// The binary forms of the two payloads a group's state hands its own
// executor for a partition move (DESIGN 14, partition moves): a chunk of
// the partition's rows at the new owner, and the deletion of the
// partition's range at the old one. Neither travels between groups: the
// state makes them from its own log entries (a chunk entry, the change that
// completes a move), with the group itself as their sender, beside the
// votes and release notes that other groups send.
//
//	chunk = tag:byte count:uvarint (key:bytes value:bytes)*count
//	drop  = tag:byte partition:uvarint

const (
	moveChunkTag = 0x80 | 'C'
	moveDropTag  = 0x80 | 'D'
)

// MoveRow is one row of a chunk.
type MoveRow struct{ Key, Value []byte }

// AppendMoveChunk appends a chunk of rows.
func AppendMoveChunk(b []byte, rows []MoveRow) []byte {
	b = append(b, moveChunkTag)
	b = wire.AppendUvarint(b, uint64(len(rows)))
	for _, r := range rows {
		b = wire.AppendBytes(b, r.Key)
		b = wire.AppendBytes(b, r.Value)
	}
	return b
}

// AppendMoveDrop appends the deletion of partition i's range (its index in
// the cluster's partition map, key order).
func AppendMoveDrop(b []byte, i int) []byte {
	b = append(b, moveDropTag)
	return wire.AppendUvarint(b, uint64(i))
}

// IsMovePayload reports whether payload is meant as a chunk or a drop.
func IsMovePayload(payload []byte) bool {
	return len(payload) > 0 && (payload[0] == moveChunkTag || payload[0] == moveDropTag)
}

// DecodeMovePayload reads a chunk (rows, drop -1) or a drop (no rows, drop
// the partition's index). The rows share payload's bytes.
func DecodeMovePayload(payload []byte) (rows []MoveRow, drop int, err error) {
	d := wire.NewDecoder(payload)
	drop = -1
	switch tag := d.Byte(); {
	case d.Err() != nil:
	case tag == moveDropTag:
		drop = int(d.Uvarint())
		if d.Err() == nil && drop > 1<<20 {
			d.Fail("partition %d", drop)
		}
	case tag == moveChunkTag:
		n := d.Count(2)
		rows = make([]MoveRow, 0, n)
		for range n {
			k, v := d.Bytes(), d.Bytes()
			if d.Err() != nil {
				break
			}
			rows = append(rows, MoveRow{Key: k, Value: v})
		}
	default:
		d.Fail("move payload tag %#x", tag)
	}
	if err := d.Finish(); err != nil {
		return nil, -1, fmt.Errorf("group: decode move payload: %w", err)
	}
	return rows, drop, nil
}
