package executor

// Fixtures shared with package txn's own tests (txn/helpers_test.go,
// eval_test.go, vote_test.go, json_test.go, route_test.go): the executor's
// tests run the same transactions on the same partition map.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// txn's payload kinds (txn/payload.go), for payloads built by hand.
const (
	payloadTxn  byte = 1
	payloadCall byte = 2
)

const designTransfer = `{"if":[{"key":"w/0001/acct","cmp":">=","int":5}],` +
	`"then":[{"op":"add","key":"w/0001/acct","int":-5},{"op":"add","key":"w/0002/acct","int":5}],` +
	`"else":[]}`

const mixedTxn = `{"if":[{"key":"w/0001/a","cmp":">=","int":5},{"key":"item/1","cmp":"=","value":"x"},{"key":"w/0004/b","cmp":"=","int":1}],` +
	`"then":[{"op":"get","key":"item/2"},{"op":"add","key":"w/0001/a","int":-5},{"op":"add","key":"w/0003/a","int":5},{"op":"put","key":"item/3","value":"y"}],` +
	`"else":[{"op":"get","key":"w/0003/a"}]}`

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

func mustParse(t testing.TB, s string) *txn.Txn {
	t.Helper()
	tx, err := txn.ParseJSON([]byte(s))
	if err != nil {
		t.Fatalf("txn.ParseJSON(%s): %v", s, err)
	}
	return tx
}

// describeResults formats results compactly: "0:get k=v", "1:get k missing",
// "2:put k", "3:add k=5", "4:scan [a=1 b=2]".
func describeResults(rs []txn.OpResult) string {
	var out []string
	for _, r := range rs {
		s := fmt.Sprintf("%d:%s %s", r.Index, r.Kind, r.Key)
		switch r.Kind {
		case txn.OpGet:
			if r.Found {
				s += "=" + string(r.Value)
			} else {
				s += " missing"
			}
		case txn.OpAdd:
			s += fmt.Sprintf("=%d", r.Int)
		case txn.OpScan:
			var kvs []string
			for _, kv := range r.KVs {
				kvs = append(kvs, string(kv.Key)+"="+string(kv.Value))
			}
			s = fmt.Sprintf("%d:scan [%s]", r.Index, strings.Join(kvs, " "))
		case txn.OpPut, txn.OpDelete:
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

var testPieceResults = []txn.PieceResult{
	{},
	{Succeeded: true},
	{Aborted: true, Reason: `txn: then[0]: add to "w/0001/x": stored value "abc": not an integer`},
	{Succeeded: true, Truncated: true},
	{Succeeded: true, Results: []txn.OpResult{
		{Index: 0, Kind: txn.OpGet, Key: []byte("k"), Found: true, Value: []byte("v")},
		{Index: 1, Kind: txn.OpGet, Key: []byte("missing")},
		{Index: 2, Kind: txn.OpGet, Key: []byte("empty"), Found: true, Value: []byte{}},
		{Index: 3, Kind: txn.OpPut, Key: []byte("p")},
		{Index: 4, Kind: txn.OpDelete, Key: []byte("d")},
		{Index: 5, Kind: txn.OpAdd, Key: []byte("n"), Int: -1 << 63},
		{Index: 6, Kind: txn.OpScan, Key: []byte("s"), KVs: []txn.KV{{Key: []byte("s1"), Value: []byte("1")}, {Key: []byte("s2"), Value: []byte{}}}},
		{Index: 900, Kind: txn.OpScan, Key: []byte("e"), KVs: []txn.KV{}},
	}},
}

// describePieceResult formats r with every field, for comparisons.
func describePieceResult(r txn.PieceResult) string {
	return fmt.Sprintf("%v %v %q %v %s", r.Succeeded, r.Aborted, r.Reason, r.Truncated, describeResults(r.Results))
}
