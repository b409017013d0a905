package channel_test

import (
	"fmt"

	"github.com/flexkv/flexkv/multicast/channel"
)

// Two groups over a link that loses a frame: the receiver holds back what
// follows the gap and asks for it; the sender resends; every envelope is
// handed up once, in order; the acknowledgement empties the outbox.
func Example() {
	cfg := channel.Config{Groups: 2, ResendTicks: 2, HoldbackMax: 8, OutboxMax: 64}
	cfg.Self = 0
	a, _ := channel.New(cfg)
	cfg.Self = 1
	b, _ := channel.New(cfg)

	a.Send(1, []byte("first"))
	a.Send(1, []byte("second"))
	frames := a.Ready().Frames

	// The network loses frames[0].
	_ = b.Receive(frames[1])
	nack := b.Ready().Frames[0]
	fmt.Println("b sends:", nack)

	_ = a.Receive(nack)
	for _, f := range a.Ready().Frames {
		fmt.Println("a sends:", f)
		_ = b.Receive(f)
	}
	for _, in := range b.Ready().Inbound {
		fmt.Printf("b hands up %q from group %d\n", in.Payload, in.From)
	}

	b.Tick()
	for _, f := range b.Ready().Frames {
		fmt.Println("b sends:", f)
		_ = a.Receive(f)
	}
	fmt.Println("unacknowledged at a:", a.OutboxLen(1))
	// Output:
	// b sends: 1->0 seq 0 ack 0 nack 1 (0 bytes)
	// a sends: 0->1 seq 1 ack 0 nack 0 (5 bytes)
	// a sends: 0->1 seq 2 ack 0 nack 0 (6 bytes)
	// b hands up "first" from group 0
	// b hands up "second" from group 0
	// b sends: 1->0 seq 0 ack 2 nack 0 (0 bytes)
	// unacknowledged at a: 0
}
