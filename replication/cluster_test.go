package replication

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/internal/crashfs"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/multicast/check"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

// testCluster runs groups of replicas in this process on loopback: real raft
// TCP transports, real gRPC between groups, Pebble stores in a temporary
// directory.
type testCluster struct {
	t     testing.TB
	proto multicast.Protocol
	top   *partition.Topology
	dir   string
	reps  [][]*testReplica // [group][replica]
	peers map[partition.GroupID][]string

	mu        sync.Mutex
	accepted  map[multicast.MsgID]partition.GroupSet // acknowledged multicasts
	nextSeq   uint64
	sessions  map[[2]uint64]uint64 // [client, group]: the client's session there
	snapEvery uint64

	retries    atomic.Int64 // client attempts that did not succeed
	notLeaders atomic.Int64 // of which: answered NotLeader
	// leaderGuess[g]: the replica of group g that clients try first, as a
	// client library caches the leader it last found.
	leaderGuess [8]atomic.Int32
}

type testReplica struct {
	cfg Config
	// live is the running replica, read by client goroutines while the
	// test stops and restarts it; r and rec belong to the test goroutine.
	live atomic.Pointer[Replica]
	r    *Replica
	rec  *Recorder
	peer *peerServer
	cut  *CutSwitch // with cuttable raft links
	// cuttable: start gives it a CutSwitch
	cuttable bool
	// disk, with clusterOpts.crashable: the replica's raft log, stable
	// store, snapshots and recorder, on a disk that can lose power
	// (cfg.FS is disk).
	disk *crashfs.FS
}

// freeAddr returns a loopback address for a replica (testaddr.Replication).
func freeAddr(t testing.TB) string { return testaddr.Free(t, testaddr.Replication) }

func newTestCluster(t testing.TB, proto multicast.Protocol, groups, replicas int, snapEvery uint64) *testCluster {
	t.Helper()
	return newTestClusterWith(t, proto, groups, replicas, clusterOpts{snapEvery: snapEvery})
}

// clusterOpts are the options of a test cluster.
type clusterOpts struct {
	snapEvery uint64                                                   // raft snapshot threshold (0: default)
	filter    func(partition.GroupID, []channel.Frame) []channel.Frame // on the frames between groups
	cuttable  bool                                                     // raft stream layers a test can cut
	durable   bool                                                     // fsync the raft logs
	crashable bool                                                     // every replica on a crashable disk (crashfs; durable, cuttable)
}

func newTestClusterWith(t testing.TB, proto multicast.Protocol, groups, replicas int, o clusterOpts) *testCluster {
	t.Helper()
	snapEvery := o.snapEvery
	spec := partition.Spec{Parent: map[string]string{}}
	for g := range groups {
		name := fmt.Sprintf("g%d", g)
		spec.Groups = append(spec.Groups, partition.Group{Name: name})
		if g > 0 {
			spec.Parent[name] = "g0"
		}
	}
	top, err := partition.NewTopology(spec)
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t, proto: proto, top: top, dir: t.TempDir(), peers: map[partition.GroupID][]string{},
		accepted: map[multicast.MsgID]partition.GroupSet{}, snapEvery: snapEvery}
	members := make([][]Member, groups)
	for g := range groups {
		for i := range replicas {
			// Ids unique in the cluster, as a configuration has them.
			m := Member{ID: fmt.Sprintf("g%d-r%d", g, i+1), RaftAddr: freeAddr(t), GRPCAddr: freeAddr(t)}
			m.PeerAddr = m.GRPCAddr // the tests serve the peer service beside the client API
			members[g] = append(members[g], m)
			c.peers[partition.GroupID(g)] = append(c.peers[partition.GroupID(g)], m.GRPCAddr)
		}
	}
	c.reps = make([][]*testReplica, groups)
	for g := range groups {
		for i := range replicas {
			peers := map[partition.GroupID][]string{}
			for h, addrs := range c.peers {
				if h != partition.GroupID(g) {
					peers[h] = addrs
				}
			}
			tr := &testReplica{cfg: Config{
				State:             group.Config{Protocol: proto, Topology: top, Self: partition.GroupID(g)},
				ID:                members[g][i].ID,
				Members:           members[g],
				Peers:             peers,
				Dir:               filepath.Join(c.dir, fmt.Sprintf("g%d-r%d", g, i+1)),
				Bootstrap:         true,
				SnapshotThreshold: snapEvery,
				TrailingLogs:      snapEvery,
				NoSync:            !o.durable && !o.crashable,
				FrameFilter:       o.filter,
			}}
			tr.cuttable = o.cuttable || o.crashable
			if o.crashable {
				tr.disk = crashfs.New(vfs.NewCrashableMem())
				tr.cfg.FS = tr.disk
			}
			c.reps[g] = append(c.reps[g], tr)
			c.start(g, i)
		}
	}
	t.Cleanup(c.stopAll)
	return c
}

func (c *testCluster) start(g, i int) {
	c.t.Helper()
	tr := c.reps[g][i]
	rec, err := openRecorderOn(tr.cfg.FS, filepath.Join(tr.cfg.Dir, "recorder"))
	if err != nil {
		c.t.Fatal(err)
	}
	cfg := tr.cfg
	cfg.Executor = rec
	if tr.cuttable {
		tr.cut = new(CutSwitch)
		cfg.RaftCut = tr.cut
	}
	r, err := Open(cfg)
	if err != nil {
		rec.Close()
		c.t.Fatalf("open g%d r%d: %v", g, i+1, err)
	}
	peer, err := servePeer(r, cfg.Members[i].GRPCAddr)
	if err != nil {
		r.Close()
		rec.Close()
		c.t.Fatalf("serve g%d r%d: %v", g, i+1, err)
	}
	tr.r, tr.rec, tr.peer = r, rec, peer
	tr.live.Store(r)
}

func (c *testCluster) stop(g, i int) {
	c.t.Helper()
	tr := c.reps[g][i]
	if tr.r == nil {
		return
	}
	if tr.disk != nil {
		tr.disk.Release() // a crashed disk holds the syncs raft waits for
	}
	tr.live.Store(nil)
	tr.peer.stop()
	if err := tr.r.Close(); err != nil {
		c.t.Errorf("close g%d r%d: %v", g, i+1, err)
	}
	if err := tr.rec.Close(); err != nil {
		c.t.Errorf("close recorder g%d r%d: %v", g, i+1, err)
	}
	tr.r, tr.rec, tr.peer = nil, nil, nil
}

func (c *testCluster) stopAll() {
	for g := range c.reps {
		for i := range c.reps[g] {
			c.stop(g, i)
		}
	}
}

// leader returns the index of group g's leader, waiting for one.
func (c *testCluster) leader(g int) int {
	c.t.Helper()
	return c.leaderWithin(g, 10*time.Second)
}

// leaderWithin returns the index of group g's leader, waiting up to d.
func (c *testCluster) leaderWithin(g int, d time.Duration) int {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for i, tr := range c.reps[g] {
			if r := tr.live.Load(); r != nil && r.IsLeader() {
				return i
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("group %d has no leader after %v", g, d)
	return -1
}

// multicast sends m to its entry group, under the client's session there
// (opened at its first request), following leader hints and retrying until
// the group accepts it or the deadline passes. A retry that finds the
// request applied already counts as accepted.
func (c *testCluster) multicast(ctx context.Context, client uint64, dst partition.GroupSet) error {
	p, err := protocol.Lookup(c.proto)
	if err != nil {
		return err
	}
	entry := p.Entry(c.top, nil, protocol.HomeOrigin(dst.Min()), dst)
	sid, err := c.session(ctx, client, entry)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.nextSeq++
	m := multicast.Message{ID: multicast.MsgID{Client: sid, Seq: c.nextSeq}, Dst: dst, Payload: []byte("x")}
	c.mu.Unlock()
	err = c.atEntry(ctx, int(entry), m.ID.String(), func(r *Replica) error {
		err := r.Multicast(ctx, m, 0)
		if errors.Is(err, group.ErrDuplicate) {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.accepted[m.ID] = dst
	c.mu.Unlock()
	return nil
}

// session returns client's session at group g, opening it the first time.
func (c *testCluster) session(ctx context.Context, client uint64, g partition.GroupID) (uint64, error) {
	key := [2]uint64{client, uint64(g)}
	c.mu.Lock()
	sid, ok := c.sessions[key]
	c.mu.Unlock()
	if ok {
		return sid, nil
	}
	err := c.atEntry(ctx, int(g), fmt.Sprintf("session of client %d", client), func(r *Replica) error {
		var err error
		sid, err = r.OpenSession(ctx)
		return err
	})
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	if c.sessions == nil {
		c.sessions = map[[2]uint64]uint64{}
	}
	c.sessions[key] = sid
	c.mu.Unlock()
	return sid, nil
}

// atEntry runs call at the leader of group entry, following leader hints
// and retrying until it succeeds or the deadline passes.
func (c *testCluster) atEntry(ctx context.Context, entry int, what string, call func(r *Replica) error) error {
	try := int(c.leaderGuess[entry].Load())
	for {
		tr := c.reps[entry][try%len(c.reps[entry])]
		var err error
		if r := tr.live.Load(); r == nil {
			err = errors.New("down")
		} else {
			err = call(r)
		}
		if err == nil {
			c.leaderGuess[entry].Store(int32(try % len(c.reps[entry])))
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w (last: %w)", what, ctx.Err(), err)
		}
		c.retries.Add(1)
		var nl *NotLeaderError
		if errors.As(err, &nl) {
			c.notLeaders.Add(1)
		}
		if errors.As(err, &nl) && nl.Leader != "" {
			// Follow the hint at once, to the replica whose own address it
			// names (members come and go: a replica's index in the group
			// is not its index in a configuration's member list).
			found := false
			for i, x := range c.reps[entry] {
				for _, m := range x.cfg.Members {
					if m.ID == x.cfg.ID && m.GRPCAddr == nl.Leader {
						try, found = i, true
					}
				}
			}
			if found {
				continue
			}
		}
		try++
		if !errors.As(err, &nl) && !errors.Is(err, multicast.ErrBusy) && err.Error() != "down" && !strings.Contains(err.Error(), "shutdown") {
			c.t.Logf("%s at g%d: %v", what, entry, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// load sends n multicasts from k concurrent clients to random destination
// sets of 1..3 groups.
func (c *testCluster) load(ctx context.Context, seed uint64, clients, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(cl)))
			for range n / clients {
				var dst partition.GroupSet
				for range 1 + rng.IntN(3) {
					dst = dst.Add(partition.GroupID(rng.IntN(c.top.Len())))
				}
				if err := c.multicast(ctx, uint64(cl+1), dst); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// settle waits until every replica delivered every acknowledged multicast
// addressed to its group, then checks the whole execution.
func (c *testCluster) settle(timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		missing := c.missing()
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("after %v: %s", timeout, missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.check()
}

func (c *testCluster) missing() string {
	c.mu.Lock()
	want := make(map[multicast.MsgID]partition.GroupSet, len(c.accepted))
	for id, dst := range c.accepted {
		want[id] = dst
	}
	c.mu.Unlock()
	for g := range c.reps {
		for i, tr := range c.reps[g] {
			if tr.rec == nil {
				return fmt.Sprintf("g%d r%d is down", g, i+1)
			}
			ds, err := tr.rec.Deliveries()
			if err != nil {
				c.t.Fatal(err)
			}
			got := make(map[multicast.MsgID]bool, len(ds))
			for _, d := range ds {
				got[d.ID] = true
			}
			for id, dst := range want {
				if dst.Has(partition.GroupID(g)) && !got[id] {
					return fmt.Sprintf("g%d r%d has not delivered %s (%d deliveries)", g, i+1, id, len(ds))
				}
			}
		}
	}
	return ""
}

// check writes every replica's deliveries and the acknowledged multicasts as
// a delivery log, and checks it.
func (c *testCluster) check() {
	c.t.Helper()
	path := filepath.Join(c.dir, "delivery.jsonl")
	f, err := os.Create(path)
	if err != nil {
		c.t.Fatal(err)
	}
	w := check.NewWriter(f)
	c.mu.Lock()
	for id, dst := range c.accepted {
		if err := w.Multicast(id.String(), groupNames(c.top, dst)); err != nil {
			c.t.Fatal(err)
		}
	}
	c.mu.Unlock()
	for g := range c.reps {
		for i, tr := range c.reps[g] {
			if err := tr.rec.WriteLog(w, c.top, partition.GroupID(g), fmt.Sprintf("r%d", i+1)); err != nil {
				c.t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		c.t.Fatal(err)
	}
	f.Close()
	recs, err := check.ReadLog(path)
	if err != nil {
		c.t.Fatal(err)
	}
	rep := check.Check(recs, check.Options{Complete: true})
	if !rep.OK() {
		for _, v := range rep.Violations {
			c.t.Log(v)
		}
		c.t.Fatalf("delivery log %s: %s", path, rep.Summary())
	}
	c.t.Logf("%s", rep.Summary())
}
