package replication

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/partition"
)

// Members of a group (DESIGN 14). The members of every group are part of
// each epoch's configuration (group.EpochConfig.Members), changed by a
// control message that every group delivers at one cut. Raft's own
// configuration follows it, changed by the group's leader alone: a member
// of the epoch that raft lacks is added as a nonvoter (a learner), and a
// server that the epoch no longer lists is removed, the leader handing its
// leadership over first when it is the one removed. The leader compares the
// two every membersInterval, so a leader elected between the delivery of a
// change and raft's change finishes what its predecessor left half done.
// A learner becomes a voter only when asked (Promote), once the operator
// saw it caught up: raft's AddVoter, which raft's log keeps.

// membersInterval is how often, unless configured (Config.MembersInterval),
// the leader compares the members of its epoch with raft's configuration,
// and every replica picks up the addresses of a new epoch.
const membersInterval = 50 * time.Millisecond

// Errors of Promote.
var (
	// ErrNotMember: the replica is not in the group's raft configuration
	// (not a member of the epoch, or not added by the leader yet).
	ErrNotMember = errors.New("replication: not a member of the group's raft configuration")
	// ErrNotLearner: the replica votes already.
	ErrNotLearner = errors.New("replication: not a learner: the member votes already")
	// ErrLearnerBehind: the learner has not answered the leader lately, or
	// its log does not hold the configuration that made it a member yet.
	ErrLearnerBehind = errors.New("replication: the learner has not caught up")
)

// RaftMember is one server of the group's raft configuration.
type RaftMember struct {
	ID, RaftAddr string
	Voter        bool
}

// member returns the member id of the group's latest epoch.
func (r *Replica) member(id string) (Member, bool) {
	for _, m := range *r.members.Load() {
		if m.ID == id {
			return m, true
		}
	}
	return Member{}, false
}

// Members returns the group's members in the latest epoch this replica
// applied.
func (r *Replica) Members() []Member { return slices.Clone(*r.members.Load()) }

// membersLoop picks up the members of each new epoch (every replica: its
// leader hints and the addresses its transmitter sends to) and, on the
// leader, brings raft's configuration to its epoch's members.
func (r *Replica) membersLoop() {
	defer r.wg.Done()
	t := time.NewTicker(r.cfg.MembersInterval)
	defer t.Stop()
	var epoch uint64
	// leadFrom is the last log index when this replica became leader (0:
	// not leading): once the state applied it, it holds every entry of
	// the terms before, and the epoch it names is the group's latest.
	var leadFrom uint64
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		if e := r.Epoch(); e != epoch {
			epoch = e
			r.takeMembers()
		}
		if r.raft.State() != raft.Leader {
			leadFrom = 0
			continue
		}
		if leadFrom == 0 {
			leadFrom = r.raft.LastIndex()
		}
		if r.raft.AppliedIndex() < leadFrom {
			continue
		}
		if err := r.reconcile(); err != nil {
			r.log.Warn("members: raft configuration not changed yet", "err", err)
		}
	}
}

// takeMembers reads the members of the state's epoch: this group's become
// the member table, the others' the transmitter's addresses. An epoch that
// keeps the bootstrap members (nil) changes nothing.
func (r *Replica) takeMembers() {
	var c group.EpochConfig
	r.fsm.withState(func(s *group.State) { c = s.EpochConfig() })
	if c.Members == nil {
		return
	}
	self := r.cfg.State.Self
	mine := make([]Member, 0, len(c.Members[self]))
	for _, m := range c.Members[self] {
		mine = append(mine, Member{ID: m.ID, RaftAddr: m.Raft, GRPCAddr: m.GRPC, PeerAddr: m.PeerAddr()})
	}
	r.members.Store(&mine)
	for g, rs := range c.Members {
		if partition.GroupID(g) == self || r.cfg.State.Topology.Len() < 2 {
			continue
		}
		addrs := make([]string, len(rs))
		for i, m := range rs {
			addrs[i] = m.PeerAddr()
		}
		if err := r.tx.SetPeers(partition.GroupID(g), addrs); err != nil {
			r.log.Warn("members: transmitter addresses not changed", "group", g, "err", err)
		}
	}
	r.log.Info("members of the epoch", "epoch", c.Epoch, "members", len(mine))
}

// reconcile makes one change of raft's configuration towards the members
// of the epoch, if one is due: add a missing member as a nonvoter, or
// remove a server the epoch does not list (this leader: hand leadership
// over first; the next leader removes it). One change at a time: raft
// takes a configuration change only after the last one committed.
func (r *Replica) reconcile() error {
	f := r.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return r.leaderErr(err)
	}
	conf, index := f.Configuration(), f.Index()
	members := *r.members.Load()
	for _, m := range members {
		if slices.ContainsFunc(conf.Servers, func(s raft.Server) bool { return string(s.ID) == m.ID }) {
			continue
		}
		r.log.Info("members: adding a learner", "member", m.ID, "raft", m.RaftAddr)
		return r.leaderErr(r.raft.AddNonvoter(raft.ServerID(m.ID), raft.ServerAddress(m.RaftAddr), index, r.cfg.ApplyTimeout).Error())
	}
	for _, s := range conf.Servers {
		if slices.ContainsFunc(members, func(m Member) bool { return m.ID == string(s.ID) }) {
			continue
		}
		if string(s.ID) == r.cfg.ID {
			r.log.Info("members: this leader is removed: handing leadership over")
			return r.leaderErr(r.raft.LeadershipTransfer().Error())
		}
		r.log.Info("members: removing", "member", s.ID)
		return r.leaderErr(r.raft.RemoveServer(s.ID, index, r.cfg.ApplyTimeout).Error())
	}
	return nil
}

// Promote makes the learner id a voter of the group (raft's AddVoter). It
// returns a *NotLeaderError on a follower, ErrNotMember when raft does not
// have id (yet), ErrNotLearner when id votes already, ErrLearnerBehind
// when id has not answered the leader within two election timeouts or its
// log does not reach the group's configuration (the one that made it a
// learner, or a later one): such a voter would count in every quorum
// without being able to help form one.
func (r *Replica) Promote(ctx context.Context, id string) error {
	if r.raft.State() != raft.Leader {
		return &NotLeaderError{Leader: r.leaderHint()}
	}
	f := r.raft.GetConfiguration()
	if err := r.await(ctx, f); err != nil {
		return r.leaderErr(err)
	}
	i := slices.IndexFunc(f.Configuration().Servers, func(s raft.Server) bool { return string(s.ID) == id })
	if i < 0 {
		return fmt.Errorf("%w: %s", ErrNotMember, id)
	}
	s := f.Configuration().Servers[i]
	if s.Suffrage == raft.Voter {
		return fmt.Errorf("%w: %s", ErrNotLearner, id)
	}
	if err := r.learnerReady(s.ID, f.Index()); err != nil {
		return err
	}
	timeout := r.cfg.ApplyTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl))
	}
	return r.leaderErr(r.await(ctx, r.raft.AddVoter(s.ID, s.Address, f.Index(), timeout)))
}

// learnerReady reports whether the learner id answered the leader lately
// with a log that reaches index, the group's configuration.
func (r *Replica) learnerReady(id raft.ServerID, index uint64) error {
	c, ok := r.progress.contact(id)
	switch since := time.Since(c.at); {
	case !ok:
		return fmt.Errorf("%w: %s has never answered this leader", ErrLearnerBehind, id)
	case since > 2*r.cfg.ElectionTimeout:
		return fmt.Errorf("%w: %s last answered this leader %s ago", ErrLearnerBehind, id, since.Round(time.Millisecond))
	case c.lastLog < index:
		return fmt.Errorf("%w: %s's log ends at index %d, before the group's configuration at %d", ErrLearnerBehind, id, c.lastLog, index)
	}
	return nil
}

// RaftMembers returns the group's raft configuration as this replica knows
// it (the latest in its log), and the index it was taken at.
func (r *Replica) RaftMembers() ([]RaftMember, uint64, error) {
	f := r.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, 0, fmt.Errorf("replication: %w", err)
	}
	var out []RaftMember
	for _, s := range f.Configuration().Servers {
		out = append(out, RaftMember{ID: string(s.ID), RaftAddr: string(s.Address), Voter: s.Suffrage == raft.Voter})
	}
	return out, f.Index(), nil
}
