package partition_test

import (
	"fmt"
	"path/filepath"

	"github.com/flexkv/flexkv/partition"
)

// A message's destination set: its FlexCast lca is its lowest-ranked member,
// and the groups ranked above a destination are the ones it sends acks to.
func ExampleGroupSet() {
	dst := partition.SetOf(4, 1, 6)
	fmt.Println(dst, dst.Len())
	fmt.Println("lca:", dst.Min())
	fmt.Println("above 1:", dst.Above(1))
	fmt.Println("below 6:", dst.Below(6))
	// Output:
	// {1,4,6} 3
	// lca: 1
	// above 1: {4,6}
	// below 6: {1,4}
}

// The tree protocol sends a message to the tree-lca of its destinations,
// which need not be a destination itself.
func ExampleTopology_TreeLCA() {
	top, err := partition.NewTopology(partition.Spec{
		Groups: []partition.Group{{Name: "eu"}, {Name: "paris"}, {Name: "dublin"}, {Name: "us"}},
		Parent: map[string]string{"paris": "eu", "dublin": "eu", "us": "eu"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	paris, _ := top.Lookup("paris")
	dublin, _ := top.Lookup("dublin")
	lca := top.TreeLCA(partition.SetOf(paris, dublin))
	fmt.Println(top.Name(lca))
	// Output: eu
}

// Skeen's entry group is the destination nearest to the client.
func ExampleLatency_Nearest() {
	l, err := partition.ReadLatencyFile(filepath.Join("..", "configs", "aws-12-regions-latency-ms.csv"))
	if err != nil {
		fmt.Println(err)
		return
	}
	top, err := partition.NewTopology(partition.Spec{Groups: []partition.Group{
		{Name: "dublin", Region: "eu-west-1"},
		{Name: "virginia", Region: "us-east-1"},
		{Name: "paris", Region: "eu-west-3"},
		{Name: "tokyo", Region: "ap-northeast-1"},
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, g := range l.Nearest(top, 0, top.All()) {
		fmt.Printf("%s %.2f ms\n", top.Name(g), l.GroupRTTMs(top, 0, g))
	}
	// Output:
	// paris 19.51 ms
	// virginia 69.89 ms
	// tokyo 215.82 ms
}
