package simnet

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/check"
	"github.com/flexkv/flexkv/partition"
)

// Cores runs one protocol core per group over a Net of their sends, driven
// by link: the test picks every step (a request at a group, the next
// envelope of a link), and Cores records the requests accepted and each
// group's delivery order for multicast/check. A core that fails an envelope
// or a check fails the test.
type Cores[C multicast.Core] struct {
	TB    testing.TB
	Top   *partition.Topology
	Cores []C // by group; a test may replace a core (a restored copy)
	Net   *Net[multicast.Send]
	// Orders are the messages each group delivered, in order; Msgs the
	// requests accepted, in order, each once.
	Orders [][]multicast.Message
	Msgs   []multicast.Message
	// Check, if set, checks group g's core and what it output after each
	// of its steps.
	Check func(g partition.GroupID, c C, out multicast.Output) error

	accepted map[multicast.MsgID]bool
}

// NewCores returns the cores newCore builds for the groups of top, joined
// by empty links.
func NewCores[C multicast.Core](tb testing.TB, top *partition.Topology, newCore func(g partition.GroupID) (C, error)) *Cores[C] {
	tb.Helper()
	n := top.Len()
	cs := &Cores[C]{
		TB: tb, Top: top, Cores: make([]C, n), Net: New[multicast.Send](n, Faults{}),
		Orders: make([][]multicast.Message, n), accepted: map[multicast.MsgID]bool{},
	}
	for g := range n {
		c, err := newCore(partition.GroupID(g))
		if err != nil {
			tb.Fatal(err)
		}
		cs.Cores[g] = c
	}
	return cs
}

// Request steps m into group g and returns what g sent and delivered. A
// request the core refuses must leave no output.
func (cs *Cores[C]) Request(g partition.GroupID, m multicast.Message) ([]multicast.Send, []multicast.Message, error) {
	cs.TB.Helper()
	if err := cs.Cores[g].Step(multicast.Request(m)); err != nil {
		if out := cs.Cores[g].Ready(); !out.Empty() {
			cs.TB.Fatalf("group %s: failed request %s produced output %+v", cs.Top.Name(g), m.ID, out)
		}
		return nil, nil, err
	}
	if !cs.accepted[m.ID] {
		cs.accepted[m.ID] = true
		cs.Msgs = append(cs.Msgs, m)
	}
	sends, dels := cs.collect(g)
	return sends, dels, nil
}

// Recv moves the oldest envelope of the link from -> to into its core and
// returns what that sent and delivered.
func (cs *Cores[C]) Recv(from, to partition.GroupID) ([]multicast.Send, []multicast.Message) {
	cs.TB.Helper()
	s, ok := cs.Net.Next(from, to)
	if !ok {
		cs.TB.Fatalf("link %s->%s is empty", cs.Top.Name(from), cs.Top.Name(to))
	}
	if err := cs.Cores[to].Step(multicast.Envelope(from, s.Payload)); err != nil {
		cs.TB.Fatalf("group %s: envelope %s %s from %s: %v", cs.Top.Name(to), s.Kind, s.About, cs.Top.Name(from), err)
	}
	return cs.collect(to)
}

// collect drains g's Ready onto the links and into g's delivery order.
func (cs *Cores[C]) collect(g partition.GroupID) ([]multicast.Send, []multicast.Message) {
	cs.TB.Helper()
	out := cs.Cores[g].Ready()
	for _, s := range out.Sends {
		if !cs.Top.Valid(s.To) || s.To == g {
			cs.TB.Fatalf("group %d sends to group %d", g, s.To)
		}
		cs.Net.Send(g, s.To, s)
	}
	cs.Orders[g] = append(cs.Orders[g], out.Deliveries...)
	if cs.Check != nil {
		if err := cs.Check(g, cs.Cores[g], out); err != nil {
			cs.TB.Fatalf("group %s: %v", cs.Top.Name(g), err)
		}
	}
	return out.Sends, out.Deliveries
}

// Busy returns the links that hold envelopes, in (from, to) order.
func (cs *Cores[C]) Busy() [][2]partition.GroupID { return cs.Net.Busy() }

// Drain moves envelopes, one per busy link in turn, until none is left.
func (cs *Cores[C]) Drain() {
	cs.TB.Helper()
	for links := cs.Busy(); len(links) > 0; links = cs.Busy() {
		for _, l := range links {
			cs.Recv(l[0], l[1])
		}
	}
}

// OrderIDs returns the delivery order of g as ids.
func (cs *Cores[C]) OrderIDs(g partition.GroupID) []multicast.MsgID {
	ids := make([]multicast.MsgID, len(cs.Orders[g]))
	for i, m := range cs.Orders[g] {
		ids[i] = m.ID
	}
	return ids
}

// DescribeOrders shows every group's delivery order: "A: c1.1 c2.1; B: ...".
func (cs *Cores[C]) DescribeOrders() string {
	var parts []string
	for g := range cs.Orders {
		var ids []string
		for _, id := range cs.OrderIDs(partition.GroupID(g)) {
			ids = append(ids, id.String())
		}
		parts = append(parts, cs.Top.Name(partition.GroupID(g))+": "+strings.Join(ids, " "))
	}
	return strings.Join(parts, "; ")
}

// Verify checks the delivery orders with multicast/check (DESIGN 3.1):
// integrity, prefix order and acyclic order, and, when complete is set,
// validity and agreement (every message accepted was delivered at each of
// its destinations).
func (cs *Cores[C]) Verify(complete bool) error {
	return CheckOrders(cs.Top, cs.Msgs, cs.Orders, complete)
}

// Clone returns an independent copy of the cores, their links and records,
// each core copied by clone.
func (cs *Cores[C]) Clone(clone func(C) C) *Cores[C] {
	out := *cs
	out.Cores = make([]C, len(cs.Cores))
	for g, c := range cs.Cores {
		out.Cores[g] = clone(c)
	}
	out.Net = cs.Net.Clone()
	out.Orders = make([][]multicast.Message, len(cs.Orders))
	for g, o := range cs.Orders {
		out.Orders[g] = slices.Clone(o)
	}
	out.accepted = maps.Clone(cs.accepted)
	out.Msgs = slices.Clone(cs.Msgs)
	return &out
}

// CheckOrders checks the delivery orders of the groups of top, given the
// messages multicast, with multicast/check; see Cores.Verify.
func CheckOrders(top *partition.Topology, msgs []multicast.Message, orders [][]multicast.Message, complete bool) error {
	names := func(dst partition.GroupSet) []string {
		var out []string
		for _, g := range dst.Slice() {
			out = append(out, top.Name(g))
		}
		return out
	}
	var recs []check.Record
	for _, m := range msgs {
		recs = append(recs, check.Record{Ev: check.EvMulticast, ID: m.ID.String(), Dst: names(m.Dst)})
	}
	for g, order := range orders {
		for _, m := range order {
			recs = append(recs, check.Record{Ev: check.EvDeliver, Group: top.Name(partition.GroupID(g)), Replica: "r1",
				ID: m.ID.String(), Dst: names(m.Dst)})
		}
	}
	if rep := check.Check(recs, check.Options{Complete: complete}); !rep.OK() {
		return errors.New(rep.Summary())
	}
	return nil
}
