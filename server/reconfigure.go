package server

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/partition"
)

// Reconfigure implements apipb.KVServer (DESIGN 14): it proposes, at the
// group that takes the changes, the change that ends the epoch named (0:
// the group's current one) with the overlay and tree named (empty: the
// current ones), and returns the epoch it starts once the group took it.
func (v *service) Reconfigure(ctx context.Context, req *apipb.ReconfigureRequest) (*apipb.ReconfigureResponse, error) {
	s := v.s
	if mv := req.GetMove(); mv.GetComplete() {
		// Only the new owner's leader completes a move, once its copy is
		// in (moves.go).
		g, err := s.authorizeNode(ctx, "Reconfigure", "complete a partition move")
		if err != nil {
			return nil, err
		}
		if s.cfg.Node != nil && g != mv.GetTo() {
			return nil, status.Errorf(codes.PermissionDenied, "server: a move of %s completes at the request of group %s alone, once its copy is in", mv.GetPartition(), mv.GetTo())
		}
	} else if err := s.authorizeAdmin(ctx, "Reconfigure", "change the cluster"); err != nil {
		return nil, err
	}
	s.awaitEpoch(ctx, req.GetEpoch())
	if entry := s.proto.ChangeEntry(s.routeTop()); entry != s.self {
		// The epoch in the trailer tells a client whose view of the
		// cluster was older to look again.
		_ = grpc.SetTrailer(ctx, metadata.Pairs(apipb.EpochTrailer, strconv.FormatUint(s.replica.Epoch(), 10)))
		return nil, status.Errorf(codes.FailedPrecondition, "server: changes of the cluster enter at group %s under %s, not at %s: send it there",
			s.top.Name(entry), s.cfg.Cluster.Protocol, s.group.Name)
	}
	var cur group.EpochConfig
	s.replica.State(func(st *group.State) { cur = st.EpochConfig() })
	next, err := s.nextEpochConfig(cur, req)
	if err != nil {
		return nil, invalid(err)
	}
	if req.GetEpoch() != 0 && req.GetEpoch() < cur.Epoch {
		// The epoch named has ended, perhaps by this very change, sent
		// again by a client that does not know whether it ran: the
		// replica refuses it naming the epoch that followed, which such a
		// client takes as done. Checked against that epoch's members, a
		// member added would be refused as in use.
		next.Members = cur.Members
	} else if next.Members, err = s.nextMembers(cur, req.GetMember()); err != nil {
		return nil, invalid(err)
	}
	if err := s.nextMove(cur, &next, req.GetMove()); err != nil {
		return nil, invalid(err)
	}
	e := cmp.Or(req.GetEpoch(), cur.Epoch)
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(s.cfg.WaitMax, WaitMaxDefault))
	defer cancel()
	if err := s.replica.Reconfigure(ctx, e, next); err != nil {
		return nil, s.status(ctx, err)
	}
	return &apipb.ReconfigureResponse{Epoch: e + 1}, nil
}

// awaitEpoch waits, up to the server's bound, until this replica's group
// has started epoch e, when e is ahead of it: a client that saw another
// group deliver the change that starts e (each group delivers it in its
// own time, and each replica applies it at its own pace) names e here
// before this replica got to it. A group that does not start e within the
// bound goes on to refuse the change as not started.
func (s *Server) awaitEpoch(ctx context.Context, e uint64) {
	if e <= s.replica.Epoch() {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, cmp.Or(s.cfg.WaitMax, WaitMaxDefault))
	defer cancel()
	_ = s.replica.WaitEpoch(wctx, e)
}

// nextEpochConfig returns the configuration req asks for, from cur: the
// overlay and tree named, by group names, each group once; or cur's.
func (s *Server) nextEpochConfig(cur group.EpochConfig, req *apipb.ReconfigureRequest) (group.EpochConfig, error) {
	next := group.EpochConfig{Overlay: slices.Clone(cur.Overlay), Parent: slices.Clone(cur.Parent)}
	if names := req.GetOverlay(); len(names) > 0 {
		next.Overlay = next.Overlay[:0]
		var seen partition.GroupSet
		for _, name := range names {
			g, ok := s.top.Lookup(name)
			switch {
			case !ok:
				return group.EpochConfig{}, fmt.Errorf("server: overlay: unknown group %q", name)
			case seen.Has(g):
				return group.EpochConfig{}, fmt.Errorf("server: overlay: group %q listed twice", name)
			}
			seen = seen.Add(g)
			next.Overlay = append(next.Overlay, g)
		}
		if missing := s.top.All() &^ seen; !missing.Empty() {
			return group.EpochConfig{}, fmt.Errorf("server: overlay: missing %v: list every group once", s.names(missing))
		}
	}
	if edges := req.GetTree(); len(edges) > 0 {
		parent := make(map[string]string, len(edges))
		for _, e := range edges {
			if _, dup := parent[e.GetChild()]; dup {
				return group.EpochConfig{}, fmt.Errorf("server: tree: group %q has two parents", e.GetChild())
			}
			parent[e.GetChild()] = e.GetParent()
		}
		// partition checks that it is a tree over the groups.
		top, err := partition.NewTopology(partition.Spec{Groups: topGroups(s.top), Parent: parent})
		if err != nil {
			return group.EpochConfig{}, fmt.Errorf("server: tree: %w", err)
		}
		next.Parent = make([]partition.GroupID, top.Len())
		for g := range top.Len() {
			next.Parent[g] = top.Parent(partition.GroupID(g))
		}
	}
	return next, nil
}

// topGroups returns the groups of top, by rank.
func topGroups(top *partition.Topology) []partition.Group {
	out := make([]partition.Group, top.Len())
	for g := range top.Len() {
		out[g] = top.Group(partition.GroupID(g))
	}
	return out
}
