// Package simnet is the simulated network of the ordering layer's test
// rigs: one queue per link between the groups of a test, driven one of two
// ways.
//
// By link (Busy, Next, Queued): the driver picks a link and takes the
// message at its head, so that every link is lossless and FIFO, as the
// protocol cores assume of the channel layer (DESIGN 3.1). A test that
// scripts, randomizes or enumerates the schedules of the cores picks the
// links; Cores runs one core per group this way.
//
// By time (Advance, Due): every message falls due some steps after it was
// sent and the driver takes all those due at once, after the faults of
// Faults: drops, duplicates, delays that reorder a link, and links cut for
// a while (DESIGN 12). The channel layer and the node, which must repair
// such a network, run on it this way.
//
// The network is deterministic: its faults draw from the driver's seeded
// generator, and messages due at one step come out in the order they were
// sent unless the generator shuffles them.
package simnet

import (
	"cmp"
	"math/rand/v2"
	"slices"

	"github.com/flexkv/flexkv/partition"
)

// Faults are what a network does to the messages sent on it; the zero value
// does nothing: every message is due the step after it is sent, once.
type Faults struct {
	// Rand draws the random faults and shuffles the messages due at one
	// step; nil: no random fault and no shuffle.
	Rand *rand.Rand
	// DropP and DupP are the chances that a message is lost, and that it is
	// sent twice (each copy may then be lost on its own).
	DropP, DupP float64
	// DelayMax is the most steps a copy takes to fall due, each drawn
	// between 1 and DelayMax (so copies on one link overtake each other);
	// below 2, every copy takes one step.
	DelayMax int
	// Lose, if set, is asked about each message as it is sent, in send
	// order, and loses it when it reports true: a test's own rule of loss.
	Lose func(from, to partition.GroupID) bool
}

// Packet is a message that fell due, with its link.
type Packet[M any] struct {
	From, To partition.GroupID
	Msg      M
	seq      uint64
}

// Net carries messages of type M between n groups. It is not safe for
// concurrent use.
type Net[M any] struct {
	n      int
	faults Faults
	links  [][]flight[M] // by from*n + to, oldest first from heads[l]
	heads  []int         // by link: the messages before it were taken
	// busy lists the links that hold messages in the order they became
	// busy, but for an emptied link's place taken by the last one; pos[l]
	// is l's place in it plus one (0: not busy).
	busy []int
	pos  []int
	cut  []int64 // by link: until this step, whatever is sent is lost
	len  int
	now  int64
	seq  uint64
}

type flight[M any] struct {
	due int64
	seq uint64 // send order over the whole network
	msg M
}

// New returns a network between n groups with the given faults.
func New[M any](n int, f Faults) *Net[M] {
	return &Net[M]{
		n: n, faults: f,
		links: make([][]flight[M], n*n), heads: make([]int, n*n), cut: make([]int64, n*n), pos: make([]int, n*n),
	}
}

// markBusy notes whether link l holds messages now.
func (n *Net[M]) markBusy(l int) {
	switch busy := len(n.queue(l)) > 0; {
	case busy && n.pos[l] == 0:
		n.busy = append(n.busy, l)
		n.pos[l] = len(n.busy)
	case !busy && n.pos[l] != 0:
		i, last := n.pos[l]-1, n.busy[len(n.busy)-1]
		n.busy[i], n.pos[last] = last, i+1
		n.busy = n.busy[:len(n.busy)-1]
		n.pos[l] = 0
	}
}

func (n *Net[M]) link(from, to partition.GroupID) int { return int(from)*n.n + int(to) }

// queue returns the messages of link l, oldest first.
func (n *Net[M]) queue(l int) []flight[M] { return n.links[l][n.heads[l]:] }

// Now returns the current step.
func (n *Net[M]) Now() int64 { return n.now }

// Advance moves the network to its next step.
func (n *Net[M]) Advance() { n.now++ }

// Len returns the number of messages in flight.
func (n *Net[M]) Len() int { return n.len }

// Send puts m on the link from -> to, unless the link is cut or the faults
// lose it.
func (n *Net[M]) Send(from, to partition.GroupID, m M) {
	l := n.link(from, to)
	f := &n.faults
	if n.now < n.cut[l] || (f.Lose != nil && f.Lose(from, to)) {
		return
	}
	copies := 1
	if f.Rand != nil && f.Rand.Float64() < f.DupP {
		copies = 2
	}
	for range copies {
		if f.Rand != nil && f.Rand.Float64() < f.DropP {
			continue
		}
		delay := int64(1)
		if f.Rand != nil && f.DelayMax > 1 {
			delay += f.Rand.Int64N(int64(f.DelayMax))
		}
		n.seq++
		n.links[l] = append(n.links[l], flight[M]{due: n.now + delay, seq: n.seq, msg: m})
		n.len++
	}
	n.markBusy(l)
}

// Cut loses whatever is sent on the link from -> to before step until (an
// earlier step heals it at once).
func (n *Net[M]) Cut(from, to partition.GroupID, until int64) { n.cut[n.link(from, to)] = until }

// Busy returns the links that hold messages, in (from, to) order.
func (n *Net[M]) Busy() [][2]partition.GroupID {
	var out [][2]partition.GroupID
	for l := range n.links {
		if len(n.queue(l)) > 0 {
			out = append(out, [2]partition.GroupID{partition.GroupID(l / n.n), partition.GroupID(l % n.n)})
		}
	}
	return out
}

// Next removes and returns the oldest message of the link from -> to, due
// or not; it reports false if the link is empty.
func (n *Net[M]) Next(from, to partition.GroupID) (M, bool) {
	l := n.link(from, to)
	q := n.queue(l)
	if len(q) == 0 {
		var zero M
		return zero, false
	}
	m := q[0].msg
	q[0] = flight[M]{}
	n.heads[l]++
	if len(q) == 1 {
		// Empty: the next sends on the link reuse its buffer.
		n.links[l], n.heads[l] = n.links[l][:0], 0
	}
	n.len--
	n.markBusy(l)
	return m, true
}

// Random removes and returns the oldest message of a busy link that r
// draws, each busy link as likely; it reports false if no link is busy. It
// takes constant time, for drivers that serve random links by the million.
func (n *Net[M]) Random(r *rand.Rand) (from, to partition.GroupID, m M, ok bool) {
	if len(n.busy) == 0 {
		return 0, 0, m, false
	}
	l := n.busy[r.IntN(len(n.busy))]
	from, to = partition.GroupID(l/n.n), partition.GroupID(l%n.n)
	m, _ = n.Next(from, to)
	return from, to, m, true
}

// LinkLen returns the number of messages on the link from -> to.
func (n *Net[M]) LinkLen(from, to partition.GroupID) int { return len(n.queue(n.link(from, to))) }

// Queued returns the messages of the link from -> to, oldest first.
func (n *Net[M]) Queued(from, to partition.GroupID) []M {
	q := n.queue(n.link(from, to))
	out := make([]M, len(q))
	for i, fl := range q {
		out[i] = fl.msg
	}
	return out
}

// Due removes and returns the messages due by now: in the order they were
// sent, or shuffled when the faults have a generator.
func (n *Net[M]) Due() []Packet[M] {
	var out []Packet[M]
	for l := range n.links {
		q := n.queue(l)
		kept := q[:0]
		for _, fl := range q {
			if fl.due > n.now {
				kept = append(kept, fl)
				continue
			}
			out = append(out, Packet[M]{From: partition.GroupID(l / n.n), To: partition.GroupID(l % n.n), Msg: fl.msg, seq: fl.seq})
		}
		clear(q[len(kept):])
		n.links[l], n.heads[l] = kept, 0
		n.markBusy(l)
	}
	slices.SortFunc(out, func(a, b Packet[M]) int { return cmp.Compare(a.seq, b.seq) })
	if r := n.faults.Rand; r != nil {
		r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	}
	n.len -= len(out)
	return out
}

// Clone returns an independent copy of the network; the messages
// themselves are shared.
func (n *Net[M]) Clone() *Net[M] {
	out := *n
	out.links = make([][]flight[M], len(n.links))
	for l := range n.links {
		out.links[l] = slices.Clone(n.queue(l))
	}
	out.heads = make([]int, len(n.heads))
	out.busy = slices.Clone(n.busy)
	out.pos = slices.Clone(n.pos)
	out.cut = slices.Clone(n.cut)
	return &out
}
