package skeen

import (
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

var (
	randomSeeds = flag.Int("skeen.seeds", 1000, "seeds of TestRandomInterleavings")
	randomSeed  = flag.Int64("skeen.seed", -1, "run TestRandomInterleavings with this seed only")
)

// TestRandomInterleavings runs random workloads on 2-5 groups: random
// destination sets (local ones included), a random destination as entry,
// and a random choice at every step between the next client request and
// the head of any busy link. Every core's invariants are checked after
// every step; at the end, every message must be delivered at each of its
// destinations, once, in orders whose union has no cycle. Half of the runs
// use a small PendingMax: refused requests are retried later.
//
// A failure prints its seed; replay it with
//
//	go test ./multicast/skeen -run TestRandomInterleavings -skeen.seed=SEED -v
func TestRandomInterleavings(t *testing.T) {
	first, count := int64(1), int64(*randomSeeds)
	if *randomSeed >= 0 {
		first, count = *randomSeed, 1
	}
	if testing.Short() && *randomSeed < 0 {
		count = min(count, 50)
	}
	busy, deliveries := 0, 0
	for seed := first; seed < first+count; seed++ {
		r, err := runRandom(t, seed)
		if err != nil {
			t.Fatalf("seed %d: %v\nreplay: go test ./multicast/skeen -run TestRandomInterleavings -skeen.seed=%d -v",
				seed, err, seed)
		}
		busy += r.busy
		deliveries += r.deliveries
	}
	t.Logf("%d seeds, %d deliveries, %d requests refused", count, deliveries, busy)
	if *randomSeed < 0 && busy == 0 {
		t.Errorf("no request was refused over %d seeds: the PendingMax runs test nothing", count)
	}
}

type randomResult struct{ busy, deliveries int }

func runRandom(t *testing.T, seed int64) (randomResult, error) {
	rng := rand.New(rand.NewSource(seed))
	n := 2 + rng.Intn(4)
	messages := 10 + rng.Intn(40)
	pendingMax := 0
	if seed%2 == 0 {
		pendingMax = 1 + rng.Intn(3)
	}
	cl := newCluster(t, n, pendingMax)

	type request struct {
		at partition.GroupID
		m  multicast.Message
	}
	queue := make([]request, messages)
	for i := range queue {
		var dst partition.GroupSet
		for dst.Empty() {
			for g := range n {
				if rng.Intn(3) == 0 {
					dst = dst.Add(partition.GroupID(g))
				}
			}
		}
		members := dst.Slice()
		queue[i] = request{
			at: members[rng.Intn(len(members))],
			m:  msg(uint64(1+rng.Intn(3)), uint64(i), members...),
		}
	}

	var res randomResult
	for steps := 0; ; steps++ {
		if steps > 100_000 {
			return res, fmt.Errorf("no quiescence after %d steps", steps)
		}
		links := cl.Busy()
		options := len(links)
		if len(queue) > 0 {
			options++
		}
		if options == 0 {
			break
		}
		pick := rng.Intn(options)
		if pick < len(links) {
			cl.Recv(links[pick][0], links[pick][1])
			continue
		}
		r := queue[0]
		queue = queue[1:]
		_, _, err := cl.Request(r.at, r.m)
		switch {
		case errors.Is(err, multicast.ErrBusy):
			res.busy++
			if len(cl.Busy()) == 0 {
				return res, fmt.Errorf("request %s refused at a quiescent group: %w", r.m.ID, err)
			}
			queue = append(queue, r) // retried later
		case err != nil:
			return res, fmt.Errorf("request %s: %w", r.m.ID, err)
		}
	}
	if len(cl.Msgs) != messages {
		return res, fmt.Errorf("%d of %d messages accepted", len(cl.Msgs), messages)
	}
	if err := cl.Verify(true); err != nil {
		return res, fmt.Errorf("%w\norders: %s", err, cl.DescribeOrders())
	}
	for g, c := range cl.Cores {
		s := c.Stats()
		if s.Pending != 0 || int(s.Delivered) != len(cl.Orders[g]) {
			return res, fmt.Errorf("group %d after quiescence: %+v, %d deliveries", g, s, len(cl.Orders[g]))
		}
		res.deliveries += len(cl.Orders[g])
	}
	return res, nil
}
