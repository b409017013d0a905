package replication

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
)

func TestMain(m *testing.M) {
	// A child process of TestMultiProcess runs one replica, no tests.
	if spec := os.Getenv(replicaEnv); spec != "" {
		os.Exit(replicaMain(spec))
	}
	goleak.VerifyTestMain(m, append(testcluster.RaftFutureLeaks(),
		// Pebble's and raft's package-level background workers.
		goleak.IgnoreTopFunction("github.com/cockroachdb/pebble/v2/internal/cache.(*shard).releaseLoop"),
		goleak.IgnoreAnyFunction("github.com/hashicorp/raft.(*NetworkTransport).listen"),
	)...)
}

// TestProtocols runs each protocol on 3 groups x 3 replicas: local and
// global multicasts from several clients, every replica of every group
// delivering the same sequence, checked as one delivery log.
func TestProtocols(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	for _, p := range protocol.Names() {
		t.Run(string(p), func(t *testing.T) {
			c := newTestCluster(t, p, 3, 3, 0)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := c.load(ctx, 1, 4, 200); err != nil {
				t.Fatal(err)
			}
			c.settle(20 * time.Second)
		})
	}
}

// TestLeaderKill stops the leader of each group in turn while clients keep
// multicasting, and restarts it from its data directory.
func TestLeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	for _, p := range protocol.Names() {
		t.Run(string(p), func(t *testing.T) {
			c := newTestCluster(t, p, 3, 3, 0)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- c.load(ctx, 2, 4, 400) }()
			for g := range c.reps {
				time.Sleep(300 * time.Millisecond)
				l := c.leader(g)
				c.stop(g, l)
				c.leader(g) // a new leader takes over
				time.Sleep(200 * time.Millisecond)
				c.start(g, l)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			c.settle(30 * time.Second)
		})
	}
}

// TestFollowerWipe stops a follower, lets the group move on past a raft
// snapshot, wipes the follower's data and restarts it empty: it must
// recover the protocol state and the deliveries from a snapshot.
func TestFollowerWipe(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	for _, p := range protocol.Names() {
		t.Run(string(p), func(t *testing.T) { testFollowerWipe(t, p) })
	}
}

func testFollowerWipe(t *testing.T, p multicast.Protocol) {
	c := newTestCluster(t, p, 3, 3, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.load(ctx, 3, 4, 100); err != nil {
		t.Fatal(err)
	}
	l := c.leader(1)
	f := (l + 1) % 3
	c.stop(1, f)
	// Restarting from a directory: nothing applied twice, nothing lost.
	c.start(1, f)
	c.stop(1, f)
	if err := c.load(ctx, 4, 4, 300); err != nil {
		t.Fatal(err)
	}
	// Snapshot the live replicas so that the log the follower misses is
	// compacted away (raft would on its own timer, SnapshotInterval).
	for i, tr := range c.reps[1] {
		if i != f {
			if err := tr.r.raft.Snapshot().Error(); err != nil {
				t.Fatalf("snapshot of g1 r%d: %v", i+1, err)
			}
		}
	}
	if err := os.RemoveAll(c.reps[1][f].cfg.Dir); err != nil {
		t.Fatal(err)
	}
	c.reps[1][f].cfg.Bootstrap = false // it joins the group's existing configuration
	c.start(1, f)
	if err := c.load(ctx, 5, 4, 100); err != nil {
		t.Fatal(err)
	}
	c.settle(30 * time.Second)
	// The log it missed was compacted away: it caught up from a snapshot.
	if got := c.reps[1][f].r.raft.Stats()["last_snapshot_index"]; got == "0" || got == "" {
		t.Fatalf("wiped follower: last snapshot index %q, want one installed from the leader", got)
	}
	// The clients' sessions came with the snapshot: the follower holds
	// the sessions its group opened (the clients of the loads above).
	sessions := func(r *Replica) (n int) {
		r.State(func(st *group.State) { n = st.Sessions() })
		return n
	}
	if got, want := sessions(c.reps[1][f].r), sessions(c.reps[1][c.leader(1)].r); got != want || want == 0 {
		t.Fatalf("wiped follower holds %d sessions, its leader %d: want the same, and some", got, want)
	}
}

// TestReadBarrier: at the leader, a read barrier returns with the state
// holding every entry committed before it; a follower refuses with the
// leader's address; a leader cut off from its group cannot confirm its
// leadership and fails instead of serving a stale read.
func TestReadBarrier(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := newTestClusterWith(t, protocol.FlexCast, 1, 3, clusterOpts{cuttable: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.load(ctx, 1, 2, 50); err != nil {
		t.Fatal(err)
	}
	l := c.leader(0)
	leader := c.reps[0][l].r
	commit := leader.raft.CommitIndex()
	if err := leader.ReadBarrier(ctx); err != nil {
		t.Fatalf("barrier at the leader: %v", err)
	}
	var applied uint64
	leader.State(func(s *group.State) { applied = s.Applied() })
	if applied < commit {
		t.Errorf("after the barrier the state is at %d, below the commit index %d seen before it", applied, commit)
	}
	f := c.reps[0][(l+1)%3].r
	var nl *NotLeaderError
	if err := f.ReadBarrier(ctx); !errors.As(err, &nl) || nl.Leader != c.reps[0][l].cfg.Members[l].GRPCAddr {
		t.Errorf("barrier at a follower: %v, want NotLeader naming %s", err, c.reps[0][l].cfg.Members[l].GRPCAddr)
	}
	// Cut off, the leader must pass no barrier: each begins after the cut,
	// and counts only answers to calls made after it began, which no
	// follower gets (raft's VerifyLeader alone may pass on an answer to a
	// call made before the cut: TestReadBarrierRefusesStaleAnswers).
	c.reps[0][l].cut.SetCut(true)
	defer c.reps[0][l].cut.SetCut(false)
	cutCtx, cutCancel := context.WithTimeout(ctx, 5*time.Second)
	defer cutCancel()
	passed := 0
	for leader.ReadBarrier(cutCtx) == nil {
		passed++
		if cutCtx.Err() != nil {
			t.Fatalf("a leader cut off from its group passed %d read barriers in 5s", passed)
		}
	}
	if passed != 0 {
		t.Errorf("a leader cut off from its group passed %d read barriers begun after the cut before failing one", passed)
	}
}

// TestReadBarrierAfterNoop: after a restart the leader's commit index is
// its no-op entry, which the state machine never sees; with no command
// after it (ticks slowed to one an hour), a read barrier must still return.
func TestReadBarrierAfterNoop(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := newTestClusterWith(t, protocol.FlexCast, 1, 1, clusterOpts{})
	c.leader(0)
	c.stop(0, 0)
	c.reps[0][0].cfg.TickInterval = time.Hour
	c.start(0, 0)
	c.leader(0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 3 {
		if err := c.reps[0][0].r.ReadBarrier(ctx); err != nil {
			t.Fatalf("read barrier at an idle leader: %v", err)
		}
	}
}

// TestReadBarrierTimesOut: a barrier that cannot complete within
// ApplyTimeout (here a nanosecond: no heartbeat round is that fast) returns
// ErrReadTimeout while the caller's context still runs, so that the
// caller's client moves to another replica instead of waiting out its
// deadline on this one.
func TestReadBarrierTimesOut(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := newTestClusterWith(t, protocol.FlexCast, 1, 3, clusterOpts{})
	c.leader(0)
	for i := range 3 {
		c.stop(0, i)
		c.reps[0][i].cfg.ApplyTimeout = time.Nanosecond
	}
	for i := range 3 {
		c.start(0, i)
	}
	leader := c.reps[0][c.leader(0)].r
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 3 {
		if err := leader.ReadBarrier(ctx); !errors.Is(err, ErrReadTimeout) {
			t.Fatalf("read barrier: %v, want ErrReadTimeout", err)
		}
	}
	if ctx.Err() != nil {
		t.Fatalf("the barriers waited out the caller's context")
	}
}

// TestIdleGroupsStopTicking: once traffic stops and every channel has
// settled, every group comes to stop proposing ticks (its raft log stops
// growing): under FlexCast once the garbage-collection rounds have dropped
// every history entry, which they must do, since every entry is stable
// once everything is delivered; a new multicast wakes the groups and is
// delivered.
func TestIdleGroupsStopTicking(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	for _, p := range []multicast.Protocol{protocol.FlexCast, protocol.Skeen} {
		t.Run(string(p), func(t *testing.T) {
			c := newTestCluster(t, p, 3, 3, 0)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := c.load(ctx, 1, 2, 50); err != nil {
				t.Fatal(err)
			}
			c.settle(20 * time.Second)
			last := func(g int) uint64 { return c.reps[g][c.leader(g)].r.raft.LastIndex() }
			// Every group must come to a stop: its log then holds still
			// for 25 tick intervals (500ms), which a ticking group's never
			// does. A group that never stops fails at the deadline.
			deadline := time.Now().Add(10 * time.Second)
			for g := range 3 {
				for {
					before := last(g)
					time.Sleep(500 * time.Millisecond)
					if last(g) == before {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("idle group %d still appends entries after 10s", g)
					}
				}
			}
			if err := c.load(ctx, 2, 2, 20); err != nil {
				t.Fatal(err)
			}
			c.settle(20 * time.Second)
		})
	}
}
