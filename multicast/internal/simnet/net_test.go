package simnet

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flexkv/flexkv/partition"
)

// TestNetByLink: a driver that takes messages by link gets each link's in
// the order they were sent, whatever it does with the other links.
func TestNetByLink(t *testing.T) {
	n := New[int](3, Faults{})
	n.Send(0, 1, 1)
	n.Send(2, 0, 2)
	n.Send(0, 1, 3)
	n.Send(1, 2, 4)
	if got, want := n.Busy(), [][2]partition.GroupID{{0, 1}, {1, 2}, {2, 0}}; !slices.Equal(got, want) {
		t.Fatalf("Busy = %v, want %v", got, want)
	}
	if n.Len() != 4 || n.LinkLen(0, 1) != 2 || n.LinkLen(1, 0) != 0 {
		t.Fatalf("Len %d, LinkLen(0,1) %d, LinkLen(1,0) %d; want 4, 2, 0", n.Len(), n.LinkLen(0, 1), n.LinkLen(1, 0))
	}
	if got := n.Queued(0, 1); !slices.Equal(got, []int{1, 3}) {
		t.Fatalf("Queued(0,1) = %v, want [1 3]", got)
	}
	for _, want := range []int{1, 3} {
		if got, ok := n.Next(0, 1); !ok || got != want {
			t.Fatalf("Next(0,1) = %d, %v; want %d", got, ok, want)
		}
	}
	if got, ok := n.Next(0, 1); ok {
		t.Fatalf("Next on an empty link = %d, want nothing", got)
	}
	if n.Len() != 2 {
		t.Fatalf("Len = %d after two Next, want 2", n.Len())
	}
}

// TestNetDueInSendOrder: without faults every message falls due the step
// after it is sent, and the messages due come out in send order across
// links.
func TestNetDueInSendOrder(t *testing.T) {
	n := New[int](3, Faults{})
	n.Send(2, 1, 1)
	n.Send(0, 1, 2)
	n.Send(2, 1, 3)
	if due := n.Due(); len(due) != 0 {
		t.Fatalf("Due in the step of the sends = %v, want nothing", due)
	}
	n.Advance()
	n.Send(1, 0, 4) // due one step later
	due := n.Due()
	want := []Packet[int]{{From: 2, To: 1, Msg: 1}, {From: 0, To: 1, Msg: 2}, {From: 2, To: 1, Msg: 3}}
	if len(due) != len(want) {
		t.Fatalf("Due = %v, want %v", due, want)
	}
	for i := range want {
		if due[i].From != want[i].From || due[i].To != want[i].To || due[i].Msg != want[i].Msg {
			t.Fatalf("Due[%d] = %+v, want %+v", i, due[i], want[i])
		}
	}
	n.Advance()
	if due := n.Due(); len(due) != 1 || due[0].Msg != 4 || n.Len() != 0 || n.Now() != 2 {
		t.Fatalf("Due at step %d = %v with %d left, want message 4 alone", n.Now(), due, n.Len())
	}
}

// TestNetFaults: with faults on, messages are lost, sent twice and
// overtake each other on a link, each copy within DelayMax; a cut link and
// the test's own rule lose what is sent on them; nothing else is lost.
func TestNetFaults(t *testing.T) {
	const sends, delayMax = 2000, 5
	var asked []int
	n := New[int](2, Faults{
		Rand: rand.New(rand.NewPCG(1, 2)), DropP: 0.2, DupP: 0.2, DelayMax: delayMax,
		Lose: func(from, _ partition.GroupID) bool {
			asked = append(asked, int(from))
			return from == 1 // the test's rule: lose everything from group 1
		},
	})
	sentAt := map[int]int64{}
	copies := map[int]int{}
	overtaken, lastSeen := 0, -1
	for i := range sends {
		sentAt[i] = n.Now()
		n.Send(0, 1, i)
		n.Send(1, 0, -1)
		for _, p := range n.Due() {
			if p.From != 0 {
				t.Fatalf("a message from group 1 got through: %+v", p)
			}
			if d := n.Now() - sentAt[p.Msg]; d < 1 || d > delayMax {
				t.Fatalf("message %d took %d steps, want 1..%d", p.Msg, d, delayMax)
			}
			copies[p.Msg]++
			if p.Msg < lastSeen {
				overtaken++
			}
			lastSeen = p.Msg
		}
		n.Advance()
	}
	if len(asked) != 2*sends || asked[0] != 0 || asked[1] != 1 {
		t.Fatalf("Lose asked %d times starting %v, want %d in send order", len(asked), asked[:2], 2*sends)
	}
	lost, twice := 0, 0
	for i := range sends - delayMax { // the last ones may still be in flight
		switch copies[i] {
		case 0:
			lost++
		case 2:
			twice++
		case 1:
		default:
			t.Fatalf("message %d arrived %d times", i, copies[i])
		}
	}
	if lost == 0 || twice == 0 || overtaken == 0 {
		t.Fatalf("lost %d, twice %d, overtaken %d: want some of each", lost, twice, overtaken)
	}

	c := New[int](2, Faults{})
	c.Cut(0, 1, 2)
	c.Send(0, 1, 1) // lost: step 0
	c.Send(1, 0, 2) // the other direction is not cut
	c.Advance()
	c.Advance()
	c.Send(0, 1, 3) // step 2: healed
	if c.Len() != 2 || c.LinkLen(0, 1) != 1 {
		t.Fatalf("after a cut: %d in flight, %d on the cut link; want 2 and 1", c.Len(), c.LinkLen(0, 1))
	}
}

// TestNetClone: a copy moves on its own.
func TestNetClone(t *testing.T) {
	n := New[int](2, Faults{})
	n.Send(0, 1, 1)
	c := n.Clone()
	c.Send(0, 1, 2)
	if _, ok := c.Next(0, 1); !ok {
		t.Fatal("the copy lost its message")
	}
	if got := n.Queued(0, 1); !slices.Equal(got, []int{1}) || n.Len() != 1 {
		t.Fatalf("the original holds %v (Len %d) after the copy moved, want [1]", got, n.Len())
	}
	if got := c.Queued(0, 1); !slices.Equal(got, []int{2}) || c.Len() != 1 {
		t.Fatalf("the copy holds %v (Len %d), want [2]", got, c.Len())
	}
}

// TestNetRandom: a driver that serves random links gets every link's
// messages in FIFO order, draws every busy link, and learns when all are
// empty; a copy draws the same.
func TestNetRandom(t *testing.T) {
	n := New[int](3, Faults{})
	next := map[[2]partition.GroupID]int{}
	for i := range 30 {
		from, to := partition.GroupID(i%3), partition.GroupID((i/3+1+i%3)%3)
		if from == to {
			to = (to + 1) % 3
		}
		n.Send(from, to, i)
	}
	r := rand.New(rand.NewPCG(3, 4))
	c := n.Clone()
	rc := rand.New(rand.NewPCG(3, 4))
	drawn := map[[2]partition.GroupID]bool{}
	for n.Len() > 0 {
		busy := len(n.Busy())
		from, to, m, ok := n.Random(r)
		cf, ct, cm, cok := c.Random(rc)
		if !ok || cf != from || ct != to || cm != m || !cok {
			t.Fatalf("Random = %d->%d %d %v, its copy %d->%d %d %v", from, to, m, ok, cf, ct, cm, cok)
		}
		link := [2]partition.GroupID{from, to}
		if m < next[link] {
			t.Fatalf("link %v gave %d after %d", link, m, next[link])
		}
		next[link] = m
		if n.LinkLen(from, to) == 0 && len(n.Busy()) != busy-1 {
			t.Fatalf("link %v emptied, %d busy left, want %d", link, len(n.Busy()), busy-1)
		}
		drawn[link] = true
	}
	if len(drawn) != 6 {
		t.Fatalf("drew %d links, want all 6", len(drawn))
	}
	if _, _, _, ok := n.Random(r); ok {
		t.Fatal("Random on an empty network found a message")
	}
}
