package replication

import (
	"context"
	"flag"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexkv/flexkv/internal/crashfs"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

var (
	plPoints = flag.Int("powerloss.points", 40, "crash points of TestPowerLossGroups")
	plSeed   = flag.Uint64("powerloss.seed", 1, "seed of TestPowerLossGroups's crash points")
)

// TestPowerLossGroups crashes the disks of whole replicas (raft log, stable
// store, snapshots and the executor's store, one crashable disk each) at
// seeded syncs, while clients multicast across three groups of three: a
// leader, a follower, or a follower that fell behind its leader's
// compaction while the leader installs a snapshot on it. The crashed
// replica restarts on what its disk had synced and delivers every
// multicast acknowledged before the crash; at the end every replica
// delivered every acknowledged multicast and the delivery log passes the
// checker (DESIGN 5: nothing acknowledged is lost; DESIGN 12).
func TestPowerLossGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	const snapEvery = 64
	c := newTestClusterWith(t, protocol.Names()[0], 3, 3, clusterOpts{snapEvery: snapEvery, crashable: true})
	// The clients stop between multicasts, each acknowledged, so that the
	// checker knows every multicast a replica may deliver.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for cl := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(*plSeed, uint64(cl)))
			for !stop.Load() {
				var dst partition.GroupSet
				for range 1 + rng.IntN(3) {
					dst = dst.Add(partition.GroupID(rng.IntN(c.top.Len())))
				}
				if err := c.multicast(ctx, uint64(cl+1), dst); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	stopClients := sync.OnceFunc(func() {
		stop.Store(true)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("client: %v", err)
		}
	})
	defer stopClients()

	rng := rand.New(rand.NewPCG(*plSeed, 0x5eed))
	var kinds [5]int // leader, follower, install, half-written snapshot, whole group
	for range *plPoints {
		g := rng.IntN(len(c.reps))
		if rng.IntN(8) == 0 {
			c.groupPowerLoss(g, rng)
			kinds[4]++
			continue
		}
		c.powerLoss(g, rng, &kinds)
	}
	stopClients()
	c.settle(60 * time.Second)
	t.Logf("crash points: %d (leader %d, follower %d, follower behind while a snapshot is installed %d, of which %d with the snapshot half written; whole group at once %d); acknowledged multicasts %d, lost 0",
		kinds[0]+kinds[1]+kinds[2]+kinds[4], kinds[0], kinds[1], kinds[2], kinds[3], kinds[4], len(c.accepted))
}

// plLeaderWait is how long a group may take to elect a leader after a
// crash: a whole group restarts at once, and the race detector on two
// shared cores slows elections down.
const plLeaderWait = 60 * time.Second

// powerLoss crashes a replica of group g at a point rng chooses, restarts
// it on its disk's crash image and waits until it delivered what was
// acknowledged before the crash.
func (c *testCluster) powerLoss(g int, rng *rand.Rand, kinds *[5]int) {
	c.t.Helper()
	l := c.leaderWithin(g, plLeaderWait)
	i := l
	kind := rng.IntN(5)
	if kind > 0 {
		i = (l + 1 + rng.IntN(len(c.reps[g])-1)) % len(c.reps[g])
	}
	tr := c.reps[g][i]
	snapDir := filepath.Join(tr.cfg.Dir, "snapshots")
	var err error
	switch kind {
	case 0:
		kinds[0]++
		err = tr.disk.Arm(1 + rng.Uint64N(12))
	case 4:
		kinds[2]++
		c.fallBehind(g, i)
		// One of the syncs of the snapshot the leader installs: the state,
		// its meta, their directory, the rename.
		err = tr.disk.ArmUnder(1+rng.Uint64N(4), snapDir)
		tr.cut.SetCut(false)
	default:
		kinds[1]++
		err = tr.disk.Arm(1 + rng.Uint64N(12))
	}
	if err != nil {
		c.t.Fatal(err)
	}
	want := c.acknowledged(g)
	select {
	case <-tr.disk.Crashed():
	case <-time.After(2 * time.Second):
		tr.disk.CrashNow()
	}
	tr.cut.SetCut(true) // a machine without power answers nobody
	if strings.HasPrefix(tr.disk.CrashedAt(), snapDir) {
		kinds[3]++
	}
	image := tr.disk.Image()
	c.stop(g, i)
	tr.disk = crashfs.New(image)
	tr.cfg.FS = tr.disk
	c.start(g, i)
	c.waitDelivered(g, i, want, 30*time.Second)
}

// groupPowerLoss crashes every replica of group g at once, as a power
// loss of its whole site: at a sync of its leader chosen by rng, every
// disk of the group keeps only what it had synced. The group restarts and
// delivers every multicast acknowledged before the crash.
func (c *testCluster) groupPowerLoss(g int, rng *rand.Rand) {
	c.t.Helper()
	l := c.reps[g][c.leaderWithin(g, plLeaderWait)]
	if err := l.disk.Arm(1 + rng.Uint64N(12)); err != nil {
		c.t.Fatal(err)
	}
	want := c.acknowledged(g)
	select {
	case <-l.disk.Crashed():
	case <-time.After(2 * time.Second):
	}
	for _, tr := range c.reps[g] {
		tr.disk.CrashNow()
		tr.cut.SetCut(true)
	}
	for i, tr := range c.reps[g] {
		image := tr.disk.Image()
		c.stop(g, i)
		tr.disk = crashfs.New(image)
		tr.cfg.FS = tr.disk
	}
	for i := range c.reps[g] {
		c.start(g, i)
	}
	for i := range c.reps[g] {
		c.waitDelivered(g, i, want, 30*time.Second)
	}
}

// acknowledged returns the acknowledged multicasts addressed to group g.
func (c *testCluster) acknowledged(g int) []multicast.MsgID {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []multicast.MsgID
	for id, dst := range c.accepted {
		if dst.Has(partition.GroupID(g)) {
			ids = append(ids, id)
		}
	}
	return ids
}

// waitDelivered waits until replica i of group g delivered every multicast
// of ids.
func (c *testCluster) waitDelivered(g, i int, ids []multicast.MsgID, timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ds, err := c.reps[g][i].rec.Deliveries()
		if err != nil {
			c.t.Fatal(err)
		}
		got := make(map[multicast.MsgID]bool, len(ds))
		for _, d := range ds {
			got[d.ID] = true
		}
		missing := 0
		for _, id := range ids {
			if !got[id] {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("after %v, g%d r%d still lacks %d of the %d multicasts acknowledged before its crash", timeout, g, i+1, missing, len(ids))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fallBehind cuts follower i of group g off until its leader took a
// snapshot and compacted its log past the follower's last entry, so that
// the follower can only catch up by a snapshot.
func (c *testCluster) fallBehind(g, i int) {
	c.t.Helper()
	tr := c.reps[g][i]
	tr.cut.SetCut(true)
	last := tr.r.RaftStatus().LastIndex
	deadline := time.Now().Add(30 * time.Second)
	for {
		l := c.reps[g][c.leaderWithin(g, plLeaderWait)]
		st := l.r.RaftStatus()
		if st.AppliedIndex > last+3*c.snapEvery {
			if err := l.r.Snapshot(); err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("g%d's leader did not move %d entries past a cut-off follower (at %d)", g, 3*c.snapEvery, st.AppliedIndex)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
