package txn_test

import (
	"fmt"

	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// The transfer of DESIGN 7 between two warehouses of two groups: parsed,
// validated, routed and split into the pieces each group executes.
func ExampleParseJSON() {
	top, _ := partition.NewTopology(partition.Spec{Groups: []partition.Group{{Name: "eu"}, {Name: "us"}}})
	pm, _ := partition.NewPartitionMap(top, []partition.Partition{
		{Name: "w0001", Start: []byte("w/0001/"), End: []byte("w/0002/"), Group: 0},
		{Name: "w0002", Start: []byte("w/0002/"), End: []byte("w/0003/"), Group: 1},
	})
	t, err := txn.ParseJSON([]byte(`{"if":[{"key":"w/0001/acct","cmp":">=","int":5}],
	  "then":[{"op":"add","key":"w/0001/acct","int":-5},{"op":"add","key":"w/0002/acct","int":5}],
	  "else":[]}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	dst, err := t.Destinations(pm, top, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	pieces, err := t.Pieces(pm, top, dst)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("destinations:", dst)
	for _, p := range pieces {
		fmt.Printf("group %d: then ops %v, waits for votes of %s\n", p.Group, p.Then, p.Voters)
	}
	out, _ := t.MarshalJSON()
	fmt.Println(string(out))
	// Output:
	// destinations: {0,1}
	// group 0: then ops [0], waits for votes of {1}
	// group 1: then ops [1], waits for votes of {0}
	// {"if":[{"key":"w/0001/acct","cmp":">=","int":5}],"then":[{"op":"add","key":"w/0001/acct","int":-5},{"op":"add","key":"w/0002/acct","int":5}],"else":[]}
}
