package raftstore

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"

	"github.com/flexkv/flexkv/internal/crashfs"
)

// The power loss test runs a three-node raft cluster whose nodes keep their
// log, stable store and snapshots on crashable in-memory disks (crashfs),
// under a steady stream of commands, and crashes one node at a time at a
// seeded sync: a leader, a follower, or a follower that fell behind the
// leader's compaction while the leader installs a snapshot on it. The
// crashed node restarts on what its disk had synced. After each crash the
// node catches up with every command acknowledged before it; at the end
// every node applied every acknowledged command, in one order.

var (
	plPoints = flag.Int("powerloss.points", 160, "crash points of TestPowerLossRaft (a quarter of the default under the race detector, unless set)")
	plSeed   = flag.Uint64("powerloss.seed", 1, "seed of TestPowerLossRaft's crash points")
)

// plNode is a node whose disk can crash.
type plNode struct {
	id   raft.ServerID
	addr raft.ServerAddress
	fs   *crashfs.FS

	store *Store
	snaps *SnapshotStore
	trans *raft.InmemTransport
	mute  *muteConsumer
	fsm   *idFSM
	raft  *raft.Raft
}

// muteConsumer stands between an in-memory transport and raft: once muted,
// the answers raft gives to the requests it received are dropped, as the
// network of a machine that lost power carries none. (Disconnecting an
// in-memory transport stops new requests, not the answers to those in
// flight.)
type muteConsumer struct {
	*raft.InmemTransport
	ch    chan raft.RPC
	muted atomic.Bool
	stop  chan struct{}
	done  sync.WaitGroup
}

func newMuteConsumer(t *raft.InmemTransport) *muteConsumer {
	m := &muteConsumer{InmemTransport: t, ch: make(chan raft.RPC), stop: make(chan struct{})}
	m.done.Go(m.forward)
	return m
}

func (m *muteConsumer) Consumer() <-chan raft.RPC { return m.ch }

func (m *muteConsumer) forward() {
	for {
		var rpc raft.RPC
		select {
		case rpc = <-m.InmemTransport.Consumer():
		case <-m.stop:
			return
		}
		orig := rpc.RespChan
		resp := make(chan raft.RPCResponse, 1)
		rpc.RespChan = resp
		select {
		case m.ch <- rpc:
		case <-m.stop:
			return
		}
		m.done.Go(func() {
			select {
			case r := <-resp:
				if !m.muted.Load() {
					orig <- r
				}
			case <-m.stop:
			}
		})
	}
}

// close stops forwarding, once raft has shut down.
func (m *muteConsumer) close() {
	close(m.stop)
	m.done.Wait()
}

func plRaftConfig(t *testing.T, id raft.ServerID) *raft.Config {
	c := raftConfig(t, id)
	c.HeartbeatTimeout = 100 * time.Millisecond
	c.ElectionTimeout = 100 * time.Millisecond
	c.LeaderLeaseTimeout = 50 * time.Millisecond
	return c
}

func (n *plNode) start(t *testing.T) {
	t.Helper()
	s, err := Open(Options{Dir: "/raft", FS: n.fs})
	if err != nil {
		t.Fatalf("node %s: Open: %v", n.id, err)
	}
	snaps, err := NewSnapshotStore(n.fs, "/snapshots", 2)
	if err != nil {
		t.Fatalf("node %s: %v", n.id, err)
	}
	n.store, n.snaps = s, snaps
	checkContiguous(t, n.id, s, snaps)
	_, n.trans = raft.NewInmemTransport(n.addr)
	n.mute = newMuteConsumer(n.trans)
	n.fsm = newIDFSM()
	r, err := raft.NewRaft(plRaftConfig(t, n.id), n.fsm, s, s, snaps, n.mute)
	if err != nil {
		t.Fatalf("node %s: NewRaft: %v", n.id, err)
	}
	n.raft = r
}

func (n *plNode) stop(t *testing.T) {
	t.Helper()
	if n.raft == nil {
		return
	}
	n.fs.Release()
	if err := n.raft.Shutdown().Error(); err != nil {
		t.Errorf("node %s: Shutdown: %v", n.id, err)
	}
	n.mute.close()
	if err := n.store.Close(); err != nil {
		t.Errorf("node %s: Close: %v", n.id, err)
	}
	n.raft, n.store = nil, nil
}

// plCluster is the cluster and what its clients were told.
type plCluster struct {
	t     *testing.T
	nodes []*plNode
	mu    sync.Mutex // guards nodes' raft fields against the writers
	acked sync.Map   // id -> true once Apply returned nil
	nAck  atomic.Int64
}

func (c *plCluster) connect() {
	for _, a := range c.nodes {
		a.mute.muted.Store(false)
	}
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			if a != b {
				a.trans.Connect(b.addr, b.trans)
			}
		}
	}
}

// isolate cuts n off from the others, both ways, answers to requests in
// flight included.
func (c *plCluster) isolate(n *plNode) {
	n.mute.muted.Store(true)
	for _, o := range c.nodes {
		if o != n {
			o.trans.Disconnect(n.addr)
		}
	}
	n.trans.DisconnectAll()
}

// leader returns the node that leads and its raft, or nil.
func (c *plCluster) leader() (*plNode, *raft.Raft) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.nodes {
		if n.raft != nil && n.raft.State() == raft.Leader {
			return n, n.raft
		}
	}
	return nil, nil
}

// write applies commands with ids writer, writer+writers, ... until stop,
// each retried until acknowledged (the state machine ignores repeats).
func (c *plCluster) write(writer, writers uint64, stop <-chan struct{}) {
	for id := writer; ; {
		select {
		case <-stop:
			return
		default:
		}
		_, r := c.leader()
		if r == nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if err := r.Apply(binary.BigEndian.AppendUint64(nil, id), 2*time.Second).Error(); err != nil {
			time.Sleep(time.Millisecond)
			continue
		}
		c.acked.Store(id, true)
		c.nAck.Add(1)
		id += writers
	}
}

// ackedIDs returns the ids acknowledged so far.
func (c *plCluster) ackedIDs() []uint64 {
	var ids []uint64
	c.acked.Range(func(k, _ any) bool {
		ids = append(ids, k.(uint64))
		return true
	})
	return ids
}

// crash crashes n's disk at a sync chosen by rng (or at once, if n makes no
// sync for a while), restarts n on what was synced, and reports whether the
// crash caught a snapshot half written (at one of its syncs).
func (c *plCluster) crash(n *plNode) (midSnapshot bool) {
	c.t.Helper()
	select {
	case <-n.fs.Crashed():
	case <-time.After(time.Second):
		n.fs.CrashNow()
	}
	c.isolate(n)
	image := n.fs.Image()
	midSnapshot = strings.HasPrefix(n.fs.CrashedAt(), "/snapshots")
	func() {
		c.mu.Lock()
		defer c.mu.Unlock() // a failed start must not leave the writers locked out
		n.stop(c.t)
		n.fs = crashfs.New(image)
		n.start(c.t)
	}()
	c.connect()
	return midSnapshot
}

// waitApplied waits until n applied every id in ids.
func waitApplied(t *testing.T, n *plNode, ids []uint64, what string) {
	t.Helper()
	waitFor(t, what, func() (bool, string) {
		got := map[uint64]bool{}
		for _, id := range n.fsm.applied() {
			got[id] = true
		}
		for _, id := range ids {
			if !got[id] {
				return false, fmt.Sprintf("node %s lacks acknowledged command %d (%d applied)", n.id, id, len(got))
			}
		}
		return true, ""
	})
}

// fallBehind cuts follower f off until the leader's log no longer holds the
// entry after f's last one, so that f can only catch up by a snapshot.
func (c *plCluster) fallBehind(f *plNode) {
	c.t.Helper()
	c.isolate(f)
	last, err := f.store.LastIndex()
	if err != nil {
		c.t.Fatal(err)
	}
	waitFor(c.t, "the leader to compact past a cut-off follower", func() (bool, string) {
		l, _ := c.leader()
		if l == nil {
			return false, "no leader"
		}
		if err := l.raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
			return false, err.Error()
		}
		first, err := l.store.FirstIndex()
		if err != nil {
			return false, err.Error()
		}
		return first > last+1, fmt.Sprintf("leader's log starts at %d, follower's ends at %d", first, last)
	})
}

func TestPowerLossRaft(t *testing.T) {
	// Clusters run side by side: most of a crash point is waiting (for an
	// election, for the crashed node to catch up).
	const clusters = 4
	total := powerLossPoints()
	var points [4]atomic.Int64 // leader, follower, install, half-written snapshot
	var acked atomic.Int64
	t.Run("clusters", func(t *testing.T) {
		for i := range clusters {
			n := total / clusters
			if i < total%clusters {
				n++
			}
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				p, a := runPowerLoss(t, *plSeed+uint64(i), n)
				for k := range p {
					points[k].Add(int64(p[k]))
				}
				acked.Add(int64(a))
			})
		}
	})
	if t.Failed() {
		return
	}
	t.Logf("crash points: %d (leader %d, follower %d, follower behind while a snapshot is installed %d, of which %d with the snapshot half written); acknowledged commands %d, lost 0",
		points[0].Load()+points[1].Load()+points[2].Load(), points[0].Load(), points[1].Load(), points[2].Load(), points[3].Load(), acked.Load())
}

// powerLossPoints is the number of crash points to run: the flag's, or a
// quarter of its default under the race detector, whose run looks for data
// races in the store and raft under crashes, not for more crash points (the
// plain run covers those).
func powerLossPoints() int {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "powerloss.points" })
	if raceDetector && !set {
		return *plPoints / 4
	}
	return *plPoints
}

// runPowerLoss runs points crash points on a new cluster and checks it; it
// returns the crash points by kind (leader, follower, install, half-written
// snapshot) and how many commands were acknowledged.
func runPowerLoss(t *testing.T, seed uint64, points int) (kinds [4]int, acked int) {
	c := &plCluster{t: t}
	var servers []raft.Server
	for i := range 3 {
		id := raft.ServerID(fmt.Sprintf("n%d", i))
		c.nodes = append(c.nodes, &plNode{id: id, addr: raft.ServerAddress(id), fs: crashfs.New(vfs.NewCrashableMem())})
		servers = append(servers, raft.Server{ID: id, Address: raft.ServerAddress(id)})
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.stop(t)
		}
	})
	for _, n := range c.nodes {
		n.start(t)
	}
	c.connect()
	if err := c.nodes[0].raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatalf("BootstrapCluster: %v", err)
	}

	const writers = 4
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range uint64(writers) {
		wg.Go(func() { c.write(w, writers, stop) })
	}
	stopWriters := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
	})
	defer stopWriters()

	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	for range points {
		c.crashPoint(rng, &kinds)
	}
	stopWriters()
	c.checkAll()
	return kinds, len(c.ackedIDs())
}

// crashPoint crashes one node at a point rng chooses and waits until it
// caught up with what was acknowledged before the crash.
func (c *plCluster) crashPoint(rng *rand.Rand, kinds *[4]int) {
	c.t.Helper()
	var victim *plNode
	for victim == nil {
		victim, _ = c.leader()
		time.Sleep(time.Millisecond)
	}
	kind := rng.IntN(5)
	if kind > 0 {
		for _, n := range c.nodes {
			if n != victim {
				victim = n
				break
			}
		}
	}
	var err error
	switch kind {
	case 0:
		kinds[0]++
		err = victim.fs.Arm(1 + rng.Uint64N(12))
	case 4:
		// Crash at one of the syncs of the snapshot the leader installs:
		// the state, its meta, their directory, the rename.
		kinds[2]++
		c.fallBehind(victim)
		err = victim.fs.ArmUnder(1+rng.Uint64N(4), "/snapshots")
		c.connect()
	default:
		kinds[1]++
		err = victim.fs.Arm(1 + rng.Uint64N(12))
	}
	if err != nil {
		c.t.Fatal(err)
	}
	before := c.ackedIDs()
	if c.crash(victim) {
		kinds[3]++
	}
	waitApplied(c.t, victim, before, fmt.Sprintf("crashed node %s to catch up", victim.id))
}

// checkAll waits until every node applied every acknowledged command and
// all applied one sequence.
func (c *plCluster) checkAll() {
	t := c.t
	acked := c.ackedIDs()
	for _, n := range c.nodes {
		waitApplied(t, n, acked, "every node to apply every acknowledged command")
	}
	waitFor(t, "every node to apply one sequence", func() (bool, string) {
		first := c.nodes[0].fsm.applied()
		for _, n := range c.nodes[1:] {
			got := n.fsm.applied()
			if len(got) != len(first) {
				return false, fmt.Sprintf("node %s applied %d commands, node %s %d", n.id, len(got), c.nodes[0].id, len(first))
			}
			for i := range got {
				if got[i] != first[i] {
					return false, fmt.Sprintf("node %s's command %d is %d, node %s's %d", n.id, i, got[i], c.nodes[0].id, first[i])
				}
			}
		}
		return true, ""
	})
}

// checkContiguous fails the test if s's log has a gap after its latest
// snapshot: raft reads every entry there when it starts.
func checkContiguous(t *testing.T, id raft.ServerID, s *Store, snaps *SnapshotStore) {
	t.Helper()
	metas, err := snaps.List()
	if err != nil {
		t.Fatalf("node %s: %v", id, err)
	}
	var snap uint64
	if len(metas) > 0 {
		snap = metas[0].Index
	}
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	for i := max(snap+1, first); i <= last; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil {
			var present []uint64
			for j := first; j <= last && len(present) < 20; j++ {
				if s.GetLog(j, &l) == nil {
					present = append(present, j)
				}
			}
			t.Fatalf("node %s restarts with a gap in its log: snapshot %d, log [%d, %d], entry %d: %v; present: %v", id, snap, first, last, i, err, present)
		}
	}
}
