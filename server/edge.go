package server

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/internal/rpcflow"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/replication/transport"
)

// Bounds on what the callers of a replica's two ports can make it hold,
// whatever they send (DESIGN 13, rpcflow.Edge): request bytes in flight,
// counted as they arrive, per connection and per port.
//
// The client API: a request is at most apiMessageBytesMax, gRPC's default,
// which clients met before there was a guard (the largest valid
// transaction encodes to about txn.PayloadMax, 512 KiB; a procedure call
// may name txn.KeysMax keys besides); its window, rpcflow.StreamWindow,
// holds one. A connection may hold apiConnBytesMax in flight, 8 of the
// largest requests being sent at once (its new calls are refused from half
// that); the port, apiBytesMax.
//
// The peer service: a peer (another group's leader) makes one call at a
// time to this group, with a batch of at most group.InboundBytesMax of
// frames; a connection may carry peerStreamsMax calls (a call that timed
// out, its retry, a health check) and hold peerConnCalls requests of the
// largest size in flight (its new calls are refused from one); the port,
// peerConnCalls requests per other group of the cluster: its leader's, and
// a call of the leader before it still arriving.
const (
	apiMessageBytesMax = 4 << 20
	apiConnBytesMax    = 32 << 20
	apiBytesMax        = 128 << 20
	peerStreamsMax     = 8
	peerConnCalls      = 2
)

// peerMessageBytesMax is the largest request of the peer service: a batch
// of group.InboundFramesMax frames and group.InboundBytesMax bytes.
func peerMessageBytesMax() int {
	return transport.ServerConfig{FramesMax: group.InboundFramesMax, BytesMax: group.InboundBytesMax}.RequestBytesMax()
}

// peerBytesMax is the peer port's bound in a cluster of groups groups.
func peerBytesMax(groups int) int64 {
	return int64(max(groups-1, 1)) * peerConnCalls * int64(rpcflow.WindowFor(peerMessageBytesMax()))
}

// EdgeBytesMax returns the request bytes in flight that a replica of
// cfg holds at most on its two ports, whatever its callers send: the
// memory its edge may take beyond its own.
func EdgeBytesMax(cfg *partition.ClusterConfig) int64 {
	n := int64(apiBytesMax)
	if len(cfg.Groups) > 1 {
		n += peerBytesMax(len(cfg.Groups))
	}
	return n
}

// edges returns the bounds of the client API and of the peer service of
// a replica in a cluster of groups groups.
func edges(groups int) (api, peer rpcflow.Edge) {
	api = rpcflow.Edge{
		Name: "client API", StreamsMax: streamsMax, MessageBytesMax: apiMessageBytesMax,
		StreamWindow: rpcflow.StreamWindow, ConnWindow: rpcflow.ConnWindow,
		ConnBytesMax: apiConnBytesMax, BytesMax: apiBytesMax,
	}
	window := rpcflow.WindowFor(peerMessageBytesMax())
	peer = rpcflow.Edge{
		Name: "peer", StreamsMax: peerStreamsMax, MessageBytesMax: peerMessageBytesMax(),
		StreamWindow: window, ConnWindow: peerConnCalls * window,
		ConnBytesMax: peerConnCalls * int64(window), BytesMax: peerBytesMax(groups),
	}
	return api, peer
}

// tapPeer refuses a call to the peer service, before its body is read,
// from a node whose group sends nothing to this replica: its own group
// (raft carries what the replicas of a group exchange) or a group outside
// the configuration. Which group the node may speak for is checked once
// the request names one (authorizePeer). Health checks pass.
func (s *Server) tapPeer(ctx context.Context, info *tap.Info) (context.Context, error) {
	if s.cfg.Node == nil || strings.HasPrefix(info.FullMethodName, "/"+healthpb.Health_ServiceDesc.ServiceName+"/") {
		return ctx, nil
	}
	p, ok := grpcpeer.FromContext(ctx)
	if !ok {
		return nil, status.Error(codes.PermissionDenied, "server: peer call without a peer")
	}
	tlsInfo, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil, status.Error(codes.PermissionDenied, "server: peer call not over TLS")
	}
	id, err := certs.PeerNode(tlsInfo.State)
	if err != nil {
		return nil, status.Errorf(codes.PermissionDenied, "server: peer call: %v", err)
	}
	if g, ok := s.top.Lookup(id.Group); ok && g != s.self {
		return ctx, nil
	}
	if s.refusalsLogged.first("tap " + id.String()) {
		s.log.Warn("peer calls refused: the node's group sends nothing here (logged once per node)", "peer", id.String(), "addr", p.Addr.String())
	}
	return nil, status.Errorf(codes.PermissionDenied, "server: node %s: group %q sends no frames to replica %s/%s", id, id.Group, s.group.Name, s.cfg.NodeID)
}
