// Package wire holds the binary encoding primitives of every replicated
// encoding in FlexKV: unsigned varints, length-prefixed bytes, group ids
// and sets, and the header of a core's snapshot (package multicast encodes
// message ids and messages with them). The protocol cores and the channel layer encode their
// envelopes and snapshots with it, the group state machine its log entries,
// the transaction model its payloads, the executor its records, and the raft
// log store its entries. It sits under internal/ because no program outside
// the module has a use for it.
//
// Encodings are deterministic (the same value always yields the same bytes),
// because they end up in replicated logs and snapshots. Decoding never panics
// and never allocates more than the input's length: every length prefix is
// checked against the bytes that remain.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/flexkv/flexkv/partition"
)

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errors.New("wire: corrupt encoding")

// AppendUvarint appends v as an unsigned varint.
func AppendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

// AppendBytes appends p with a varint length prefix.
func AppendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// Decoder reads what the Append functions wrote. The first error sticks: once
// an error happened every read returns zero values, and Err reports it.
type Decoder struct {
	buf []byte
	err error
}

// NewDecoder returns a decoder over b. Byte slices it returns alias b.
func NewDecoder(b []byte) *Decoder { return &Decoder{buf: b} }

// Err returns the first error met, if any.
func (d *Decoder) Err() error { return d.err }

// Len returns the number of bytes not read yet.
func (d *Decoder) Len() int { return len(d.buf) }

// Fail records err (wrapped in ErrCorrupt) unless an error is recorded already.
func (d *Decoder) Fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	d.buf = nil
}

// Finish returns the first error, or an error if bytes are left over.
func (d *Decoder) Finish() error {
	if d.err == nil && len(d.buf) != 0 {
		d.Fail("%d trailing bytes", len(d.buf))
	}
	return d.err
}

// Byte reads one byte.
func (d *Decoder) Byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.buf) == 0 {
		d.Fail("unexpected end of input")
		return 0
	}
	c := d.buf[0]
	d.buf = d.buf[1:]
	return c
}

// Uvarint reads an unsigned varint.
func (d *Decoder) Uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.Fail("bad varint")
		return 0
	}
	d.buf = d.buf[n:]
	return v
}

// Count reads a varint that counts items of at least minSize bytes each, and
// checks it against the input left, so that a caller may allocate for it.
func (d *Decoder) Count(minSize int) int {
	v := d.Uvarint()
	if minSize < 1 {
		minSize = 1
	}
	if v > uint64(len(d.buf)/minSize) {
		d.Fail("count %d exceeds input", v)
		return 0
	}
	return int(v)
}

// Bytes reads a length-prefixed byte string. The result aliases the input.
func (d *Decoder) Bytes() []byte {
	n := d.Uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.buf)) {
		d.Fail("length %d exceeds input", n)
		return nil
	}
	p := d.buf[:n:n]
	d.buf = d.buf[n:]
	return p
}

// Group reads a GroupID and checks it is below n.
func (d *Decoder) Group(n int) partition.GroupID {
	v := d.Uvarint()
	if d.err == nil && v >= uint64(n) {
		d.Fail("group %d out of range", v)
		return 0
	}
	return partition.GroupID(v)
}

// GroupSet reads a set of groups and checks its members are below n.
func (d *Decoder) GroupSet(n int) partition.GroupSet {
	s := partition.GroupSet(d.Uvarint())
	if d.err == nil && s&^partition.AllGroups(n) != 0 {
		d.Fail("group set %s out of range", s)
		return 0
	}
	return s
}

// SnapshotHeader opens the snapshot of a protocol core: a byte naming the
// protocol (so that another protocol's snapshot is refused), the format
// version, the number of groups and the group. A snapshot restores only into
// a core of the same protocol, version, cluster size and group.
type SnapshotHeader struct {
	Magic, Version byte
	Groups         int
	Self           partition.GroupID
}

// AppendSnapshotHeader appends h.
func AppendSnapshotHeader(b []byte, h SnapshotHeader) []byte {
	b = append(b, h.Magic, h.Version)
	b = binary.AppendUvarint(b, uint64(h.Groups))
	return binary.AppendUvarint(b, uint64(h.Self))
}

// SnapshotHeader reads a snapshot header and fails unless it equals want;
// protocol names the snapshot's kind in the error.
func (d *Decoder) SnapshotHeader(want SnapshotHeader, protocol string) {
	d.SnapshotHeaderSince(want, want.Version, protocol)
}

// SnapshotHeaderSince is SnapshotHeader for a decoder that also reads the
// versions from oldest to want.Version: it returns the version read.
func (d *Decoder) SnapshotHeaderSince(want SnapshotHeader, oldest byte, protocol string) byte {
	if m := d.Byte(); d.err == nil && m != want.Magic {
		d.Fail("not a %s snapshot (magic %#x)", protocol, m)
	}
	v := d.Byte()
	if d.err == nil && (v < oldest || v > want.Version) {
		if oldest == want.Version {
			d.Fail("snapshot version %d, want %d", v, want.Version)
		} else {
			d.Fail("snapshot version %d, want %d to %d", v, oldest, want.Version)
		}
	}
	if n := d.Uvarint(); d.err == nil && n != uint64(want.Groups) {
		d.Fail("snapshot of a cluster of %d groups, want %d", n, want.Groups)
	}
	if self := d.Uvarint(); d.err == nil && self != uint64(want.Self) {
		d.Fail("snapshot of group %d, want %d", self, want.Self)
	}
	return v
}
