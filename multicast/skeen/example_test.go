package skeen_test

import (
	"fmt"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/skeen"
	"github.com/flexkv/flexkv/partition"
)

// Two groups order a global message and a local one. The shell is reduced
// to one FIFO queue of envelopes, which keeps every link FIFO.
func Example() {
	top, err := partition.NewTopology(partition.Spec{Groups: []partition.Group{{Name: "eu"}, {Name: "us"}}})
	if err != nil {
		panic(err)
	}
	cores := make([]*skeen.Core, top.Len())
	for g := range cores {
		if cores[g], err = skeen.New(skeen.Config{Self: partition.GroupID(g), Topology: top}); err != nil {
			panic(err)
		}
	}
	// run steps in at group g, then every envelope that follows from it.
	run := func(g partition.GroupID, in multicast.Input) {
		type envelope struct {
			from partition.GroupID
			send multicast.Send
		}
		var queue []envelope
		for {
			if err := cores[g].Step(in); err != nil {
				panic(err)
			}
			out := cores[g].Ready()
			for _, m := range out.Deliveries {
				fmt.Printf("%s delivers %s\n", top.Name(g), m.ID)
			}
			for _, s := range out.Sends {
				fmt.Printf("%s -> %s: %s %s\n", top.Name(g), top.Name(s.To), s.Kind, s.About)
				queue = append(queue, envelope{g, s})
			}
			if len(queue) == 0 {
				return
			}
			next := queue[0]
			queue = queue[1:]
			g, in = next.send.To, multicast.Envelope(next.from, next.send.Payload)
		}
	}

	both := partition.SetOf(0, 1)
	entry := skeen.Entry(nil, top, 1, both)
	run(entry, multicast.Request(multicast.Message{ID: multicast.MsgID{Client: 1, Seq: 1}, Dst: both}))
	run(1, multicast.Request(multicast.Message{ID: multicast.MsgID{Client: 2, Seq: 1}, Dst: partition.SetOf(1)}))
	fmt.Println(cores[1].Stats().Delivered, "delivered at us")
	// Output:
	// eu -> us: relay c1.1
	// eu -> us: ts c1.1
	// us -> eu: ts c1.1
	// us delivers c1.1
	// eu delivers c1.1
	// us delivers c2.1
	// 2 delivered at us
}
