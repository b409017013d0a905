package transport

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/flexkv/flexkv/partition"
)

// Timing in these tests: the emulated delay is a lower bound, asserted
// exactly; upper bounds only tell a delay line from a serialized link, with
// a margin a loaded machine cannot use up.

// arrivals records when each frame reached g's leader.
type arrivals struct {
	mu sync.Mutex
	at map[uint64]time.Time
}

func recordArrivals(g *fakeGroup) *arrivals {
	a := &arrivals{at: make(map[uint64]time.Time)}
	g.afterAccept = func(g *fakeGroup) {
		now := time.Now()
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, f := range g.log {
			if _, ok := a.at[f.Seq]; !ok {
				a.at[f.Seq] = now
			}
		}
	}
	return a
}

func (a *arrivals) get(seq uint64) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.at[seq]
}

// checkDelayed fails the test for each frame that arrived less than d after
// the time its Send started.
func checkDelayed(t *testing.T, a *arrivals, sent map[uint64]time.Time, d time.Duration) {
	t.Helper()
	for seq, s := range sent {
		if got := a.get(seq).Sub(s); got < d {
			t.Errorf("frame %d arrived %v after Send, want at least %v", seq, got, d)
		}
	}
}

func delayedConfig(addrs []string, d time.Duration) TransmitterConfig {
	cfg := transmitterConfig(addrs)
	cfg.Delays = map[partition.GroupID]time.Duration{testTo: d}
	return cfg
}

func TestTransmitterDelaysFrames(t *testing.T) {
	g := newFakeGroup(t, 1, 0, serverConfig())
	a := recordArrivals(g)
	const d = 60 * time.Millisecond
	tr := newTransmitter(t, delayedConfig(g.addrs, d))
	sent := make(map[uint64]time.Time)
	const sends, per = 6, 4
	for i := range sends {
		first := uint64(1 + i*per)
		now := time.Now()
		for s := first; s < first+per; s++ {
			sent[s] = now
		}
		sendAll(t, tr, dataFrames(first, per), per)
		time.Sleep(10 * time.Millisecond) // spread the sends over several delays' worth of batches
	}
	waitFor(t, "every frame at the leader", func() bool { return g.logLen() >= sends*per })
	checkSeqs(t, g.seqs(), seqRange(1, sends*per))
	checkDelayed(t, a, sent, d)
}

func TestTransmitterDelayPipelines(t *testing.T) {
	// n batches sent at once over a link of delay d arrive about d later,
	// not n*d: the link carries them all in flight. A delay of a second
	// makes n*d 40s, and leaves the check half of it (20s): a stall of a
	// loaded machine running -race does not use that up, a serialized link
	// does.
	g := newFakeGroup(t, 1, 0, serverConfig())
	a := recordArrivals(g)
	const (
		d = time.Second
		n = 40
	)
	cfg := delayedConfig(g.addrs, d)
	cfg.BatchFrames = 1 // one call per frame
	tr := newTransmitter(t, cfg)
	sent := make(map[uint64]time.Time)
	start := time.Now()
	for s := uint64(1); s <= n; s++ {
		sent[s] = time.Now()
		sendAll(t, tr, dataFrames(s, 1), 1)
	}
	waitFor(t, "every frame at the leader", func() bool { return g.logLen() >= n })
	checkSeqs(t, g.seqs(), seqRange(1, n))
	checkDelayed(t, a, sent, d)
	if got, limit := a.get(n).Sub(start), n*d/2; got >= limit {
		t.Errorf("%d batches over a link of delay %v took %v, want well under %v: the link is serialized", n, d, got, limit)
	}
	waitSent(t, tr, n)
	if s := tr.Stats(); s.Batches != n {
		t.Errorf("%d batches, want %d (one frame each)", s.Batches, n)
	}
}

func TestTransmitterDelayRetryCostsRoundTrip(t *testing.T) {
	// Replica 1 leads; the first call goes to replica 0, whose NotLeader
	// answer comes back, emulated, a delay later, and the retry takes a
	// delay more to reach replica 1.
	g := newFakeGroup(t, 2, 1, serverConfig())
	a := recordArrivals(g)
	const d = 50 * time.Millisecond
	tr := newTransmitter(t, delayedConfig(g.addrs, d))
	sent := map[uint64]time.Time{1: time.Now()}
	sendAll(t, tr, dataFrames(1, 1), 1)
	waitFor(t, "the frame at the leader", func() bool { return g.logLen() >= 1 })
	checkDelayed(t, a, sent, 3*d)
	waitSent(t, tr, 1)
	if s := tr.Stats(); s.Redirects != 1 {
		t.Errorf("stats %+v, want 1 redirect", s)
	}
}

func TestTransmitterDelayJitterKeepsOrder(t *testing.T) {
	g := newFakeGroup(t, 1, 0, serverConfig())
	a := recordArrivals(g)
	const d = 30 * time.Millisecond
	cfg := delayedConfig(g.addrs, d)
	cfg.Jitter = 0.5
	tr := newTransmitter(t, cfg)
	sent := make(map[uint64]time.Time)
	const n = 60
	for s := uint64(1); s <= n; s++ {
		sent[s] = time.Now()
		sendAll(t, tr, dataFrames(s, 1), 1)
		if s%4 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	waitFor(t, "every frame at the leader", func() bool { return g.logLen() >= n })
	checkSeqs(t, g.seqs(), seqRange(1, n))
	checkDelayed(t, a, sent, d/2)
}

func TestPeerJitterSpread(t *testing.T) {
	// The draws cover [d(1-j), d(1+j)], and due times never go back.
	const d = 100 * time.Millisecond
	cfg := transmitterConfig([]string{"127.0.0.1:1"})
	cfg.QueueFrames = 1000
	cfg.Jitter = 0.4
	p := &peer{
		cfg: &cfg, group: testTo, queue: make([][]byte, cfg.QueueFrames), wake: make(chan struct{}, 1),
		delay: d, epoch: time.Now(), due: make([]time.Duration, cfg.QueueFrames),
		jitter: rand.New(rand.NewPCG(uint64(cfg.Self), uint64(testTo))),
	}
	lo, hi := time.Duration(float64(d)*(1-cfg.Jitter)), time.Duration(float64(d)*(1+cfg.Jitter))
	minDrawn, maxDrawn := hi, lo
	for range 1000 {
		j := p.jittered()
		if j < lo || j > hi {
			t.Fatalf("delay %v drawn, want within [%v, %v]", j, lo, hi)
		}
		minDrawn, maxDrawn = min(minDrawn, j), max(maxDrawn, j)
	}
	if spread := hi - lo; minDrawn > lo+spread/10 || maxDrawn < hi-spread/10 {
		t.Errorf("1000 delays drawn within [%v, %v], want them to cover [%v, %v]", minDrawn, maxDrawn, lo, hi)
	}
	for i := range cfg.QueueFrames {
		before := time.Since(p.epoch)
		p.enqueue([][]byte{{byte(i)}}, 0)
		due := p.due[i]
		if due < before+lo {
			t.Fatalf("frame %d due %v after it was queued, want at least %v", i, due-before, lo)
		}
		if i > 0 && due < p.due[i-1] {
			t.Fatalf("frame %d due at %v, before frame %d at %v", i, due, i-1, p.due[i-1])
		}
	}
}

func TestTransmitterDelayQueueHoldsInFlight(t *testing.T) {
	// Frames waiting out their delay count against the queue: it is the
	// emulated link's window. Close abandons them without waiting.
	g := newFakeGroup(t, 1, 0, serverConfig())
	cfg := delayedConfig(g.addrs, time.Hour)
	cfg.QueueFrames = 8
	tr, err := NewTransmitter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sendAll(t, tr, dataFrames(1, 12), 3)
	if got := tr.Stats().Drops; got != 4 {
		t.Errorf("drops %d, want 4", got)
	}
	closeSoon(t, tr, "close waited for the emulated delay")
	if got := g.logLen(); got != 0 {
		t.Errorf("%d frames arrived before an hour's delay", got)
	}
}
