package channel

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/flexkv/flexkv/multicast/internal/simnet"
	"github.com/flexkv/flexkv/partition"
)

// TestLossyNetwork runs groups that send to each other over a network that
// drops, duplicates, delays, reorders and partitions (simnet with every
// fault), with the senders admitting new envelopes only while their channel
// is not Busy. It checks that every envelope is handed up exactly once, in
// the order it was sent, that no outbox grows past OutboxMax, and that every
// outbox and hold-back queue is empty at the end. Replay a failure with
// go test ./multicast/channel -run 'TestLossyNetwork/seed=N$' -v.
func TestLossyNetwork(t *testing.T) {
	for seed := uint64(1); seed <= 60; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runLossyNetwork(t, seed) })
	}
}

// lossyRun is one run of TestLossyNetwork: its channels, its network and
// what was sent and handed up.
type lossyRun struct {
	t     *testing.T
	cfg   Config
	net   *simnet.Net[Frame]
	chans []*Channel
	// sent[from][to] counts envelopes sent; got[to][from] those handed up.
	sent, got [][]int
}

func newLossyRun(t *testing.T, rng *rand.Rand) *lossyRun {
	groups := 2 + rng.IntN(3)
	cfg := Config{
		Groups:      groups,
		ResendTicks: 1 + rng.IntN(4),
		HoldbackMax: rng.IntN(6),
		OutboxMax:   1 + rng.IntN(16),
	}
	faults := simnet.Faults{Rand: rng, DropP: 0.3 * rng.Float64(), DupP: 0.3 * rng.Float64(), DelayMax: 1 + rng.IntN(20)}
	r := &lossyRun{t: t, cfg: cfg, net: simnet.New[Frame](groups, faults), chans: make([]*Channel, groups)}
	t.Logf("%+v, drop %.2f, dup %.2f, delay <= %d steps", cfg, faults.DropP, faults.DupP, faults.DelayMax)
	for g := range r.chans {
		c := cfg
		c.Self = partition.GroupID(g)
		r.chans[g] = newChannel(t, c)
	}
	r.sent, r.got = make([][]int, groups), make([][]int, groups)
	for g := range groups {
		r.sent[g], r.got[g] = make([]int, groups), make([]int, groups)
	}
	return r
}

func lossyPayload(from, to, k int) []byte { return fmt.Appendf(nil, "%d>%d#%d", from, to, k) }

// drain puts group g's frames on the network and checks what it handed up
// and its bounds.
func (r *lossyRun) drain(g int) {
	t := r.t
	out := r.chans[g].Ready()
	for _, f := range out.Frames {
		if f.From != partition.GroupID(g) {
			t.Fatalf("group %d emitted frame %s", g, f)
		}
		r.net.Send(f.From, f.To, f)
	}
	for _, in := range out.Inbound {
		want := lossyPayload(int(in.From), g, r.got[g][in.From]+1)
		if !bytes.Equal(in.Payload, want) {
			t.Fatalf("step %d: group %d handed up %q from %d, want %q (not exactly once in FIFO order)",
				r.net.Now(), g, in.Payload, in.From, want)
		}
		r.got[g][in.From]++
	}
	if err := r.chans[g].check(); err != nil {
		t.Fatalf("step %d: group %d: %v", r.net.Now(), g, err)
	}
	for p := range r.chans {
		if p == g {
			continue
		}
		if n := r.chans[g].OutboxLen(partition.GroupID(p)); n > r.cfg.OutboxMax {
			t.Fatalf("step %d: group %d holds %d envelopes for %d, OutboxMax %d", r.net.Now(), g, n, p, r.cfg.OutboxMax)
		}
	}
}

// quiet reports whether nothing is left to move: no frame in flight and no
// outbox holding an envelope.
func (r *lossyRun) quiet() bool {
	if r.net.Len() != 0 {
		return false
	}
	for _, c := range r.chans {
		for to := range c.links {
			if len(c.links[to].outbox) != 0 {
				return false
			}
		}
	}
	return true
}

func runLossyNetwork(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0))
	r := newLossyRun(t, rng)
	groups := len(r.chans)
	tickSteps := 1 + rng.IntN(5)
	const messages = 400
	const stepsMax = 100_000
	total, refused := 0, 0
	for ; r.net.Now() < stepsMax && (total < messages || !r.quiet()); r.net.Advance() {
		if total < messages && rng.IntN(2) == 0 {
			from := rng.IntN(groups)
			to := rng.IntN(groups - 1)
			if to >= from {
				to++
			}
			if r.chans[from].Busy() {
				refused++
			} else {
				r.sent[from][to]++
				total++
				r.chans[from].Send(partition.GroupID(to), lossyPayload(from, to, r.sent[from][to]))
				r.drain(from)
			}
		}
		if rng.IntN(200) == 0 {
			// Cut one direction of one link for a while.
			from, to := partition.GroupID(rng.IntN(groups)), partition.GroupID(rng.IntN(groups))
			r.net.Cut(from, to, r.net.Now()+rng.Int64N(100))
		}
		for _, p := range r.net.Due() {
			if err := r.chans[p.To].Receive(p.Msg); err != nil {
				t.Fatalf("step %d: Receive(%s): %v", r.net.Now(), p.Msg, err)
			}
			r.drain(int(p.To))
		}
		if r.net.Now()%int64(tickSteps) == 0 {
			for g := range r.chans {
				r.chans[g].Tick()
				r.drain(g)
			}
		}
	}
	if total < messages || !r.quiet() {
		t.Fatalf("not quiet after %d steps: %d of %d sent, %d frames in flight", r.net.Now(), total, messages, r.net.Len())
	}
	r.checkEnd()
	t.Logf("quiet after %d steps, ticks every %d; %d requests refused while busy; %+v", r.net.Now(), tickSteps, refused, r.stats())
}

// checkEnd checks a quiet run: every envelope handed up, no frame held back.
func (r *lossyRun) checkEnd() {
	for from := range r.chans {
		for to := range r.chans {
			if r.got[to][from] != r.sent[from][to] {
				r.t.Errorf("%d -> %d: handed up %d of %d envelopes", from, to, r.got[to][from], r.sent[from][to])
			}
		}
	}
	for g, c := range r.chans {
		for p := range c.links {
			if n := len(c.links[p].holdback); n != 0 {
				r.t.Errorf("group %d holds back %d frames from %d at the end", g, n, p)
			}
		}
	}
}

// stats sums the repairs every channel made.
func (r *lossyRun) stats() Stats {
	var st Stats
	for _, c := range r.chans {
		s := c.Stats()
		st.DataResent += s.DataResent
		st.HeldBack += s.HeldBack
		st.DuplicatesDropped += s.DuplicatesDropped
		st.NacksServed += s.NacksServed
	}
	return st
}
