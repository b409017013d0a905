package raftstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"
)

// The raft conformance test runs a real three-node hashicorp/raft cluster
// in one process, each node on its own Store, and restarts one node from its
// store directory.

// idFSM is a trivial state machine: each command carries an 8-byte id, and
// the state is the ids in the order first applied. An id applied again (a
// client retry after an ambiguous leadership loss) is ignored, as a real
// state machine deduplicates requests, so that the test can retry without
// changing what the replicas must agree on.
type idFSM struct {
	mu       sync.Mutex
	seen     map[uint64]bool
	order    []uint64
	restores int
}

func newIDFSM() *idFSM { return &idFSM{seen: make(map[uint64]bool)} }

func (f *idFSM) Apply(l *raft.Log) any {
	if len(l.Data) != 8 {
		return fmt.Errorf("idfsm: command of %d bytes, want 8", len(l.Data))
	}
	id := binary.BigEndian.Uint64(l.Data)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.seen[id] {
		f.seen[id] = true
		f.order = append(f.order, id)
	}
	return nil
}

func (f *idFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return idSnapshot(slices.Clone(f.order)), nil
}

func (f *idFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("idfsm: restore: %w", err)
	}
	if len(b)%8 != 0 {
		return fmt.Errorf("idfsm: restore: snapshot of %d bytes", len(b))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restores++
	f.seen = make(map[uint64]bool)
	f.order = f.order[:0]
	for i := 0; i < len(b); i += 8 {
		id := binary.BigEndian.Uint64(b[i:])
		f.seen[id] = true
		f.order = append(f.order, id)
	}
	return nil
}

func (f *idFSM) restored() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.restores
}

func (f *idFSM) applied() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.order)
}

type idSnapshot []uint64

func (s idSnapshot) Persist(sink raft.SnapshotSink) error {
	b := make([]byte, 0, 8*len(s))
	for _, id := range s {
		b = binary.BigEndian.AppendUint64(b, id)
	}
	if _, err := sink.Write(b); err != nil {
		return errors.Join(fmt.Errorf("idfsm: persist: %w", err), sink.Cancel())
	}
	return sink.Close()
}

func (idSnapshot) Release() {}

// logDump is what a store's log holds.
type logDump struct {
	first, last uint64
	entries     []raft.Log // the entries in [first, last], gaps left out
}

func dumpLog(t *testing.T, s *Store) logDump {
	t.Helper()
	var d logDump
	var err error
	if d.first, err = s.FirstIndex(); err != nil {
		t.Fatalf("FirstIndex: %v", err)
	}
	if d.last, err = s.LastIndex(); err != nil {
		t.Fatalf("LastIndex: %v", err)
	}
	for i := d.first; i != 0 && i <= d.last; i++ {
		var l raft.Log
		err := s.GetLog(i, &l)
		if errors.Is(err, raft.ErrLogNotFound) && i != d.first && i != d.last {
			continue
		}
		if err != nil {
			t.Fatalf("GetLog(%d) of [%d, %d]: %v", i, d.first, d.last, err)
		}
		d.entries = append(d.entries, l)
	}
	return d
}

// node is one cluster member. Its directory and snapshot store outlive a
// restart; the rest is made anew.
type node struct {
	id    raft.ServerID
	addr  raft.ServerAddress
	dir   string
	snaps *raft.InmemSnapshotStore

	store *Store
	trans *raft.InmemTransport
	fsm   *idFSM
	raft  *raft.Raft
}

// Waits in this test are bounded by conditions, not tuned sleeps.
const (
	waitMax      = 30 * time.Second
	pollInterval = 10 * time.Millisecond
)

// waitFor polls cond until it holds, or fails the test after waitMax.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(waitMax)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, still waiting for %s: %s", waitMax, what, state)
		}
		time.Sleep(pollInterval)
	}
}

func raftConfig(t *testing.T, id raft.ServerID) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = id
	// Short timeouts keep the test fast; not so short that two shared,
	// busy cores cause elections all the time.
	c.HeartbeatTimeout = 200 * time.Millisecond
	c.ElectionTimeout = 200 * time.Millisecond
	c.LeaderLeaseTimeout = 100 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	// Snapshot and compact often, so that raft deletes the head of the
	// log and a lagging node is sent a snapshot.
	c.SnapshotThreshold = 200
	c.SnapshotInterval = 50 * time.Millisecond
	c.TrailingLogs = 50
	c.LogOutput = t.Output()
	c.LogLevel = "ERROR"
	return c
}

// start opens n's store and starts raft on it.
func (n *node) start(t *testing.T) {
	t.Helper()
	s, err := Open(Options{Dir: n.dir})
	if err != nil {
		t.Fatalf("node %s: Open: %v", n.id, err)
	}
	n.store = s
	_, n.trans = raft.NewInmemTransport(n.addr)
	n.fsm = newIDFSM()
	r, err := raft.NewRaft(raftConfig(t, n.id), n.fsm, s, s, n.snaps, n.trans)
	if err != nil {
		t.Fatalf("node %s: NewRaft: %v", n.id, errors.Join(err, s.Close()))
	}
	n.raft = r
}

// stop shuts raft down, then closes the store; a stopped node is left alone.
func (n *node) stop(t *testing.T) {
	t.Helper()
	if n.raft == nil {
		return
	}
	if err := n.raft.Shutdown().Error(); err != nil {
		t.Errorf("node %s: Shutdown: %v", n.id, err)
	}
	if err := n.store.Close(); err != nil {
		t.Errorf("node %s: Close: %v", n.id, err)
	}
	n.raft, n.store = nil, nil
}

// connect links every running node's transport to every other's.
func connect(nodes []*node) {
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b && a.raft != nil && b.raft != nil {
				a.trans.Connect(b.addr, b.trans)
			}
		}
	}
}

func leader(t *testing.T, nodes []*node) *node {
	t.Helper()
	var l *node
	waitFor(t, "a leader", func() (bool, string) {
		var states []string
		for _, n := range nodes {
			if n.raft == nil {
				continue
			}
			st := n.raft.State()
			states = append(states, fmt.Sprintf("%s:%v", n.id, st))
			if st == raft.Leader {
				l = n
				return true, ""
			}
		}
		return false, fmt.Sprint(states)
	})
	return l
}

// apply commits one command per id, retrying through the current leader
// what failed because leadership moved.
func apply(t *testing.T, nodes []*node, ids []uint64) {
	t.Helper()
	const roundsMax = 20
	pending := ids
	for round := 0; len(pending) > 0; round++ {
		if round == roundsMax {
			t.Fatalf("%d commands still not committed after %d rounds", len(pending), roundsMax)
		}
		l := leader(t, nodes)
		futures := make([]raft.ApplyFuture, len(pending))
		for i, id := range pending {
			futures[i] = l.raft.Apply(binary.BigEndian.AppendUint64(nil, id), waitMax)
		}
		var failed []uint64
		for i, f := range futures {
			err := f.Error()
			switch {
			case err == nil:
				if resp := f.Response(); resp != nil {
					t.Fatalf("apply %d: FSM returned %v", pending[i], resp)
				}
			case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
				errors.Is(err, raft.ErrEnqueueTimeout):
				failed = append(failed, pending[i])
			default:
				t.Fatalf("apply %d: %v", pending[i], err)
			}
		}
		pending = failed
	}
}

func seq(lo, hi uint64) []uint64 {
	var ids []uint64
	for id := lo; id < hi; id++ {
		ids = append(ids, id)
	}
	return ids
}

// checkAgree waits until every running node applied ids and the same
// sequence.
func checkAgree(t *testing.T, nodes []*node, ids []uint64) {
	t.Helper()
	want := slices.Clone(ids)
	slices.Sort(want)
	waitFor(t, "every node to apply every command in the same order", func() (bool, string) {
		var first []uint64
		for i, n := range nodes {
			got := n.fsm.applied()
			if len(got) != len(want) {
				return false, fmt.Sprintf("node %s applied %d commands, want %d", n.id, len(got), len(want))
			}
			if i == 0 {
				first = got
				sorted := slices.Clone(got)
				slices.Sort(sorted)
				if !slices.Equal(sorted, want) {
					return false, fmt.Sprintf("node %s applied other commands than the ones sent", n.id)
				}
			} else if !slices.Equal(got, first) {
				return false, fmt.Sprintf("node %s applied another order than node %s", n.id, nodes[0].id)
			}
		}
		return true, ""
	})
}

func TestRaftCluster(t *testing.T) {
	const (
		before = 1000 // commands applied before the restart
		during = 300  // commands applied while one node is down
		after  = 100  // commands applied once the node caught up
	)
	nodes := startRaftCluster(t)
	apply(t, nodes, seq(0, before))
	checkAgree(t, nodes, seq(0, before))

	// Restart a follower on its store directory, after the others moved on
	// far enough that the leader compacted the entries it lacks.
	f, stored := stopFollower(t, nodes)
	var live []*node
	for _, n := range nodes {
		if n != f {
			live = append(live, n)
		}
	}
	apply(t, live, seq(before, before+during))
	// Snapshot now, so that the leader compacts (TrailingLogs) the entries
	// the stopped node lacks and must send it a snapshot: raft then leaves
	// a gap in that node's log.
	for _, n := range live {
		if err := n.raft.Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
			t.Fatalf("node %s: Snapshot: %v", n.id, err)
		}
	}
	checkReopen(t, f, stored)

	f.start(t)
	restoredAtStart := f.fsm.restored() // from its own snapshots, in NewRaft
	connect(nodes)
	checkAgree(t, nodes, seq(0, before+during))
	if got := f.fsm.restored(); got <= restoredAtStart {
		t.Fatalf("restarted node restored %d snapshots after it started, want a snapshot from the leader", got-restoredAtStart)
	}

	// Having caught up (by a snapshot if the leader compacted what it
	// lacked, leaving a gap in its log), the restarted node stores new
	// entries like the others.
	apply(t, nodes, seq(before+during, before+during+after))
	checkAgree(t, nodes, seq(0, before+during+after))
	waitSameLastEntry(t, nodes)
}

// startRaftCluster starts three connected nodes, each on its own Store, and
// bootstraps them as one cluster; they stop when t ends.
func startRaftCluster(t *testing.T) []*node {
	nodes := make([]*node, 3)
	var servers []raft.Server
	for i := range nodes {
		id := raft.ServerID(fmt.Sprintf("n%d", i))
		nodes[i] = &node{id: id, addr: raft.ServerAddress(id), dir: t.TempDir(), snaps: raft.NewInmemSnapshotStore()}
		servers = append(servers, raft.Server{ID: id, Address: nodes[i].addr})
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			n.stop(t)
		}
	})
	for _, n := range nodes {
		n.start(t)
	}
	connect(nodes)
	if err := nodes[0].raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		t.Fatalf("BootstrapCluster: %v", err)
	}
	return nodes
}

// stopFollower stops a follower and cuts it off from the others; it returns
// the follower and what raft left in its store, read once raft was down, to
// compare with what the store holds after reopening.
func stopFollower(t *testing.T, nodes []*node) (*node, logDump) {
	t.Helper()
	var f *node
	for _, n := range nodes {
		if n.raft.State() != raft.Leader {
			f = n
			break
		}
	}
	if err := f.raft.Shutdown().Error(); err != nil {
		t.Fatalf("node %s: Shutdown: %v", f.id, err)
	}
	stored := dumpLog(t, f.store)
	f.stop(t)
	for _, n := range nodes {
		if n != f {
			n.trans.Disconnect(f.addr)
		}
	}
	return f, stored
}

// checkReopen reopens the stopped node f's store: what raft stored is all
// there, gaps included (a follower that lagged behind the leader's
// compaction was sent a snapshot and stored the entries after it, past a
// gap).
func checkReopen(t *testing.T, f *node, stored logDump) {
	t.Helper()
	s, err := Open(Options{Dir: f.dir})
	if err != nil {
		t.Fatalf("reopen %s: %v", f.id, err)
	}
	if term, err := s.GetUint64([]byte("CurrentTerm")); err != nil || term == 0 {
		t.Fatalf("reopened %s: CurrentTerm = %d, %v, want > 0, nil", f.id, term, err)
	}
	if stored.first == 0 {
		t.Fatalf("node %s stored no entries", f.id)
	}
	if diff := cmp.Diff(stored, dumpLog(t, s), cmp.AllowUnexported(logDump{})); diff != "" {
		t.Fatalf("node %s's log after reopening (-before +after):\n%s", f.id, diff)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close %s: %v", f.id, err)
	}
}

// waitSameLastEntry waits until every node's log ends with the same entry.
func waitSameLastEntry(t *testing.T, nodes []*node) {
	t.Helper()
	waitFor(t, "every node's log to end with the same entry", func() (bool, string) {
		var want raft.Log
		for i, n := range nodes {
			last, err := n.store.LastIndex()
			if err != nil {
				return false, err.Error()
			}
			var got raft.Log
			if err := n.store.GetLog(last, &got); err != nil {
				return false, fmt.Sprintf("node %s: GetLog(%d): %v", n.id, last, err)
			}
			if i == 0 {
				want = got
				continue
			}
			if got.Index != want.Index || got.Term != want.Term || !bytes.Equal(got.Data, want.Data) {
				return false, fmt.Sprintf("node %s ends with %d/%d, node %s with %d/%d (index/term)",
					n.id, got.Index, got.Term, nodes[0].id, want.Index, want.Term)
			}
		}
		return true, ""
	})
}
