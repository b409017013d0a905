package dbsim

import (
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/partition"
)

// Member changes under load and faults (DESIGN 14, Members;
// Config.Members): the replacement of a replica of a group, as `flexkv
// member add`, `promote` and `remove` make it on a running cluster.
//
//  1. The add is a change of the epoch taken by the group that takes the
//     changes: next.Members with one more member of group g. Every group
//     delivers it as a cut, and g's state then lists the member.
//  2. Raft follows the epoch, at g's leader alone (replication/members.go,
//     reconcile): once the leader's state lists the member, the leader adds
//     it as a learner. Here: a new replica with an empty store, which the
//     leader's latest snapshot is installed on (raft's InstallSnapshot), and
//     which then applies the entries after it like any follower, under the
//     same faults. A learner never leads.
//  3. Promotion is raft's alone (PromoteMember, no control message): once
//     the learner's log is within promoteLagMax entries of the leader's, it
//     becomes a voter, which may lead.
//  4. The remove is a second change of the epoch: next.Members without one
//     of g's older members. Once g's leader's state no longer lists it, the
//     leader hands its leadership over first if it is the one removed (the
//     next leader removes it), and the replica is dropped: it applies no
//     further entry.
//
// One replacement is under way at a time; a change drawn as a member change
// while the replacement waits on raft's step is a change of the overlay
// instead. A run ends only once raft's steps caught up with the epoch (no
// member waits to be added, promoted or removed), and the checks then
// compare every replica's members of every group with the replicas the
// simulator runs (checkMembers).

// promoteLagMax is the lag, in entries, within which a learner is promoted
// (`flexkv member promote --max-lag`, small here: the logs are short).
const promoteLagMax = 8

// membersEvery is the odds, one in so many steps, that raft's step of a
// replacement under way is taken when due: the leader compares the epoch's
// members with raft's every membersInterval, so faults and traffic come in
// between.
const membersEvery = 8

// The stages of a replacement: the add taken, waiting for the leader to add
// the learner; the learner catching up; the voter, waiting for the remove
// to be taken; the remove taken, waiting for the leader to drop the member.
const (
	stageAdding = iota + 1
	stageLearner
	stageVoter
	stageRemoving
)

// A replacement is the replacement of a replica of group g under way.
type replacement struct {
	g      int
	stage  int
	add    string // the id of the member added
	remove string // the id of the member removed (stageRemoving)
}

// memberConfig returns the member of replica r of group g: its id and
// addresses, which the state checks and carries but nothing dials here.
func memberConfig(g, r int) partition.ReplicaConfig {
	host := memberID(g, r)
	return partition.ReplicaConfig{ID: host, Raft: host + ":7000", GRPC: host + ":9000", Peer: host + ":9100"}
}

func memberID(g, r int) string { return fmt.Sprintf("g%d-r%d", g, r) }

// membersOf returns the members of c, or of the bootstrap configuration
// when c keeps them (nil): every group's first Config.Replicas replicas.
func (s *sim) membersOf(c group.EpochConfig) [][]partition.ReplicaConfig {
	if c.Members != nil {
		return c.Members
	}
	out := make([][]partition.ReplicaConfig, s.cfg.Groups)
	for g := range out {
		for r := range s.cfg.Replicas {
			out[g] = append(out[g], memberConfig(g, r))
		}
	}
	return out
}

// memberNext returns cur with the next member change of the replacement
// under way, or of a new one; false when the replacement waits on raft.
func (s *sim) memberNext(cur group.EpochConfig) (group.EpochConfig, *replacement, bool) {
	members := s.membersOf(cur)
	next := cur
	next.Overlay = slices.Clone(cur.Overlay)
	next.Parent = slices.Clone(cur.Parent)
	next.Members = make([][]partition.ReplicaConfig, len(members))
	for g, rs := range members {
		next.Members[g] = slices.Clone(rs)
	}
	switch {
	case s.repl == nil:
		g := s.rng.IntN(len(s.groups))
		if len(next.Members[g]) >= group.MembersMax {
			return cur, nil, false
		}
		gs := s.groups[g]
		m := memberConfig(g, gs.nextR)
		next.Members[g] = append(next.Members[g], m)
		return next, &replacement{g: g, stage: stageAdding, add: m.ID}, true
	case s.repl.stage == stageVoter:
		rs := next.Members[s.repl.g]
		var old []int
		for i, m := range rs {
			if m.ID != s.repl.add {
				old = append(old, i)
			}
		}
		if len(old) == 0 || len(rs) < 2 {
			return cur, nil, false
		}
		i := old[s.rng.IntN(len(old))]
		r := *s.repl
		r.stage, r.remove = stageRemoving, rs[i].ID
		next.Members[s.repl.g] = slices.Delete(rs, i, i+1)
		return next, &r, true
	}
	return cur, nil, false
}

// advanceMembers takes raft's step of the replacement under way, if its
// group's leader's state calls for it: add the learner, promote it, drop
// the member removed.
func (s *sim) advanceMembers() error {
	if s.repl == nil || s.rng.IntN(membersEvery) != 0 {
		return nil
	}
	gs := s.groups[s.repl.g]
	lead := gs.replicas[gs.leader]
	listed := func(id string) bool {
		ms := s.membersOf(lead.m.State().EpochConfig())[s.repl.g]
		return slices.ContainsFunc(ms, func(m partition.ReplicaConfig) bool { return m.ID == id })
	}
	switch s.repl.stage {
	case stageAdding:
		if listed(s.repl.add) {
			return s.addLearner(gs)
		}
	case stageLearner:
		rp := gs.replicas[len(gs.replicas)-1]
		if rp.id() != s.repl.add || !rp.learner {
			panic(fmt.Sprintf("dbsim: learner %s is not group %d's last replica (%s)", s.repl.add, s.repl.g, rp.name()))
		}
		if uint64(len(gs.log))-rp.applied <= promoteLagMax {
			rp.learner = false
			s.res.Promotions++
			s.repl.stage = stageVoter
		}
	case stageRemoving:
		if !listed(s.repl.remove) {
			return s.dropMember(gs)
		}
	}
	return nil
}

// addLearner adds the replica of the member added to gs, a learner: an
// empty store that the leader's latest snapshot is installed on (one taken
// first if the leader has none).
func (s *sim) addLearner(gs *groupState) error {
	lead := gs.replicas[gs.leader]
	if len(lead.snaps) == 0 {
		if err := lead.takeSnapshot(); err != nil {
			return err
		}
	}
	r := gs.nextR
	gs.nextR++
	rp, err := openReplica(s.repl.g, r, lead.cfg, s.pm, s.procs, vfs.NewCrashableMem(), s.cfg.ResultsMax, s.cfg.ResultSessionsMax)
	if err != nil {
		return err
	}
	if rp.id() != s.repl.add {
		panic(fmt.Sprintf("dbsim: replica %s added for member %s", rp.id(), s.repl.add))
	}
	rp.learner = true
	gs.replicas = append(gs.replicas, rp)
	s.res.Learners++
	s.repl.stage = stageLearner
	return s.installOn(lead, rp)
}

// dropMember drops the replica of the member removed from gs, its leader
// handing over first when it is the one removed.
func (s *sim) dropMember(gs *groupState) error {
	i := slices.IndexFunc(gs.replicas, func(rp *replica) bool { return rp.id() == s.repl.remove })
	if i < 0 {
		panic(fmt.Sprintf("dbsim: member %s of group %d removed has no replica", s.repl.remove, s.repl.g))
	}
	if i == gs.leader {
		s.res.LeadersReplaced++
		if err := s.changeLeader(gs); err != nil {
			return err
		}
		if gs.leader == i {
			panic(fmt.Sprintf("dbsim: group %d's leader %s removed with no voter to hand over to", s.repl.g, s.repl.remove))
		}
	}
	rp := gs.replicas[i]
	gs.replicas = slices.Delete(gs.replicas, i, i+1)
	if gs.leader > i {
		gs.leader--
	}
	s.removed = append(s.removed, rp)
	s.res.Replaced++
	s.repl = nil
	return rp.close()
}

// membersSettled reports whether raft's steps caught up with the epoch: no
// member waits to be added, promoted or removed.
func (s *sim) membersSettled() bool { return s.repl == nil || s.repl.stage == stageVoter }

// voters returns the indexes of the replicas of gs that may lead, the
// leader's excepted, in order after it.
func voters(gs *groupState) []int {
	var out []int
	for k := 1; k < len(gs.replicas); k++ {
		if i := (gs.leader + k) % len(gs.replicas); !gs.replicas[i].learner {
			out = append(out, i)
		}
	}
	return out
}

// checkMembers checks that every replica of every group has, in its
// epoch's configuration, the members the simulator runs: every group's
// replicas, the added ones included and the removed ones not.
func (s *sim) checkMembers() {
	want := make([][]string, len(s.groups))
	for g, gs := range s.groups {
		for _, rp := range gs.replicas {
			want[g] = append(want[g], rp.id())
		}
	}
	for _, gs := range s.groups {
		for _, rp := range gs.replicas {
			members := s.membersOf(rp.m.State().EpochConfig())
			for g := range s.groups {
				var got []string
				for _, m := range members[g] {
					got = append(got, m.ID)
				}
				if !slices.Equal(got, want[g]) {
					s.res.violate("members: %s has group %d's members %v, the simulator runs %v", rp.name(), g, got, want[g])
				}
			}
			if rp.learner {
				s.res.violate("members: %s is still a learner at the end", rp.name())
			}
		}
	}
}
