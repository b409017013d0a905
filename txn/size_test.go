package txn

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/partition"
)

// messagePayloadMax is group.MessagePayloadMax, the largest payload
// the replication layer accepts, which txn does not import.
const messagePayloadMax = 512 << 10

// elementOverheadMax bounds the bytes a compare or an operation adds to
// an encoded transaction beyond its keys and values: a compare with an int
// operand of 10 varint bytes and a key of KeyMax bytes (2 length bytes)
// takes 2+1+1+10.
const elementOverheadMax = 14

// maxKey returns a key of KeyMax bytes in partition w0001, distinct for
// each i.
func maxKey(i int) []byte {
	k := fmt.Appendf(nil, "w/0001/%02d", i)
	return append(k, bytes.Repeat([]byte("k"), partition.KeyMax-len(k))...)
}

// keyBytes returns the bytes of keys, scan ends and values of t, as
// checkShape counts them.
func keyBytes(t *Txn) int {
	n := 0
	for _, c := range t.If {
		n += len(c.Key) + len(c.Value)
	}
	for _, ops := range [][]Op{t.Then, t.Else} {
		for _, o := range ops {
			n += len(o.Key) + len(o.Value) + len(o.End)
		}
	}
	return n
}

// Every compare and operation, with its fields at their largest, adds at
// most elementOverheadMax bytes to the encoding beyond its keys and values.
func TestEncodingOverheadPerElement(t *testing.T) {
	low := int64(math.MinInt64)
	end := append(maxKey(0)[:partition.KeyMax-1:partition.KeyMax-1], 'l')
	for _, tx := range []*Txn{
		{If: []Compare{{Key: maxKey(0), Cmp: CmpGreaterEqual, Int: &low}}},
		{If: []Compare{{Key: maxKey(0), Cmp: CmpGreaterEqual, Value: make([]byte, ValueMax)}}},
		{Then: []Op{{Kind: OpGet, Key: maxKey(0)}}},
		{Then: []Op{{Kind: OpPut, Key: maxKey(0), Value: make([]byte, ValueMax)}}},
		{Then: []Op{{Kind: OpDelete, Key: maxKey(0)}}},
		{Then: []Op{{Kind: OpAdd, Key: maxKey(0), Int: math.MinInt64}}},
		{Else: []Op{{Kind: OpScan, Key: maxKey(0), End: end, Limit: ScanLimitMax}}},
	} {
		if err := tx.checkShape(); err != nil {
			t.Fatal(err)
		}
		empty := len(AppendTxn(nil, &Txn{}))
		if over := len(AppendTxn(nil, tx)) - empty - keyBytes(tx); over > elementOverheadMax {
			t.Errorf("%.80s...: %d bytes of overhead, more than %d", jsonOf(tx), over, elementOverheadMax)
		}
	}
	// The payload kind byte, the version, the three counts.
	if bound := 1 + len(AppendTxn(nil, &Txn{})) + BytesMax + OpsMax*elementOverheadMax; bound > PayloadMax {
		t.Errorf("a valid transaction may encode to %d bytes, more than PayloadMax (%d)", bound, PayloadMax)
	}
}

// The largest valid transactions and calls encode within PayloadMax, which
// is within what the replication layer accepts.
func TestLargestPayloadsFit(t *testing.T) {
	if PayloadMax > messagePayloadMax {
		t.Fatalf("PayloadMax %d, more than group.MessagePayloadMax (%d)", PayloadMax, messagePayloadMax)
	}
	pm := testPartitionMap(t, testTopology(t))
	// OpsMax elements of KeyMax-byte keys, the compares with the longest
	// int operand, the rest of BytesMax in values.
	low := int64(math.MinInt64)
	tx := &Txn{}
	const puts = 4
	for i := range OpsMax - puts {
		tx.If = append(tx.If, Compare{Key: maxKey(i), Cmp: CmpLess, Int: &low})
	}
	left := BytesMax - OpsMax*partition.KeyMax
	for i := OpsMax - puts; i < OpsMax; i++ {
		v := min(left, ValueMax)
		left -= v
		tx.Then = append(tx.Then, Op{Kind: OpPut, Key: maxKey(i), Value: bytes.Repeat([]byte("v"), v)})
	}
	if left != 0 || keyBytes(tx) != BytesMax {
		t.Fatalf("%d bytes of keys and values, want BytesMax (%d)", keyBytes(tx), BytesMax)
	}
	if err := tx.Validate(pm); err != nil {
		t.Fatal(err)
	}
	enc := AppendTxnPayload(nil, tx)
	if len(enc) > PayloadMax {
		t.Errorf("the largest transaction encodes to %d bytes, more than PayloadMax (%d)", len(enc), PayloadMax)
	}
	if p, err := DecodePayload(enc); err != nil || !equalTxn(p.Txn, tx) {
		t.Errorf("the largest transaction does not decode back: %v", err)
	}
	last := &tx.Then[puts-1]
	last.Value = append(last.Value, 'v')
	if err := tx.Validate(pm); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "more than BytesMax") {
		t.Errorf("one byte over BytesMax: %v", err)
	}

	c := Call{Name: strings.Repeat("p", ProcNameMax), Args: bytes.Repeat([]byte("a"), ProcArgsMax)}
	enc = AppendCallPayload(nil, c)
	if len(enc) > PayloadMax {
		t.Errorf("the largest call encodes to %d bytes, more than PayloadMax (%d)", len(enc), PayloadMax)
	}
	if p, err := DecodePayload(enc); err != nil || p.Call.Name != c.Name || !bytes.Equal(p.Call.Args, c.Args) {
		t.Errorf("the largest call does not decode back: %v", err)
	}
}
