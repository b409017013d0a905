package txn

import (
	"bytes"
	"testing"

	"github.com/flexkv/flexkv/partition"
)

// testTopology has groups a, b, c: GroupIDs 0, 1, 2.
func testTopology(t testing.TB) *partition.Topology {
	t.Helper()
	top, err := partition.NewTopology(partition.Spec{Groups: []partition.Group{{Name: "a"}, {Name: "b"}, {Name: "c"}}})
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// testPartitionMap: the item table replicated; warehouses 1 and 2 in group
// 0, 3 in group 1, 4 in group 2; nothing else ("x/..." is in no partition).
func testPartitionMap(t testing.TB, top *partition.Topology) *partition.PartitionMap {
	t.Helper()
	part := func(name, start, end string, g partition.GroupID) partition.Partition {
		return partition.Partition{Name: name, Start: []byte(start), End: []byte(end), Group: g}
	}
	item := part("item", "item/", "item0", partition.NoGroup)
	item.Replicated = true
	pm, err := partition.NewPartitionMap(top, []partition.Partition{
		item,
		part("w0001", "w/0001/", "w/0002/", 0),
		part("w0002", "w/0002/", "w/0003/", 0),
		part("w0003", "w/0003/", "w/0004/", 1),
		part("w0004", "w/0004/", "w/0005/", 2),
	})
	if err != nil {
		t.Fatal(err)
	}
	return pm
}

func i64(v int64) *int64 { return &v }

func mustParse(t testing.TB, s string) *Txn {
	t.Helper()
	tx, err := ParseJSON([]byte(s))
	if err != nil {
		t.Fatalf("ParseJSON(%s): %v", s, err)
	}
	return tx
}

// equalTxn compares transactions field by field: byte slices by content,
// except that a compare's Value must be nil exactly when the other's is
// (nil means "no value operand").
func equalTxn(a, b *Txn) bool {
	if len(a.If) != len(b.If) || len(a.Then) != len(b.Then) || len(a.Else) != len(b.Else) {
		return false
	}
	for i := range a.If {
		x, y := a.If[i], b.If[i]
		if !bytes.Equal(x.Key, y.Key) || x.Cmp != y.Cmp || (x.Int == nil) != (y.Int == nil) ||
			(x.Int != nil && *x.Int != *y.Int) || (x.Value == nil) != (y.Value == nil) || !bytes.Equal(x.Value, y.Value) {
			return false
		}
	}
	for _, pair := range [][2][]Op{{a.Then, b.Then}, {a.Else, b.Else}} {
		for i := range pair[0] {
			x, y := pair[0][i], pair[1][i]
			if x.Kind != y.Kind || !bytes.Equal(x.Key, y.Key) || !bytes.Equal(x.Value, y.Value) ||
				x.Int != y.Int || !bytes.Equal(x.End, y.End) || x.Limit != y.Limit || x.Wrap != y.Wrap {
				return false
			}
		}
	}
	return true
}

// jsonOf marshals tx for failure messages.
func jsonOf(tx *Txn) string {
	b, err := tx.MarshalJSON()
	if err != nil {
		return err.Error()
	}
	return string(b)
}
