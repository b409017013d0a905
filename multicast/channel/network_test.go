package channel

import (
	"bytes"
	"fmt"
	"math/rand"
	"testing"

	"github.com/flexkv/flexkv/partition"
)

// lossyNet carries frames between channels. It drops and duplicates frames,
// delays each copy by its own random number of steps (which reorders them),
// and cuts links during blackouts.
type lossyNet struct {
	rng      *rand.Rand
	dropP    float64
	dupP     float64
	delayMax int
	now      int
	inFlight []flight
	// blackout[from][to] is the step up to which the link drops everything.
	blackout [][]int
}

type flight struct {
	due int
	f   Frame
}

func (n *lossyNet) transmit(frames []Frame) {
	for _, f := range frames {
		if n.now < n.blackout[f.From][f.To] {
			continue
		}
		copies := 1
		if n.rng.Float64() < n.dupP {
			copies = 2
		}
		for range copies {
			if n.rng.Float64() < n.dropP {
				continue
			}
			n.inFlight = append(n.inFlight, flight{due: n.now + 1 + n.rng.Intn(n.delayMax), f: f})
		}
	}
}

// due removes and returns the frames due now, in random order.
func (n *lossyNet) due() []Frame {
	var out []Frame
	kept := n.inFlight[:0]
	for _, fl := range n.inFlight {
		if fl.due <= n.now {
			out = append(out, fl.f)
		} else {
			kept = append(kept, fl)
		}
	}
	n.inFlight = kept
	n.rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// TestLossyNetwork runs groups that send to each other over a network that
// drops, duplicates, delays, reorders and partitions, with the senders
// admitting new envelopes only while their channel is not Busy. It checks
// that every envelope is handed up exactly once, in the order it was sent,
// that no outbox grows past OutboxMax, and that every outbox and hold-back
// queue is empty at the end. Replay a failure with
// go test ./multicast/channel -run 'TestLossyNetwork/seed=N$' -v.
func TestLossyNetwork(t *testing.T) {
	for seed := int64(1); seed <= 60; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runLossyNetwork(t, seed) })
	}
}

func runLossyNetwork(t *testing.T, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	groups := 2 + rng.Intn(3)
	cfg := Config{
		Groups:      groups,
		ResendTicks: 1 + rng.Intn(4),
		HoldbackMax: rng.Intn(6),
		OutboxMax:   1 + rng.Intn(16),
	}
	tickSteps := 1 + rng.Intn(5)
	net := &lossyNet{rng: rng, dropP: 0.3 * rng.Float64(), dupP: 0.3 * rng.Float64(), delayMax: 1 + rng.Intn(20)}
	net.blackout = make([][]int, groups)
	for g := range groups {
		net.blackout[g] = make([]int, groups)
	}
	t.Logf("%+v, tick every %d steps, drop %.2f, dup %.2f, delay <= %d steps",
		cfg, tickSteps, net.dropP, net.dupP, net.delayMax)

	chans := make([]*Channel, groups)
	for g := range chans {
		c := cfg
		c.Self = partition.GroupID(g)
		chans[g] = newChannel(t, c)
	}
	// sent[from][to] counts envelopes sent; got[to][from] those handed up.
	sent := make([][]int, groups)
	got := make([][]int, groups)
	for g := range groups {
		sent[g] = make([]int, groups)
		got[g] = make([]int, groups)
	}
	payload := func(from, to, k int) []byte { return fmt.Appendf(nil, "%d>%d#%d", from, to, k) }
	drain := func(g int) {
		out := chans[g].Ready()
		for _, f := range out.Frames {
			if f.From != partition.GroupID(g) {
				t.Fatalf("group %d emitted frame %s", g, f)
			}
		}
		net.transmit(out.Frames)
		for _, in := range out.Inbound {
			want := payload(int(in.From), g, got[g][in.From]+1)
			if !bytes.Equal(in.Payload, want) {
				t.Fatalf("step %d: group %d handed up %q from %d, want %q (not exactly once in FIFO order)",
					net.now, g, in.Payload, in.From, want)
			}
			got[g][in.From]++
		}
		if err := chans[g].check(); err != nil {
			t.Fatalf("step %d: group %d: %v", net.now, g, err)
		}
		for p := range groups {
			if p != g && chans[g].OutboxLen(partition.GroupID(p)) > cfg.OutboxMax {
				t.Fatalf("step %d: group %d holds %d envelopes for %d, OutboxMax %d",
					net.now, g, chans[g].OutboxLen(partition.GroupID(p)), p, cfg.OutboxMax)
			}
		}
	}

	const messages = 400
	const stepsMax = 100_000
	total, refused := 0, 0
	quiet := func() bool {
		if total < messages || len(net.inFlight) != 0 {
			return false
		}
		for _, c := range chans {
			for to := range c.links {
				if len(c.links[to].outbox) != 0 {
					return false
				}
			}
		}
		return true
	}
	for ; net.now < stepsMax && !quiet(); net.now++ {
		if total < messages && rng.Intn(2) == 0 {
			from := rng.Intn(groups)
			to := rng.Intn(groups - 1)
			if to >= from {
				to++
			}
			if chans[from].Busy() {
				refused++
			} else {
				sent[from][to]++
				total++
				chans[from].Send(partition.GroupID(to), payload(from, to, sent[from][to]))
				drain(from)
			}
		}
		if rng.Intn(200) == 0 {
			// Cut one direction of one link for a while.
			from, to := rng.Intn(groups), rng.Intn(groups)
			net.blackout[from][to] = net.now + rng.Intn(100)
		}
		for _, f := range net.due() {
			if err := chans[f.To].Receive(f); err != nil {
				t.Fatalf("step %d: Receive(%s): %v", net.now, f, err)
			}
			drain(int(f.To))
		}
		if net.now%tickSteps == 0 {
			for g := range chans {
				chans[g].Tick()
				drain(g)
			}
		}
	}
	if !quiet() {
		t.Fatalf("not quiet after %d steps: %d of %d sent, %d frames in flight", net.now, total, messages, len(net.inFlight))
	}
	for from := range groups {
		for to := range groups {
			if got[to][from] != sent[from][to] {
				t.Errorf("%d -> %d: handed up %d of %d envelopes", from, to, got[to][from], sent[from][to])
			}
		}
	}
	for g, c := range chans {
		for p := range c.links {
			if n := len(c.links[p].holdback); n != 0 {
				t.Errorf("group %d holds back %d frames from %d at the end", g, n, p)
			}
		}
	}
	var st Stats
	for _, c := range chans {
		s := c.Stats()
		st.DataResent += s.DataResent
		st.HeldBack += s.HeldBack
		st.DuplicatesDropped += s.DuplicatesDropped
		st.NacksServed += s.NacksServed
	}
	t.Logf("quiet after %d steps; %d requests refused while busy; %+v", net.now, refused, st)
}
