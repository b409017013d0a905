package kv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/flexkv/flexkv/partition"
)

const (
	// KeyMax is the length of the longest user key, in bytes.
	KeyMax = partition.KeyMax
	// ValueMax is the length of the longest value or result, in bytes. A
	// value travels in a transaction through the multicast layer and the
	// raft logs of every destination group; a bound keeps one request from
	// carrying an unbounded payload.
	ValueMax = 1 << 20
	// ResultIDMax is the length of the longest transaction id, in bytes.
	ResultIDMax = 256
	// ScanLimitMax is the largest number of entries one scan returns.
	ScanLimitMax = 1 << 12
	// ResultsMaxDefault is the number of results kept when
	// Options.ResultsMax is zero.
	ResultsMaxDefault = 1 << 16
	// AuxKeyMax is the length of the longest aux key, in bytes.
	AuxKeyMax = 1 << 10
	// AuxValueMax is the length of the longest aux value, in bytes. It is
	// above ValueMax so that the executor can keep a whole delivered
	// message (a transaction of up to txn.BytesMax bytes of keys and values,
	// with its encoding) as one record.
	AuxValueMax = 4 << 20
)

var (
	// ErrInvalid is wrapped by the errors about arguments the store rejects:
	// keys, values and ids out of bounds, scan limits, a commit index that
	// does not increase, a batch used after Commit.
	ErrInvalid = errors.New("invalid argument")
	// ErrCorrupt is wrapped by the errors about a snapshot stream or stored
	// data that is not what the store writes.
	ErrCorrupt = errors.New("corrupt data")
	// ErrClosed is wrapped by the errors of a store used after Close.
	ErrClosed = errors.New("store closed")
)

// Key prefixes (see the package comment).
const (
	prefixData      byte = 'd'
	prefixMeta      byte = 'm'
	prefixResult    byte = 'r'
	prefixResultSeq byte = 's'
	prefixAux       byte = 'x'
)

var (
	keyApplied = []byte{prefixMeta, 'a', 'p', 'p', 'l', 'i', 'e', 'd'}
	keyResults = []byte{prefixMeta, 'r', 'e', 's', 'u', 'l', 't', 's'}
	// dataEnd is the exclusive upper bound of the user data.
	dataEnd = []byte{prefixData + 1}
	// resultSeqStart and resultSeqEnd bound the sequence index.
	resultSeqStart = []byte{prefixResultSeq}
	resultSeqEnd   = []byte{prefixResultSeq + 1}
	// auxStart and auxEnd bound the aux namespace.
	auxStart = []byte{prefixAux}
	auxEnd   = []byte{prefixAux + 1}
)

func dataKey(key []byte) []byte {
	k := make([]byte, 1+len(key))
	k[0] = prefixData
	copy(k[1:], key)
	return k
}

func resultKey(id string) []byte {
	k := make([]byte, 1+len(id))
	k[0] = prefixResult
	copy(k[1:], id)
	return k
}

func resultSeqKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{prefixResultSeq}, seq)
}

// checkKey returns an error wrapping ErrInvalid (and
// partition.ErrInvalidKey) unless key is a valid user key.
func checkKey(key []byte) error {
	if err := partition.CheckKey(key); err != nil {
		return fmt.Errorf("kv: %w: %w", ErrInvalid, err)
	}
	return nil
}

// checkValue returns an error wrapping ErrInvalid if v is longer than
// ValueMax; what names what v is.
func checkValue(what string, v []byte) error {
	if len(v) > ValueMax {
		return fmt.Errorf("kv: %w: %s of %d bytes, more than ValueMax (%d)", ErrInvalid, what, len(v), ValueMax)
	}
	return nil
}

// checkResultID returns an error wrapping ErrInvalid unless id is a valid
// transaction id: not empty, at most ResultIDMax bytes.
func checkResultID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("kv: %w: empty result id", ErrInvalid)
	case len(id) > ResultIDMax:
		return fmt.Errorf("kv: %w: result id of %d bytes, more than ResultIDMax (%d)", ErrInvalid, len(id), ResultIDMax)
	}
	return nil
}

// scanBounds checks the arguments of a scan of user keys [start, end) and
// returns the Pebble bounds. An empty start is the first key; an empty end
// is no upper bound (as partition.Partition.End).
func scanBounds(start, end []byte, limit int) (lower, upper []byte, err error) {
	if err := checkScanLimit(limit); err != nil {
		return nil, nil, err
	}
	if len(start) > 0 {
		if err := checkKey(start); err != nil {
			return nil, nil, fmt.Errorf("kv: scan start: %w", err)
		}
	}
	upper = dataEnd
	if len(end) > 0 {
		if err := checkKey(end); err != nil {
			return nil, nil, fmt.Errorf("kv: scan end: %w", err)
		}
		if bytes.Compare(start, end) > 0 {
			return nil, nil, fmt.Errorf("kv: %w: scan start %s after end %s", ErrInvalid, quote(start), quote(end))
		}
		upper = dataKey(end)
	}
	return dataKey(start), upper, nil
}

// checkScanLimit returns an error wrapping ErrInvalid unless limit is in
// 1..ScanLimitMax.
func checkScanLimit(limit int) error {
	if limit <= 0 || limit > ScanLimitMax {
		return fmt.Errorf("kv: %w: scan limit %d, want 1..ScanLimitMax (%d)", ErrInvalid, limit, ScanLimitMax)
	}
	return nil
}

// quoteMax is how many bytes of a key an error message shows.
const quoteMax = 64

func quote(b []byte) string {
	if len(b) <= quoteMax {
		return strconv.Quote(string(b))
	}
	return strconv.Quote(string(b[:quoteMax])) + "..."
}
