package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/replication"
)

// Members (DESIGN 14). The configuration the server loaded is the cluster's
// bootstrap configuration, epoch 1: it names the cluster (its identity,
// DESIGN 13) and never changes. The members of each later epoch are in the
// group's replicated state (group.EpochConfig.Members); the server builds
// the configuration of its current epoch from both (config), for the
// clients (Topology), the requests it forwards and the checks of a change.

// epochConfig is the configuration of one epoch, cached by config.
type epochConfig struct {
	epoch uint64
	cfg   *partition.ClusterConfig
	top   *partition.Topology // the epoch's ranks and tree (group.State.Topology)
	// pm is the epoch's partition map (its owners, group/moves.go), moves
	// the partitions moving in it.
	pm    *partition.PartitionMap
	moves []group.Move
}

// config returns the configuration of the replica's current epoch: the
// loaded one with the members of the epoch; before the replica's state
// names any, the one it joined with (Config.Current), else the loaded one.
func (s *Server) config() *partition.ClusterConfig {
	if s.replica == nil {
		return s.startConfig()
	}
	if c := s.current.Load(); c != nil && c.epoch == s.replica.Epoch() {
		return c.cfg
	}
	return s.loadCurrent().cfg
}

// loadCurrent reads the configuration and topology of the group's epoch
// from its state, and keeps them for config and routeTop until the next
// epoch.
func (s *Server) loadCurrent() *epochConfig {
	var ec group.EpochConfig
	var top *partition.Topology
	var pm *partition.PartitionMap
	s.replica.State(func(st *group.State) { ec, top, pm = st.EpochConfig(), st.Topology(), st.Partitions() })
	if pm == nil {
		pm = s.pm
	}
	c := &epochConfig{epoch: ec.Epoch, cfg: s.withOwners(s.withMembers(ec.Members), pm), top: top, pm: pm, moves: ec.Moves}
	s.current.Store(c)
	return c
}

// partitions returns the partition map of the replica's current epoch.
func (s *Server) partitions() *partition.PartitionMap {
	if s.replica == nil {
		return s.pm
	}
	return s.epoch().pm
}

// epoch returns what the server keeps of the replica's current epoch.
func (s *Server) epoch() *epochConfig {
	if c := s.current.Load(); c != nil && c.epoch == s.replica.Epoch() {
		return c
	}
	return s.loadCurrent()
}

// withOwners returns cfg with the owners of pm, when they differ from
// cfg's: the configuration of an epoch in which partitions moved.
func (s *Server) withOwners(cfg *partition.ClusterConfig, pm *partition.PartitionMap) *partition.ClusterConfig {
	if pm == s.pm {
		return cfg
	}
	c := *cfg
	c.Partitions = slices.Clone(cfg.Partitions)
	for i, p := range c.Partitions {
		if part, ok := pm.ByName(p.Name); ok && !part.Replicated {
			c.Partitions[i].Group = s.top.Name(part.Group)
		}
	}
	return &c
}

// startConfig is the configuration the server starts with: the one it
// joined with, else the loaded one.
func (s *Server) startConfig() *partition.ClusterConfig {
	return cmp.Or(s.cfg.Current, s.cfg.Cluster)
}

// withMembers returns the loaded configuration with members (by GroupID),
// or startConfig when members is nil.
func (s *Server) withMembers(members [][]partition.ReplicaConfig) *partition.ClusterConfig {
	if members == nil {
		return s.startConfig()
	}
	c := *s.cfg.Cluster
	c.Groups = make([]partition.GroupConfig, len(s.cfg.Cluster.Groups))
	for i, g := range s.cfg.Cluster.Groups {
		id, _ := s.top.Lookup(g.Name)
		g.Replicas = slices.Clone(members[id])
		c.Groups[i] = g
	}
	c.EpochMembers = true
	return &c
}

// membersOf returns the members of every group of cfg, by GroupID.
func (s *Server) membersOf(cfg *partition.ClusterConfig) [][]partition.ReplicaConfig {
	out := make([][]partition.ReplicaConfig, s.top.Len())
	for _, g := range cfg.Groups {
		id, _ := s.top.Lookup(g.Name)
		out[id] = slices.Clone(g.Replicas)
	}
	return out
}

// groupReplicas returns the gRPC addresses of group g's replicas in the
// current epoch.
func (s *Server) groupReplicas(g partition.GroupID) []string {
	cfg := s.config()
	for _, gc := range cfg.Groups {
		if id, _ := s.top.Lookup(gc.Name); id == g {
			addrs := make([]string, len(gc.Replicas))
			for i, r := range gc.Replicas {
				addrs[i] = r.GRPC
			}
			return addrs
		}
	}
	return nil
}

// nextMembers applies the member change of req, if any, to the members of
// epoch cur, and checks the result: a clear error naming the problem, and
// nothing changed, for an unknown group, an id or an address in use, a
// member that is not one, the last member of a group.
func (s *Server) nextMembers(cur group.EpochConfig, mc *apipb.MemberChange) ([][]partition.ReplicaConfig, error) {
	base := s.withMembers(cur.Members)
	if mc == nil {
		return cur.Members, nil
	}
	members := s.membersOf(base)
	g, ok := s.top.Lookup(mc.GetGroup())
	if !ok {
		return nil, fmt.Errorf("server: member: unknown group %q (the groups: %s)", mc.GetGroup(), strings.Join(s.names(s.top.All()), ", "))
	}
	r := mc.GetReplica()
	if r.GetId() == "" {
		return nil, errors.New("server: member: no replica id")
	}
	at := func(id string) (partition.GroupID, int) {
		for h, rs := range members {
			if i := slices.IndexFunc(rs, func(x partition.ReplicaConfig) bool { return x.ID == id }); i >= 0 {
				return partition.GroupID(h), i
			}
		}
		return partition.NoGroup, -1
	}
	switch mc.GetOp() {
	case "add":
		if h, _ := at(r.GetId()); h != partition.NoGroup {
			return nil, fmt.Errorf("server: member add: id %q is in use: a member of group %s", r.GetId(), s.top.Name(h))
		}
		nr := partition.ReplicaConfig{ID: r.GetId(), Raft: r.GetRaft(), GRPC: r.GetGrpc(), Peer: r.GetPeer(), HTTP: r.GetHttp()}
		if nr.Raft == "" || nr.GRPC == "" {
			return nil, fmt.Errorf("server: member add: %s: a raft and a grpc address are required", nr.ID)
		}
		members[g] = append(members[g], nr)
		if len(members[g]) > group.MembersMax {
			return nil, fmt.Errorf("server: member add: group %s would have %d members, at most %d", s.top.Name(g), len(members[g]), group.MembersMax)
		}
	case "remove":
		h, i := at(r.GetId())
		switch {
		case h == partition.NoGroup:
			return nil, fmt.Errorf("server: member remove: %q is not a member of any group", r.GetId())
		case h != g:
			return nil, fmt.Errorf("server: member remove: %q is a member of group %s, not of %s", r.GetId(), s.top.Name(h), s.top.Name(g))
		case len(members[g]) == 1:
			return nil, fmt.Errorf("server: member remove: %q is the last member of group %s", r.GetId(), s.top.Name(g))
		}
		members[g] = slices.Delete(members[g], i, i+1)
	default:
		return nil, fmt.Errorf("server: member: operation %q, want add or remove", mc.GetOp())
	}
	// The configuration's own checks name the field: a bad name or
	// address, an address in use.
	next := s.withMembers(members)
	if err := protocol.Validate(next); err != nil {
		return nil, fmt.Errorf("server: member %s: %w", mc.GetOp(), err)
	}
	if err := group.CheckMembers(members, s.top.Len()); err != nil {
		return nil, fmt.Errorf("server: member %s: %w", mc.GetOp(), err)
	}
	return members, nil
}

// PromoteMember implements apipb.KVServer: the group's leader makes a
// learner a voter (raft's AddVoter).
func (v *service) PromoteMember(ctx context.Context, req *apipb.PromoteMemberRequest) (*apipb.PromoteMemberResponse, error) {
	s := v.s
	if err := s.authorizeAdmin(ctx, "PromoteMember", "change the cluster"); err != nil {
		return nil, err
	}
	if req.GetGroup() != s.group.Name {
		return nil, status.Errorf(codes.FailedPrecondition, "server: promote %s of group %s sent to replica %s/%s: send it to group %s",
			req.GetId(), req.GetGroup(), s.group.Name, s.cfg.NodeID, req.GetGroup())
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(s.cfg.WaitMax, WaitMaxDefault))
	defer cancel()
	err := s.replica.Promote(ctx, req.GetId())
	switch {
	case errors.Is(err, replication.ErrNotLearner):
		return nil, status.Errorf(codes.FailedPrecondition, "server: %s is not a learner of group %s: it votes already", req.GetId(), s.group.Name)
	case errors.Is(err, replication.ErrLearnerBehind):
		// Worth asking again: the learner may be catching up.
		return nil, status.Errorf(codes.Unavailable, "server: %s of group %s is not promoted: %v", req.GetId(), s.group.Name, err)
	case errors.Is(err, replication.ErrNotMember):
		return nil, status.Errorf(codes.FailedPrecondition, "server: %s is not a member of group %s's raft configuration (not added with flexkv member add, or its leader has not added it yet)", req.GetId(), s.group.Name)
	case err != nil:
		return nil, s.status(ctx, err)
	}
	return &apipb.PromoteMemberResponse{}, nil
}

// Members implements apipb.KVServer: the group's raft configuration as
// this replica knows it.
func (v *service) Members(ctx context.Context, _ *apipb.MembersRequest) (*apipb.MembersResponse, error) {
	s := v.s
	if err := s.authorizeAdmin(ctx, "Members", "read the members"); err != nil {
		return nil, err
	}
	ms, index, err := s.replica.RaftMembers()
	if err != nil {
		return nil, s.status(ctx, err)
	}
	resp := &apipb.MembersResponse{Group: s.group.Name, Index: index}
	for _, m := range ms {
		suffrage := "learner"
		if m.Voter {
			suffrage = "voter"
		}
		resp.Members = append(resp.Members, &apipb.RaftMember{Id: m.ID, Raft: m.RaftAddr, Suffrage: suffrage})
	}
	return resp, nil
}
