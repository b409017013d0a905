package check_test

import (
	"fmt"
	"os"

	"github.com/flexkv/flexkv/multicast/check"
)

// Three groups whose pairwise orders agree while the union of their orders
// is a cycle: A delivers m1 before m2, B m2 before m3, C m3 before m1.
func ExampleChecker() {
	w := check.NewWriter(os.Stdout)
	c := check.New(check.Options{Complete: true})
	log := func(r check.Record) {
		if err := w.Write(r); err != nil {
			panic(err)
		}
		if err := c.Add(r); err != nil {
			panic(err)
		}
	}
	dst := map[string][]string{"m1": {"A", "C"}, "m2": {"A", "B"}, "m3": {"B", "C"}}
	for _, id := range []string{"m1", "m2", "m3"} {
		log(check.Record{Ev: check.EvMulticast, ID: id, Dst: dst[id]})
	}
	for _, d := range [][2]string{{"A", "m1"}, {"A", "m2"}, {"B", "m2"}, {"B", "m3"}, {"C", "m3"}, {"C", "m1"}} {
		log(check.Record{Ev: check.EvDeliver, Group: d[0], Replica: "r1", ID: d[1], Dst: dst[d[1]]})
	}
	if err := w.Flush(); err != nil {
		panic(err)
	}
	fmt.Println(c.Report().Summary())
	// Output:
	// {"ev":"multicast","id":"m1","dst":["A","C"]}
	// {"ev":"multicast","id":"m2","dst":["A","B"]}
	// {"ev":"multicast","id":"m3","dst":["B","C"]}
	// {"ev":"deliver","group":"A","replica":"r1","id":"m1","dst":["A","C"]}
	// {"ev":"deliver","group":"A","replica":"r1","id":"m2","dst":["A","B"]}
	// {"ev":"deliver","group":"B","replica":"r1","id":"m2","dst":["A","B"]}
	// {"ev":"deliver","group":"B","replica":"r1","id":"m3","dst":["B","C"]}
	// {"ev":"deliver","group":"C","replica":"r1","id":"m3","dst":["B","C"]}
	// {"ev":"deliver","group":"C","replica":"r1","id":"m1","dst":["A","C"]}
	// FAIL: 1 violation: acyclic-order: cycle m1 -> m2 -> m3 -> m1 (orders of A, B, C)
}
