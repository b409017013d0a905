package replication

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

// epochMembers returns the members of every group of c, as an epoch's
// configuration names them.
func (c *testCluster) epochMembers() [][]partition.ReplicaConfig {
	out := make([][]partition.ReplicaConfig, len(c.reps))
	for g := range c.reps {
		for _, tr := range c.reps[g] {
			m, _ := tr.cfg.member(tr.cfg.ID)
			out[g] = append(out[g], partition.ReplicaConfig{ID: m.ID, Raft: m.RaftAddr, GRPC: m.GRPCAddr, Peer: m.PeerAddr})
		}
	}
	return out
}

// change ends epoch e at group 0 (FlexCast's lowest rank takes the
// changes) with members.
func (c *testCluster) change(ctx context.Context, e uint64, members [][]partition.ReplicaConfig) {
	c.t.Helper()
	next := group.BootstrapEpoch(c.top)
	next.Members = members
	if err := c.atEntry(ctx, 0, "change", func(r *Replica) error { return r.Reconfigure(ctx, e, next) }); err != nil {
		c.t.Fatal(err)
	}
}

// waitRaft waits until the leader of group g has the raft configuration
// cond accepts.
func (c *testCluster) waitRaft(g int, what string, cond func([]RaftMember) bool) {
	c.t.Helper()
	// A leader handover and a configuration change under the race
	// detector, on a loaded two-core machine, were seen to take over 20 s.
	const limit = 45 * time.Second
	start := time.Now()
	for time.Since(start) < limit {
		l := c.leader(g)
		if ms, _, err := c.reps[g][l].r.RaftMembers(); err == nil && cond(ms) {
			if d := time.Since(start); d > 5*time.Second {
				c.t.Logf("group %d: %s after %v", g, what, d.Round(time.Millisecond))
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("group %d: %s: not within %v", g, what, limit)
}

// TestReplaceMember replaces a replica while multicasts run: a change of
// members announces r4 of group 1 to every group; the group's leader adds
// it to raft as a learner, it catches up, is promoted, and a second change
// removes the group's leader, which hands its leadership over first; the
// new leader removes it from raft. Every group's transmitter then sends to
// the new members, and every acknowledged multicast is delivered
// everywhere, in order.
func TestReplaceMember(t *testing.T) {
	c := newTestCluster(t, protocol.FlexCast, 2, 3, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.load(ctx, 1, 4, 200); err != nil {
		t.Fatal(err)
	}
	members := c.epochMembers()
	r4 := &testReplica{cfg: c.reps[1][0].cfg}
	m4 := Member{ID: "g1-r4", RaftAddr: freeAddr(t), GRPCAddr: freeAddr(t)}
	m4.PeerAddr = m4.GRPCAddr
	r4.cfg.ID = m4.ID
	r4.cfg.Members = append(slices.Clone(r4.cfg.Members), m4)
	r4.cfg.Dir = filepath.Join(c.dir, "g1-r4")
	r4.cfg.Bootstrap, r4.cfg.Existing = false, true
	members[1] = append(members[1], partition.ReplicaConfig{ID: m4.ID, Raft: m4.RaftAddr, GRPC: m4.GRPCAddr, Peer: m4.PeerAddr})
	c.change(ctx, 1, members)
	c.waitRaft(1, "r4 added as a learner", func(ms []RaftMember) bool {
		return slices.ContainsFunc(ms, func(m RaftMember) bool { return m.ID == "g1-r4" && !m.Voter })
	})
	// Not started yet: a voter that cannot answer would count in every
	// quorum of the group.
	if err := c.reps[1][c.leader(1)].r.Promote(ctx, "g1-r4"); !errors.Is(err, ErrLearnerBehind) {
		t.Errorf("promote a learner that never answered: %v, want ErrLearnerBehind", err)
	}
	c.reps[1] = append(c.reps[1], r4)
	c.start(1, 3)
	l := c.leader(1)
	leader := c.reps[1][l].r
	if err := leader.Promote(ctx, "g1-r9"); !errors.Is(err, ErrNotMember) {
		t.Errorf("promote a stranger: %v, want ErrNotMember", err)
	}
	if err := leader.Promote(ctx, c.reps[1][(l+1)%3].cfg.ID); !errors.Is(err, ErrNotLearner) {
		t.Errorf("promote a voter: %v, want ErrNotLearner", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for r4.r.RaftStatus().AppliedIndex+10 < leader.RaftStatus().CommitIndex {
		if time.Now().After(deadline) {
			t.Fatalf("r4 did not catch up: applied %d, leader's commit %d", r4.r.RaftStatus().AppliedIndex, leader.RaftStatus().CommitIndex)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := leader.Promote(ctx, "g1-r4"); err != nil {
		t.Fatalf("promote r4: %v", err)
	}
	c.waitRaft(1, "r4 a voter", func(ms []RaftMember) bool {
		return slices.ContainsFunc(ms, func(m RaftMember) bool { return m.ID == "g1-r4" && m.Voter })
	})

	// Remove the group's leader, while multicasts run.
	gone := c.reps[1][l].cfg.ID
	done := make(chan error, 1)
	go func() { done <- c.load(ctx, 2, 4, 200) }()
	members[1] = slices.DeleteFunc(members[1], func(m partition.ReplicaConfig) bool { return m.ID == gone })
	c.change(ctx, 2, members)
	c.waitRaft(1, gone+" removed", func(ms []RaftMember) bool {
		return len(ms) == 3 && !slices.ContainsFunc(ms, func(m RaftMember) bool { return m.ID == gone })
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c.stop(1, l)
	c.reps[1] = slices.Delete(c.reps[1], l, l+1)
	if err := c.load(ctx, 3, 4, 100); err != nil {
		t.Fatal(err)
	}
	want := make([]string, len(members[1]))
	for i, m := range members[1] {
		want[i] = m.PeerAddr()
	}
	g0 := c.reps[0][c.leader(0)].r
	if got := g0.tx.Peers(1); !slices.Equal(got, want) {
		t.Errorf("group 0 sends to group 1 at %v, want %v", got, want)
	}
	if got := fmt.Sprint(c.reps[1][c.leader(1)].r.Members()); len(c.reps[1][c.leader(1)].r.Members()) != 3 {
		t.Errorf("group 1's member table %s, want 3 members", got)
	}
	c.settle(30 * time.Second)
}

// TestNewLeaderFinishesChange: a leader that does not change raft after a
// change of members (held back here by a long MembersInterval, as a leader
// that crashes between the delivery and raft's change would be) leaves the
// change half done; the leader elected after it finishes it.
func TestNewLeaderFinishesChange(t *testing.T) {
	c := newTestCluster(t, protocol.FlexCast, 2, 3, 0)
	for i := range c.reps[1] {
		c.stop(1, i)
		c.reps[1][i].cfg.MembersInterval = time.Hour
		c.start(1, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.load(ctx, 1, 4, 100); err != nil {
		t.Fatal(err)
	}
	members := c.epochMembers()
	members[1] = append(members[1], partition.ReplicaConfig{ID: "g1-r4", Raft: freeAddr(t), GRPC: freeAddr(t)})
	c.change(ctx, 1, members)
	l := c.leader(1)
	deadline := time.Now().Add(20 * time.Second)
	for c.reps[1][l].r.Epoch() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("group 1's leader at epoch %d, want 2", c.reps[1][l].r.Epoch())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if ms, _, _ := c.reps[1][l].r.RaftMembers(); len(ms) != 3 {
		t.Fatalf("the held-back leader changed raft: %+v", ms)
	}
	// The followers come back with the usual interval; the leader goes.
	for i := range c.reps[1] {
		if i != l {
			c.stop(1, i)
			c.reps[1][i].cfg.MembersInterval = 0
			c.start(1, i)
		}
	}
	c.stop(1, l)
	c.waitRaft(1, "g1-r4 added as a learner by the next leader", func(ms []RaftMember) bool {
		return slices.ContainsFunc(ms, func(m RaftMember) bool { return m.ID == "g1-r4" && !m.Voter })
	})
}
