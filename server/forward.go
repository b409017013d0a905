package server

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/internal/rpcflow"
	"github.com/flexkv/flexkv/partition"
)

// Any server answers any request (DESIGN 7): a replica that cannot serve a
// request forwards it, once, to the leader of the group that can. The
// forward is a call of the client API from this replica, authenticated by
// its node certificate, that names the user it calls for (apipb.UserHeader) and
// itself with its configuration's fingerprint (apipb.ForwardedByHeader). The
// receiver takes both headers from a node of the cluster only (DESIGN 13):
// a user that sends them is refused, so that no user passes for another. A
// forwarded request is never forwarded again: a receiver that cannot serve
// it either routes by another configuration than the sender's, and the
// loop is cut there, after one hop.

// caller is whom a client API call is made for.
type caller struct {
	// user is the CN of the caller's client certificate, the user a node
	// calls for, or "-" without TLS and without a apipb.UserHeader.
	user string
	// via is the replica that forwarded the call ("GROUP/REPLICA"), and
	// viaFingerprint its configuration's fingerprint; empty for a call
	// that was not forwarded.
	via, viaFingerprint string
	// direct: the caller routes itself (apipb.DirectHeader).
	direct bool
}

type callerKey struct{}

// callerOf returns the caller identify found for the call of ctx.
func callerOf(ctx context.Context) caller {
	if c, ok := ctx.Value(callerKey{}).(caller); ok {
		return c
	}
	return caller{user: "-"}
}

// identify returns ctx with the caller of its client API call, or
// PermissionDenied when the call may not say whom it is made for.
func (s *Server) identify(ctx context.Context) (context.Context, error) {
	if _, ok := ctx.Value(callerKey{}).(caller); ok {
		// A call of this replica's HTTP gateway, in process (inproc.go):
		// its caller is the HTTP request's client certificate's user.
		return ctx, nil
	}
	// Three lookups, not FromIncomingContext: that copies every header,
	// at every call.
	users := metadata.ValueFromIncomingContext(ctx, apipb.UserHeader)
	via := metadata.ValueFromIncomingContext(ctx, apipb.ForwardedByHeader)
	c := caller{user: "-", direct: slices.Contains(metadata.ValueFromIncomingContext(ctx, apipb.DirectHeader), "1")}
	if len(users) > 1 || len(via) > 1 {
		return nil, status.Errorf(codes.PermissionDenied, "server: %d %s and %d %s headers, want at most one of each", len(users), apipb.UserHeader, len(via), apipb.ForwardedByHeader)
	}
	node := ""
	if s.cfg.Node != nil {
		var err error
		if c.user, node, err = s.tlsCaller(ctx); err != nil {
			return nil, err
		}
		if node == "" {
			if len(users)+len(via) > 0 {
				return nil, status.Errorf(codes.PermissionDenied, "server: user %s sent the %s or %s header: only a node of the cluster calls for another user", c.user, apipb.UserHeader, apipb.ForwardedByHeader)
			}
			return context.WithValue(ctx, callerKey{}, c), nil
		}
		if len(users) == 0 {
			return nil, status.Errorf(codes.PermissionDenied, "server: node %s calls the client API without naming the user it calls for (header %s)", node, apipb.UserHeader)
		}
	}
	// A node's headers, or, without TLS, anyone's: nothing is
	// authenticated then.
	if len(users) == 1 {
		if err := certs.CheckName("user", users[0]); err != nil {
			return nil, status.Errorf(codes.PermissionDenied, "server: header %s: %v", apipb.UserHeader, err)
		}
		c.user = users[0]
	}
	if len(via) == 1 {
		who, fp, ok := strings.Cut(via[0], " ")
		if !ok || fp == "" || (node != "" && who != node) {
			return nil, status.Errorf(codes.PermissionDenied, "server: header %s is %q, want \"GROUP/REPLICA FINGERPRINT\" of the calling node (%s)", apipb.ForwardedByHeader, via[0], cmpOr(node, "insecure"))
		}
		c.via, c.viaFingerprint = who, fp
	}
	return context.WithValue(ctx, callerKey{}, c), nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// tlsCaller returns the user of a TLS call of the client API, or, for a
// call from a node of the cluster, the node ("GROUP/REPLICA").
func (s *Server) tlsCaller(ctx context.Context) (user, node string, err error) {
	p, ok := grpcpeer.FromContext(ctx)
	if !ok {
		return "", "", status.Error(codes.PermissionDenied, "server: call without a peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return "", "", status.Error(codes.PermissionDenied, "server: call not over TLS")
	}
	user, uerr := certs.PeerUser(info.State)
	if uerr == nil {
		return user, "", nil
	}
	id, err := certs.PeerNode(info.State)
	if err != nil {
		return "", "", status.Errorf(codes.PermissionDenied, "server: %v", uerr)
	}
	if _, ok := s.top.Lookup(id.Group); !ok {
		return "", "", status.Errorf(codes.PermissionDenied, "server: node %s: group %q is not in the configuration", id, id.Group)
	}
	return "-", id.String(), nil
}

// mustForward reports whether a request that target's leader (or, without
// leader, any replica of target) serves is to be forwarded there; it
// returns the FailedPrecondition that cuts a loop for a forwarded request
// this replica would forward again.
func (s *Server) mustForward(ctx context.Context, target partition.GroupID, leader bool) (bool, error) {
	if target == s.self && (!leader || s.replica.IsLeader()) {
		return false, nil
	}
	c := callerOf(ctx)
	switch {
	case c.direct:
		return false, nil
	case c.via != "" && target != s.self:
		return false, status.Errorf(codes.FailedPrecondition,
			"server: %s: replica %s forwarded a request for group %s to replica %s/%s, whose configuration sends it to group %s: the two run different configurations (fingerprint %s there, %s here, at epoch %d here); a forwarded request is not forwarded again, and this one did not run",
			apipb.LoopCutText, c.via, s.group.Name, s.group.Name, s.cfg.NodeID, s.top.Name(target), c.viaFingerprint, s.identity.Fingerprint, s.replica.Epoch())
	case c.via != "":
		// This group's: the sender follows this replica's leader hint.
		return false, nil
	case target == s.self && s.replica.Leader() == "":
		return false, nil // no leader to forward to: answered Unavailable
	}
	return true, nil
}

// forwarder makes the calls a replica forwards to other replicas' client
// API: over one connection per replica of the configuration (a bounded
// set), with this replica's node certificate, to the leader it last found
// for each group.
type forwarder struct {
	s        *Server
	dialOpts []grpc.DialOption

	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn
	leaders []string
	closed  bool
}

func newForwarder(s *Server) *forwarder {
	creds := insecure.NewCredentials()
	if n := s.cfg.Node; n != nil {
		creds = credentials.NewTLS(certs.NodeConfig(n))
	}
	f := &forwarder{
		s: s, conns: make(map[string]*grpc.ClientConn), leaders: make([]string, s.top.Len()),
		dialOpts: append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, rpcflow.DialOptions()...),
	}
	return f
}

// conn returns the connection to addr, made on first use.
func (f *forwarder) conn(addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, status.Error(codes.Unavailable, "server: shutting down")
	}
	if cc, ok := f.conns[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, f.dialOpts...)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "server: connect to %s: %v", addr, err)
	}
	f.conns[addr] = cc
	return cc, nil
}

// first returns the replica of group g to try first: the leader last
// found, this replica's leader for its own group, else the first replica.
func (f *forwarder) first(g partition.GroupID) string {
	f.mu.Lock()
	addr := f.leaders[g]
	f.mu.Unlock()
	if g == f.s.self {
		if l := f.s.replica.Leader(); l != "" {
			return l
		}
	}
	if addr != "" {
		return addr
	}
	return f.s.groupReplicas(g)[0]
}

func (f *forwarder) close() error {
	f.mu.Lock()
	f.closed = true
	conns := f.conns
	f.conns = nil
	f.mu.Unlock()
	var errs []error
	for _, addr := range slices.Sorted(maps.Keys(conns)) {
		errs = append(errs, conns[addr].Close())
	}
	return errors.Join(errs...)
}

// forward calls rpc at the leader of group g for the caller of ctx, within
// ctx's deadline. A replica of g that is not its leader answers Unavailable
// with its leader: the call goes there, still one hop from this replica,
// when that replica proposed nothing (or read names a read, which may be
// asked again). Its answer is the caller's: the code kept, the message
// saying where the request went.
func (s *Server) forward(ctx context.Context, g partition.GroupID, read bool, rpc func(ctx context.Context, kv apipb.KVClient, opts ...grpc.CallOption) error) error {
	f := s.fwd
	c := callerOf(ctx)
	out := metadata.NewOutgoingContext(ctx, metadata.Pairs(apipb.UserHeader, c.user,
		apipb.ForwardedByHeader, s.group.Name+"/"+s.cfg.NodeID+" "+s.identity.Fingerprint))
	s.forwarded.Add(1)
	replicas := s.groupReplicas(g)
	addr := f.first(g)
	var err error
	notRun := false
	for range len(replicas) + 1 {
		var cc *grpc.ClientConn
		if cc, err = f.conn(addr); err != nil {
			return err
		}
		var trailer metadata.MD
		err = rpc(out, apipb.NewKVClient(cc), grpc.Trailer(&trailer))
		if err == nil {
			f.mu.Lock()
			f.leaders[g] = addr
			f.mu.Unlock()
			return nil
		}
		notRun = len(trailer.Get(apipb.NotRunTrailer)) > 0
		hint := ""
		if v := trailer.Get(apipb.LeaderTrailer); len(v) > 0 {
			hint = v[0]
		}
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil || !(notRun || read) {
			break
		}
		if hint != "" && hint != addr && slices.Contains(replicas, hint) {
			addr = hint
		} else {
			addr = replicas[(slices.Index(replicas, addr)+1)%len(replicas)]
		}
	}
	if notRun {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(apipb.NotRunTrailer, "1"))
	}
	st := status.Convert(err)
	return status.Errorf(st.Code(), "server: forwarded by %s/%s to group %s at %s: %s", s.group.Name, s.cfg.NodeID, s.top.Name(g), addr, st.Message())
}
