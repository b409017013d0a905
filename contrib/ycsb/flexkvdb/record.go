package flexkvdb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// The record encoding (version 1): a YCSB record, its fields and their
// values, as the value of one FlexKV key.
//
//	byte     recordVersion (1)
//	uvarint  n, the number of fields (at most recordFieldsMax)
//	n times  uvarint len(name), name, uvarint len(value), value
//
// Fields come in ascending order of name, each name once, so that a record
// has one encoding whatever the order of the map it came from (STYLE 6),
// and a compare of two encoded values (an update's compare-and-put) is a
// compare of the records. The version byte lets a later encoding be told
// apart; a record of another version is refused, not guessed at. An encoded
// record is never empty, which tells it from a missing key in a compare.
const (
	recordVersion = 1
	// recordFieldsMax bounds the fields of one record: YCSB's core
	// workloads use 10 (fieldcount), and a value holds at most
	// txn.ValueMax bytes anyway.
	recordFieldsMax = 1 << 12
)

// errRecord is matched by the error of a value that is not a record of
// this encoding.
var errRecord = errors.New("flexkvdb: not a record")

// encodeRecord returns the encoding of fields.
func encodeRecord(fields map[string][]byte) ([]byte, error) {
	if len(fields) > recordFieldsMax {
		return nil, fmt.Errorf("flexkvdb: %d fields in a record, more than %d", len(fields), recordFieldsMax)
	}
	names := make([]string, 0, len(fields))
	size := 1 + binary.MaxVarintLen64
	for name, v := range fields {
		names = append(names, name)
		size += 2*binary.MaxVarintLen64 + len(name) + len(v)
	}
	slices.Sort(names)
	out := make([]byte, 0, size)
	out = append(out, recordVersion)
	out = binary.AppendUvarint(out, uint64(len(names)))
	for _, name := range names {
		v := fields[name]
		out = binary.AppendUvarint(out, uint64(len(name)))
		out = append(out, name...)
		out = binary.AppendUvarint(out, uint64(len(v)))
		out = append(out, v...)
	}
	return out, nil
}

// decodeRecord returns the fields of the record b, only those named in want
// when want is not empty (a name of want that the record lacks is left
// out, as YCSB's bindings do). The values are copies: b may be reused.
func decodeRecord(b []byte, want []string) (map[string][]byte, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("%w: empty value", errRecord)
	}
	if b[0] != recordVersion {
		return nil, fmt.Errorf("%w: version %d, this binding reads version %d", errRecord, b[0], recordVersion)
	}
	rest := b[1:]
	n, rest, err := uvarint(rest, "field count")
	if err != nil {
		return nil, err
	}
	if n > recordFieldsMax {
		return nil, fmt.Errorf("%w: %d fields, more than %d", errRecord, n, recordFieldsMax)
	}
	capacity := int(n)
	if len(want) > 0 {
		capacity = min(capacity, len(want))
	}
	out := make(map[string][]byte, capacity)
	prev := ""
	for i := range int(n) {
		var name, value []byte
		if name, rest, err = chunk(rest, "field name"); err != nil {
			return nil, err
		}
		if value, rest, err = chunk(rest, "field value"); err != nil {
			return nil, err
		}
		if i > 0 && strings.Compare(string(name), prev) <= 0 {
			return nil, fmt.Errorf("%w: field %q after %q: names out of order or repeated", errRecord, name, prev)
		}
		prev = string(name)
		if len(want) == 0 || slices.Contains(want, prev) {
			out[prev] = slices.Clone(value)
		}
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last field", errRecord, len(rest))
	}
	return out, nil
}

// uvarint reads one uvarint of b, what naming it in errors.
func uvarint(b []byte, what string) (uint64, []byte, error) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, nil, fmt.Errorf("%w: bad %s", errRecord, what)
	}
	return v, b[n:], nil
}

// chunk reads a length-prefixed byte string of b.
func chunk(b []byte, what string) ([]byte, []byte, error) {
	n, rest, err := uvarint(b, what+" length")
	if err != nil {
		return nil, nil, err
	}
	if n > uint64(len(rest)) {
		return nil, nil, fmt.Errorf("%w: %s of %d bytes, %d left", errRecord, what, n, len(rest))
	}
	return rest[:n], rest[n:], nil
}

// mergeRecord returns the encoding of the record old (encoded) with the
// fields of update added or replaced: YCSB's update.
func mergeRecord(old []byte, update map[string][]byte) ([]byte, error) {
	fields, err := decodeRecord(old, nil)
	if err != nil {
		return nil, err
	}
	for name, v := range update {
		fields[name] = v
	}
	return encodeRecord(fields)
}
