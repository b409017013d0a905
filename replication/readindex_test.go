package replication

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/flexkv/flexkv/multicast/protocol"
)

// TestReadRoundsBatch: reads that arrive while a round runs all join the
// next one, and a round never takes a read that arrived after it started.
// The runner is the test's: it holds each round until the test lets it go.
func TestReadRoundsBatch(t *testing.T) {
	var q readRounds
	started := make(chan *readRound, 4)
	release := make(chan struct{})
	ended := make(chan struct{}, 4) // a runner returned: after() found no read waiting
	run := func(rd *readRound) {
		for rd != nil {
			started <- rd
			<-release
			close(rd.done)
			rd = q.after()
		}
		ended <- struct{}{}
	}
	first := q.join(0, run)
	if got := <-started; got != first {
		t.Fatal("the first read's round is not the one that started")
	}
	const waiting = 100
	var rounds [waiting]*readRound
	for i := range rounds {
		rounds[i] = q.join(0, run)
	}
	for i, rd := range rounds {
		if rd == first || rd != rounds[0] {
			t.Fatalf("read %d, arrived while a round ran, joined %p; want the next round %p, not the running one %p", i, rd, rounds[0], first)
		}
	}
	if rounds[0].reads != waiting || first.reads != 1 {
		t.Fatalf("rounds hold %d and %d reads, want 1 and %d", first.reads, rounds[0].reads, waiting)
	}
	release <- struct{}{} // the first round ends; the second starts
	<-first.done
	if got := <-started; got != rounds[0] {
		t.Fatal("the waiting round did not start after the first")
	}
	late := q.join(0, run) // arrives while the second runs: a third round
	if late == rounds[0] {
		t.Fatal("a read joined a round that had started")
	}
	release <- struct{}{}
	<-rounds[0].done
	<-started
	release <- struct{}{}
	<-late.done
	<-ended // the runner takes its next round after closing done: wait for it to see none
	if len(ended) != 0 {
		t.Fatal("more than one runner ran the rounds")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.running || q.next != nil {
		t.Fatalf("after the last round: running %v, next %v; want neither", q.running, q.next)
	}
}

// TestConcurrentReadsShareBarrier: at a leader of a 3-replica group, reads
// that wait while a barrier round runs are served by one more round, not
// one each. The round is held at its wait for the state (the test holds
// the state machine's lock) while the reads arrive, so that they are
// concurrent however the machine schedules them.
func TestConcurrentReadsShareBarrier(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := newTestClusterWith(t, protocol.FlexCast, 1, 3, clusterOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.load(ctx, 1, 1, 10); err != nil {
		t.Fatal(err)
	}
	leader := c.reps[0][c.leader(0)].r
	if err := leader.ReadBarrier(ctx); err != nil { // the term's entry is known committed
		t.Fatal(err)
	}
	before := leader.ReadStats()

	leader.fsm.mu.Lock()
	locked := true
	defer func() {
		if locked {
			leader.fsm.mu.Unlock()
		}
	}()
	const reads = 200
	errs := make(chan error, reads+1)
	go func() { errs <- leader.ReadBarrier(ctx) }()
	waitFor(t, "the first round to start", func() bool { return leader.ReadStats().Rounds == before.Rounds+1 })
	var wg sync.WaitGroup
	for range reads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- leader.ReadBarrier(ctx)
		}()
	}
	waitFor(t, "the reads to join the next round", func() bool {
		leader.reads.mu.Lock()
		defer leader.reads.mu.Unlock()
		return leader.reads.next != nil && leader.reads.next.reads == reads
	})
	leader.fsm.mu.Unlock()
	locked = false
	wg.Wait()
	for range reads + 1 {
		if err := <-errs; err != nil {
			t.Fatalf("read barrier: %v", err)
		}
	}
	after := leader.ReadStats()
	if rounds, served := after.Rounds-before.Rounds, after.Reads-before.Reads; rounds != 2 || served != reads+1 {
		t.Fatalf("%d concurrent reads behind a running one took %d rounds serving %d reads, want 2 rounds serving %d", reads, rounds, served, reads+1)
	}
}

// TestDeposedLeaderRefusesReads: a leader cut off from its followers keeps
// believing it leads until its lease lapses (half the election timeout:
// 1.5 s here), while barriers give up after ApplyTimeout (300 ms here).
// Barriers begun after the cut all fail (TestReadBarrier): reads that
// arrive while it still believes it leads, concurrent or not, and reads
// after the others elected a new leader: not one is answered from its
// state, which can no longer hear from a majority.
func TestDeposedLeaderRefusesReads(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := newTestClusterWith(t, protocol.FlexCast, 1, 3, clusterOpts{cuttable: true})
	c.leader(0)
	for i := range 3 {
		c.stop(0, i)
		c.reps[0][i].cfg.ElectionTimeout = 3 * time.Second
		c.reps[0][i].cfg.ApplyTimeout = 300 * time.Millisecond
	}
	for i := range 3 {
		c.start(0, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := c.leader(0)
	old := c.reps[0][l].r
	if err := old.ReadBarrier(ctx); err != nil {
		t.Fatal(err)
	}
	c.reps[0][l].cut.SetCut(true)
	defer c.reps[0][l].cut.SetCut(false)
	if err := old.ReadBarrier(ctx); err == nil {
		t.Fatal("a leader cut off from its group passed a read barrier begun after the cut")
	}
	refused := func(when string) {
		t.Helper()
		const reads = 50
		errs := make(chan error, reads)
		for range reads {
			go func() { errs <- old.ReadBarrier(ctx) }()
		}
		for range reads {
			err := <-errs
			var nl *NotLeaderError
			if err == nil || !(errors.As(err, &nl) || errors.Is(err, ErrReadTimeout)) {
				t.Fatalf("read barrier at a leader cut off from its group, %s: %v, want NotLeader or ErrReadTimeout", when, err)
			}
		}
	}
	// A machine that stalls for a second can let the lease lapse already:
	// the reads below must fail all the same, but then say less.
	believes := old.IsLeader()
	refused("while it believes it leads")
	if !believes || !old.IsLeader() {
		t.Logf("the cut leader stepped down before the reads ended (a stalled machine): they met a follower, not a deposed leader")
	}
	waitFor(t, "a new leader among the others", func() bool {
		for i, rep := range c.reps[0] {
			if i != l && rep.r.IsLeader() {
				return true
			}
		}
		return false
	})
	refused("with a new leader elected")
}

// TestReadBarrierRefusesStaleAnswers: a read barrier does not pass on
// answers to calls the leader made before it began, although hashicorp/raft's
// VerifyLeader may count them (design 6.5). The leader's answers are held
// (answerHold): the followers get and process every call at once, but the
// answers reach raft only when the test releases them. A round starts while
// each follower has a held answer, to a call made before the round; the test
// releases those, and not the answers to any later call. Raft's verification
// may pass on them (the round counts it in ReadStats.Early: the test tries
// until that happened once); the barrier must not, and fails at
// ApplyTimeout. Once the answers flow again, barriers pass.
func TestReadBarrierRefusesStaleAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := newTestClusterWith(t, protocol.FlexCast, 1, 3, clusterOpts{})
	c.leader(0)
	holds := make([]*answerHold, 3)
	for i := range 3 {
		c.stop(0, i)
		// A lease (half the election timeout) far longer than a held round.
		c.reps[0][i].cfg.ElectionTimeout = 3 * time.Second
		c.reps[0][i].cfg.ApplyTimeout = 300 * time.Millisecond
		h := newAnswerHold()
		holds[i] = h
		c.reps[0][i].cfg.wrapRaft = func(tr raft.Transport) raft.Transport {
			h.Transport = tr
			return h
		}
		defer h.releaseAll() // before the cluster stops: raft waits for its calls
	}
	for i := range 3 {
		c.start(0, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := c.leader(0)
	leader, h := c.reps[0][l].r, holds[l]
	if err := leader.ReadBarrier(ctx); err != nil {
		t.Fatal(err)
	}
	for attempt := 1; leader.ReadStats().Early == 0; attempt++ {
		if attempt > 10 {
			t.Fatalf("raft's VerifyLeader never passed on held answers in %d rounds: the test did not make the case it tests", attempt-1)
		}
		stale := h.hold()
		waitFor(t, "a held answer from each follower", func() bool { return h.heldFrom() == 2 })
		h.hold() // the calls made from now on: held until the end
		errs := make(chan error, 1)
		go func() { errs <- leader.ReadBarrier(ctx) }()
		waitFor(t, "the round to wait for answers", leader.progress.waiting)
		h.release(stale)
		if err := <-errs; !errors.Is(err, ErrReadTimeout) {
			t.Fatalf("attempt %d: a read barrier begun while every answer was held, with only the answers to calls made before it released: %v, want ErrReadTimeout", attempt, err)
		}
		h.releaseAll()
		if err := leader.ReadBarrier(ctx); err != nil {
			t.Fatalf("attempt %d: a read barrier once the answers flow again: %v", attempt, err)
		}
	}
}

// answerHold is a raft transport that holds the answers to AppendEntries
// calls: the follower gets and processes a call at once, and raft gets its
// answer once the hold's generation at the call is released.
type answerHold struct {
	raft.Transport
	mu       sync.Mutex
	cond     *sync.Cond
	gen      uint64 // generation of the calls made now
	released uint64 // answers of generations up to it are returned
	held     map[raft.ServerID]int
}

func newAnswerHold() *answerHold {
	h := &answerHold{held: map[raft.ServerID]int{}}
	h.cond = sync.NewCond(&h.mu)
	return h
}

func (h *answerHold) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	h.mu.Lock()
	gen := h.gen
	h.mu.Unlock()
	err := h.Transport.AppendEntries(id, target, args, resp)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held[id]++
	for gen > h.released {
		h.cond.Wait()
	}
	h.held[id]--
	return err
}

func (h *answerHold) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return preVoteThrough(h.Transport, id, target, args, resp)
}

func (h *answerHold) Close() error { return closeTransport(h.Transport) }

// hold starts a generation, whose calls' answers are held, and returns it.
func (h *answerHold) hold() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gen++
	return h.gen
}

// heldFrom returns how many followers have an answer held.
func (h *answerHold) heldFrom() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.held { //flexkv:unordered a count
		if c > 0 {
			n++
		}
	}
	return n
}

// release returns the held answers of generations up to gen.
func (h *answerHold) release(gen uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.released = max(h.released, gen)
	h.cond.Broadcast()
}

// releaseAll returns every answer held and ends holding.
func (h *answerHold) releaseAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.released = h.gen
	h.cond.Broadcast()
}

// waiting reports whether a confirmation of a term is awaited.
func (p *peerProgress) waiting() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waits) > 0
}

// waitFor waits until cond holds, failing t after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}
