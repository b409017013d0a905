package raftstore

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/raft"

	"github.com/flexkv/flexkv/internal/wire"
)

// Key layout. Every key starts with a one-byte prefix naming its space, so
// that the two spaces never interleave and each can be bounded by the next
// prefix value.
const (
	// prefixLog is followed by the entry's index, 8 bytes big-endian, so
	// that Pebble's byte order is index order.
	prefixLog byte = 0x01
	// prefixStable is followed by the raw stable-store key.
	prefixStable byte = 0x02

	logKeyLen = 1 + 8
)

// logEncodingVersion is the first byte of every encoded entry. A reader
// rejects versions it does not know instead of guessing at their layout.
const logEncodingVersion byte = 1

// appendedAt flags: a zero time.Time has no UnixNano (its value is
// undefined), so it is told apart by a flag rather than by a sentinel.
const (
	appendedAtZero byte = 0
	appendedAtSet  byte = 1
)

// Limits of time.Time.UnixNano: outside them its result is undefined.
var (
	unixNanoMin = time.Unix(0, math.MinInt64)
	unixNanoMax = time.Unix(0, math.MaxInt64)
)

// logKey returns the key of the entry at index.
func logKey(index uint64) []byte {
	k := make([]byte, logKeyLen)
	k[0] = prefixLog
	binary.BigEndian.PutUint64(k[1:], index)
	return k
}

// logKeyIndex returns the index a log key names.
func logKeyIndex(k []byte) (uint64, error) {
	if len(k) != logKeyLen || k[0] != prefixLog {
		return 0, fmt.Errorf("malformed log key %x: %w", k, ErrCorrupt)
	}
	return binary.BigEndian.Uint64(k[1:]), nil
}

// Bounds of the log key space: [logLowerBound, logUpperBound).
var (
	logLowerBound = []byte{prefixLog}
	logUpperBound = []byte{prefixLog + 1}
)

// stableKey returns the key under which the stable-store key k is kept.
func stableKey(k []byte) []byte {
	sk := make([]byte, 1+len(k))
	sk[0] = prefixStable
	copy(sk[1:], k)
	return sk
}

// appendLog appends the encoding of l to b:
//
//	version byte (1)
//	index   uvarint
//	term    uvarint
//	type    byte
//	data    uvarint length, bytes
//	ext     uvarint length, bytes
//	at      byte flag (0: zero time; 1: set), then, if set,
//	        uvarint of the UnixNano value as uint64 (two's complement)
//
// The encoding is deterministic. Data and Extensions of length zero decode
// as nil, whether they were nil or empty.
//
// AppendedAt is informational (raft.Log: "not used for coordination ... at
// all") and comes from the leader's clock. A time that UnixNano cannot
// represent (before 1678 or after 2262) is stored as the nearest instant it
// can: failing the write instead would stop a follower from storing any
// entry of a leader whose clock is wildly off, which costs liveness for a
// field nothing reads.
func appendLog(b []byte, l *raft.Log) []byte {
	b = append(b, logEncodingVersion)
	b = binary.AppendUvarint(b, l.Index)
	b = binary.AppendUvarint(b, l.Term)
	b = append(b, byte(l.Type))
	b = wire.AppendBytes(b, l.Data)
	b = wire.AppendBytes(b, l.Extensions)
	at := l.AppendedAt
	if at.IsZero() {
		return append(b, appendedAtZero)
	}
	var nanos int64
	switch {
	case at.Before(unixNanoMin):
		nanos = math.MinInt64
	case at.After(unixNanoMax):
		nanos = math.MaxInt64
	default:
		nanos = at.UnixNano()
	}
	b = append(b, appendedAtSet)
	return binary.AppendUvarint(b, uint64(nanos))
}

// decodeLog decodes what appendLog wrote into l, overwriting every field.
// l.Data and l.Extensions alias b; the caller passes a buffer it owns. On
// error l is left untouched and the error wraps ErrCorrupt.
func decodeLog(b []byte, l *raft.Log) error {
	d := wire.NewDecoder(b)
	if v := d.Byte(); d.Err() == nil && v != logEncodingVersion {
		return fmt.Errorf("decode log: encoding version %d, want %d: %w", v, logEncodingVersion, ErrCorrupt)
	}
	index := d.Uvarint()
	term := d.Uvarint()
	typ := raft.LogType(d.Byte())
	data := d.Bytes()
	ext := d.Bytes()
	var at time.Time
	switch flag := d.Byte(); {
	case d.Err() != nil:
	case flag == appendedAtZero:
	case flag == appendedAtSet:
		at = time.Unix(0, int64(d.Uvarint()))
	default:
		d.Fail("appended-at flag %d", flag)
	}
	if err := d.Finish(); err != nil {
		return fmt.Errorf("decode log: %w: %w", ErrCorrupt, err)
	}
	*l = raft.Log{
		Index:      index,
		Term:       term,
		Type:       typ,
		Data:       nilIfEmpty(data),
		Extensions: nilIfEmpty(ext),
		AppendedAt: at,
	}
	return nil
}

func nilIfEmpty(p []byte) []byte {
	if len(p) == 0 {
		return nil
	}
	return p
}
