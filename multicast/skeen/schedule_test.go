package skeen

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// TestSchedulesExhaustive enumerates every interleaving of the client
// requests and of the envelopes on the FIFO links, for small sets of
// concurrent messages, and checks every complete execution against
// DESIGN 3.1. States reached twice are explored once. Each case also checks
// that the schedules are adversarial enough to produce more than one
// delivery order, so that agreement is not met by luck.
func TestSchedulesExhaustive(t *testing.T) {
	A, B, C := partition.GroupID(0), partition.GroupID(1), partition.GroupID(2)
	type request struct {
		at partition.GroupID
		m  multicast.Message
	}
	tests := []struct {
		name      string
		groups    int
		requests  []request
		wantOrder int  // distinct global delivery orders at least
		long      bool // skipped with -short
	}{
		{
			name:   "two groups, entries at both ends",
			groups: 2,
			requests: []request{
				{A, msg(1, 1, A, B)},
				{B, msg(2, 1, A, B)},
			},
			wantOrder: 2,
		},
		{
			name:   "overlap at one group, with a local message there",
			groups: 3,
			requests: []request{
				{A, msg(1, 1, A, B)},
				{C, msg(2, 1, B, C)},
				{B, msg(3, 1, B)},
			},
			wantOrder: 6,
		},
		{
			name:   "all groups and two of them",
			groups: 3,
			requests: []request{
				{A, msg(1, 1, A, B, C)},
				{C, msg(2, 1, B, C)},
			},
			wantOrder: 2,
		},
		{
			name:   "all groups twice, different entries",
			groups: 3,
			requests: []request{
				{A, msg(1, 1, A, B, C)},
				{B, msg(2, 1, A, B, C)},
			},
			wantOrder: 2,
			long:      true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.long && testing.Short() {
				t.Skip("explores 25,000 states")
			}
			x := explorer{
				t:      t,
				seen:   make(map[string]bool),
				orders: make(map[string]bool),
				done:   make([]bool, len(tt.requests)),
			}
			for _, r := range tt.requests {
				x.requests = append(x.requests, r.at)
				x.msgs = append(x.msgs, r.m)
			}
			x.step(newCluster(t, tt.groups, 0))
			t.Logf("%d states, %d distinct final states, %d distinct delivery orders", len(x.seen), x.leaves, len(x.orders))
			if len(x.orders) < tt.wantOrder {
				t.Errorf("got %d distinct delivery orders over all schedules, want at least %d:\n%s",
					len(x.orders), tt.wantOrder, strings.Join(slices.Sorted(maps.Keys(x.orders)), "\n"))
			}
		})
	}
}

// explorer walks every schedule of its requests (msgs[i] at requests[i])
// and of the envelopes they cause, depth first.
type explorer struct {
	t        *testing.T
	requests []partition.GroupID
	msgs     []multicast.Message
	done     []bool          // the requests made on the current path
	seen     map[string]bool // states explored
	orders   map[string]bool // the delivery orders of distinct final states
	leaves   int
}

// step explores every move from cl: each request not yet made, and the
// next envelope of each busy link, each on its own copy of the cluster.
func (x *explorer) step(cl *cluster) {
	key := x.key(cl, x.done)
	if x.seen[key] {
		return
	}
	x.seen[key] = true
	moved := false
	for i, at := range x.requests {
		if x.done[i] {
			continue
		}
		moved = true
		next := cloneCluster(cl)
		if _, _, err := next.Request(at, x.msgs[i]); err != nil {
			x.t.Fatalf("request %s: %v", x.msgs[i].ID, err)
		}
		x.done[i] = true
		x.step(next)
		x.done[i] = false
	}
	for _, l := range cl.Busy() {
		moved = true
		next := cloneCluster(cl)
		next.Recv(l[0], l[1])
		x.step(next)
	}
	if !moved {
		x.leaf(cl)
	}
}

// key identifies a state of the whole system: cores, links, orders so far
// and requests made.
func (x *explorer) key(cl *cluster, done []bool) string {
	var b strings.Builder
	fmt.Fprint(&b, done)
	for g, c := range cl.Cores {
		b.Write(c.dumpState())
		b.WriteByte('|')
		for _, id := range cl.OrderIDs(partition.GroupID(g)) {
			b.WriteString(id.String())
		}
		for h := range cl.Cores {
			b.WriteByte('|')
			for _, s := range cl.Net.Queued(partition.GroupID(g), partition.GroupID(h)) {
				b.Write(s.Payload)
			}
		}
	}
	return b.String()
}

func (x *explorer) leaf(cl *cluster) {
	x.t.Helper()
	x.leaves++
	if err := cl.Verify(true); err != nil {
		x.t.Fatalf("execution violates the contract: %v\norders: %s", err, cl.DescribeOrders())
	}
	for _, c := range cl.Cores {
		if s := c.Stats(); s.Pending != 0 {
			x.t.Fatalf("quiescent core holds %d messages: %+v", s.Pending, s)
		}
	}
	x.orders[cl.DescribeOrders()] = true
}

// cloneCluster returns an independent copy of the cluster.
func cloneCluster(cl *cluster) *cluster { return cl.Clone((*Core).clone) }

// clone returns an independent copy of the core. Payloads are shared: the
// core never writes them.
func (c *Core) clone() *Core {
	out := *c
	copies := make(map[*entry]*entry, len(c.entries))
	out.entries = make(map[multicast.MsgID]*entry, len(c.entries))
	for id, e := range c.entries {
		e2 := *e
		copies[e] = &e2
		out.entries[id] = &e2
	}
	out.undecided = make([]*entry, len(c.undecided))
	for i, e := range c.undecided {
		out.undecided[i] = copies[e]
	}
	out.decided = make(decidedHeap, len(c.decided))
	for i, e := range c.decided {
		out.decided[i] = copies[e]
	}
	out.out = multicast.Output{
		Sends:      slices.Clone(c.out.Sends),
		Deliveries: slices.Clone(c.out.Deliveries),
	}
	return &out
}
