package server

import (
	"context"
	"strings"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/internal/buildinfo"
	"github.com/flexkv/flexkv/partition"
)

// Status answers `flexkv status` (DESIGN 7): this replica's raft state and
// indexes, its group's outbox, what its protocol core holds, its TLS
// identity, its configuration's fingerprint and the build it runs (a
// cluster half upgraded shows two). Every replica answers, leader or not:
// it reads local state only.
func (v *service) Status(_ context.Context, req *apipb.StatusRequest) (*apipb.StatusResponse, error) {
	resp := v.s.Status()
	if req.GetDestinations() {
		var dc group.DstCounts
		v.s.replica.State(func(st *group.State) { dc = st.DestinationCounts() })
		resp.Epoch = dc.Epoch
		resp.DestinationsOther = dc.Other
		for _, c := range dc.Sets {
			dc := &apipb.DestinationCount{Groups: v.s.names(c.Dst), Count: c.Count}
			if c.Home != partition.NoGroup {
				dc.Home = v.s.top.Name(c.Home)
			}
			resp.Destinations = append(resp.Destinations, dc)
		}
	}
	return resp, nil
}

// Status returns the replica's status (the Status RPC).
func (s *Server) Status() *apipb.StatusResponse {
	rs := s.replica.RaftStatus()
	bi := buildinfo.Read()
	resp := &apipb.StatusResponse{
		Group: s.group.Name, Replica: s.cfg.NodeID, Role: rs.Role.String(),
		Term: rs.Term, LastIndex: rs.LastIndex, CommitIndex: rs.CommitIndex, AppliedIndex: rs.AppliedIndex,
		Leader: rs.Leader, TlsIdentity: "insecure",
		Fingerprint: s.identity.Fingerprint, ClusterId: s.identity.ClusterID,
		Version: bi.Version, Revision: bi.ShortRevision(),
		Epoch: s.replica.Epoch(),
	}
	if n := s.cfg.Node; n != nil {
		resp.TlsIdentity = n.ID.String()
	}
	resp.MovesIn = s.movesInProto()
	stats := s.proto.Stats()
	s.replica.State(func(st *group.State) {
		nd := st.Node()
		for g := range s.top.Len() {
			if id := partition.GroupID(g); id != s.self {
				resp.Outbox += uint64(nd.OutboxLen(id))
			}
		}
		// The core's pending figures: FlexCast's messages received and
		// not delivered, Skeen's held in every state; the tree protocol
		// holds none.
		for _, r := range s.proto.Read(st.Core(), nil) {
			if strings.HasSuffix(stats[r.Stat].Name, "_pending") {
				resp.Pending += uint64(r.Value)
			}
		}
	})
	return resp
}
