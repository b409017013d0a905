package txn

import (
	"bytes"
	"fmt"

	"github.com/flexkv/flexkv/internal/wire"
)

// The binary form of a transaction, the payload of its multicast message
// and so part of every destination's raft log. It is deterministic: equal
// transactions encode to equal bytes.
//
//	txn     = version:byte count(If) compare* count(Then) op* count(Else) op*
//	compare = key:bytes cmp:byte (0x00 int:zigzag | 0x01 value:bytes)
//	op      = kind:byte key:bytes field*   get, delete: none
//	                                       put: value:bytes
//	                                       add: int:zigzag
//	                                       (an add that wraps: kind 0x84)
//	                                       scan: end:bytes limit:uvarint
//
// count and uvarint are unsigned varints, bytes a varint length and the
// bytes, zigzag a signed integer zigzag-mapped to an unsigned varint (small
// negative amounts stay short). Fields an op's kind does not take are not
// encoded: encode a transaction that passed Validate (or ParseJSON).

// encodingVersion is the first byte of the encoding; a reader rejects any
// other, so that a format change cannot be misread.
const encodingVersion = 1

// wrapFlag marks, in an op's kind byte, an add that wraps (Op.Wrap).
const wrapFlag = 0x80

// The operand tags of a compare.
const (
	operandInt   = 0
	operandValue = 1
)

// Smallest encodings, which bound what a count may claim.
const (
	compareSizeMin = 4 // key length, cmp, tag, one-byte int
	opSizeMin      = 2 // kind, key length
)

func zigzag(v int64) uint64   { return uint64(v<<1) ^ uint64(v>>63) }
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// AppendTxn appends the binary form of t to b.
func AppendTxn(b []byte, t *Txn) []byte {
	b = append(b, encodingVersion)
	b = wire.AppendUvarint(b, uint64(len(t.If)))
	for _, c := range t.If {
		b = wire.AppendBytes(b, c.Key)
		b = append(b, byte(c.Cmp))
		if c.Int != nil {
			b = append(b, operandInt)
			b = wire.AppendUvarint(b, zigzag(*c.Int))
		} else {
			b = append(b, operandValue)
			b = wire.AppendBytes(b, c.Value)
		}
	}
	for _, ops := range [][]Op{t.Then, t.Else} {
		b = wire.AppendUvarint(b, uint64(len(ops)))
		for _, o := range ops {
			kind := byte(o.Kind)
			if o.Wrap {
				kind |= wrapFlag
			}
			b = append(b, kind)
			b = wire.AppendBytes(b, o.Key)
			switch o.Kind {
			case OpPut:
				b = wire.AppendBytes(b, o.Value)
			case OpAdd:
				b = wire.AppendUvarint(b, zigzag(o.Int))
			case OpScan:
				b = wire.AppendBytes(b, o.End)
				b = wire.AppendUvarint(b, uint64(o.Limit))
			case OpGet, OpDelete:
			}
		}
	}
	return b
}

// DecodeTxn reads what AppendTxn wrote. It never panics; it allocates a copy
// of b (the Txn's byte slices alias that copy, not b) and at most OpsMax
// compares and operations, whatever b claims. It returns only transactions
// that pass the checks of Validate that need no partition map; a corrupt
// encoding gives an error wrapping wire.ErrCorrupt, a well-formed but
// invalid transaction one matching ErrInvalid.
func DecodeTxn(b []byte) (*Txn, error) {
	d := wire.NewDecoder(bytes.Clone(b))
	if v := d.Byte(); d.Err() == nil && v != encodingVersion {
		d.Fail("txn encoding version %d, want %d", v, encodingVersion)
	}
	budget := OpsMax // compares and operations left
	count := func(sizeMin int) int {
		n := d.Count(sizeMin)
		if n > budget {
			d.Fail("more than OpsMax (%d) compares and operations", OpsMax)
			return 0
		}
		budget -= n
		return n
	}
	t := &Txn{}
	t.If = make([]Compare, count(compareSizeMin))
	for i := range t.If {
		c := &t.If[i]
		c.Key = d.Bytes()
		c.Cmp = Cmp(d.Byte())
		switch tag := d.Byte(); tag {
		case operandInt:
			v := unzigzag(d.Uvarint())
			c.Int = &v
		case operandValue:
			c.Value = d.Bytes()
			if c.Value == nil {
				c.Value = []byte{} // present, even when empty
			}
		default:
			d.Fail("compare %d: operand tag %d", i, tag)
		}
	}
	for _, ops := range []*[]Op{&t.Then, &t.Else} {
		*ops = make([]Op, count(opSizeMin))
		for i := range *ops {
			o := &(*ops)[i]
			kind := d.Byte()
			o.Kind, o.Wrap = OpKind(kind&^wrapFlag), kind&wrapFlag != 0
			o.Key = d.Bytes()
			switch o.Kind {
			case OpPut:
				o.Value = d.Bytes()
			case OpAdd:
				o.Int = unzigzag(d.Uvarint())
			case OpScan:
				o.End = d.Bytes()
				// Bounded here, so that the conversion to int is exact on
				// every platform; checkShape reports 0.
				if limit := d.Uvarint(); limit <= ScanLimitMax {
					o.Limit = int(limit)
				} else {
					d.Fail("scan limit %d, more than ScanLimitMax (%d)", limit, ScanLimitMax)
				}
			case OpGet, OpDelete:
			default:
				d.Fail("op kind %d", o.Kind)
			}
		}
	}
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("txn: decode: %w", err)
	}
	if err := t.checkShape(); err != nil {
		return nil, err
	}
	return t, nil
}
