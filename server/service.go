package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api"
	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/executor"
	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/replication"
	"github.com/flexkv/flexkv/txn"
)

// service implements apipb.KVServer on a Server.
type service struct {
	apipb.UnimplementedKVServer
	s *Server
}

// request is a validated request, ready to be proposed.
type request struct {
	id      multicast.MsgID
	dst     partition.GroupSet
	payload []byte
	epoch   uint64 // the client's (DESIGN 14); 0: the group's
	// home is the group of the client's region (TxnRequest.origin_group),
	// which the entry group counts with the destinations; NoGroup: none.
	home partition.GroupID
	// txn or call is what payload encodes, for a read at the leader
	// (reads.go).
	txn  *txn.Txn
	call *txn.Call
	// pm is the partition map dst was computed with (nil: not by one).
	pm *partition.PartitionMap
}

// epochRetries bounds the proposals again of a request that names no epoch
// and meets changes of the epoch (run).
const epochRetries = 8

func invalid(err error) error { return status.Error(codes.InvalidArgument, err.Error()) }

// Every transaction and call that txn validates fits in a message: this
// fails to build if the bounds ever cross.
const _ = uint(group.MessagePayloadMax - txn.PayloadMax)

// requestID returns the transaction id of a request: the client's, whose
// client_id is a session (the group refuses one it does not know), or an
// anonymous one (freshID) when it names none.
func (s *Server) requestID(client, seq uint64) (multicast.MsgID, error) {
	switch {
	case client == 0 && seq == 0:
		return freshID(), nil
	case client == 0:
		return multicast.MsgID{}, invalid(fmt.Errorf("server: seq %d without a client_id", seq))
	case seq == 0:
		return multicast.MsgID{}, invalid(fmt.Errorf("server: client_id %d without a seq (sequence numbers start at 1)", client))
	case client&group.AnonymousBit != 0:
		return multicast.MsgID{}, invalid(fmt.Errorf("server: client_id %d is reserved (2^63 and above: anonymous requests; open a session)", client))
	}
	return multicast.MsgID{Client: client, Seq: seq}, nil
}

// prepareTxn validates t and routes it; home names the group that serves a
// transaction reading only replicated keys ("" = this one).
func (s *Server) prepareTxn(id multicast.MsgID, t *txn.Txn, home string) (request, error) {
	h := s.self
	if home != "" {
		var ok bool
		if h, ok = s.top.Lookup(home); !ok {
			return request{}, invalid(fmt.Errorf("server: home_group %q is not a group (groups: %v)", home, s.top.Names()))
		}
	}
	pm := s.partitions()
	dst, err := t.Destinations(pm, s.top, h)
	if err != nil {
		return request{}, invalid(err)
	}
	return request{id: id, dst: dst, payload: txn.AppendTxnPayload(nil, t), home: partition.NoGroup, txn: t, pm: pm}, nil
}

// prepareCall validates a stored procedure call and routes it.
func (s *Server) prepareCall(id multicast.MsgID, c *apipb.Call) (request, error) {
	if s.cfg.Procedures == nil {
		return request{}, invalid(fmt.Errorf("server: unknown procedure %q: this server has no stored procedures", c.GetName()))
	}
	call := txn.Call{Name: c.GetName(), Args: c.GetArgs()}
	pm := s.partitions()
	dst, err := s.cfg.Procedures.Destinations(call, pm, s.top, s.self)
	if err != nil {
		return request{}, invalid(err)
	}
	if len(c.GetKeys()) > 0 {
		// The client routed by the keys it named: they must lead to the
		// groups the procedure touches, or its answers would not fit.
		named, err := pm.Destinations(c.GetKeys())
		if err != nil {
			return request{}, invalid(fmt.Errorf("server: call %q: keys: %w", call.Name, err))
		}
		if !named.Empty() && named != dst {
			return request{}, invalid(fmt.Errorf("server: call %q: its keys lead to groups %s, but the procedure touches %s",
				call.Name, strings.Join(s.names(named), ", "), strings.Join(s.names(dst), ", ")))
		}
	}
	return request{id: id, dst: dst, payload: txn.AppendCallPayload(nil, call), home: partition.NoGroup, call: &call, pm: pm}, nil
}

// Bounds at the edge (DESIGN 13), defaults of the Config fields.
const (
	// WaitMaxDefault is Config.WaitMax when unset: longer than a
	// transaction takes across the WAN, even behind a leader election, so
	// that only a call that cannot complete soon meets it.
	WaitMaxDefault = 30 * time.Second
	// ScanBytesMaxDefault is Config.ScanBytesMax when unset: a quarter of
	// gRPC's default receive limit (4 MiB), so that a page and its framing
	// always fit.
	ScanBytesMaxDefault = 1 << 20
	// ScanBytesMaxMax bounds Config.ScanBytesMax: a page must fit a
	// client's default receive limit (4 MiB) with its framing.
	ScanBytesMaxMax = 3 << 20
)

// checkBounds checks the bounds of cfg.
func checkBounds(cfg Config) error {
	switch {
	case cfg.WaitMax < 0:
		return fmt.Errorf("server: wait bound %s, want > 0 (0: %s)", cfg.WaitMax, WaitMaxDefault)
	case cfg.ScanBytesMax < 0 || cfg.ScanBytesMax > ScanBytesMaxMax:
		return fmt.Errorf("server: scan bytes bound %d, want 1..%d (0: %d)", cfg.ScanBytesMax, ScanBytesMaxMax, ScanBytesMaxDefault)
	case cfg.SessionsMax < 0:
		return fmt.Errorf("server: sessions bound %d, want > 0 (0: %d)", cfg.SessionsMax, group.SessionsMaxDefault)
	case cfg.SessionTicks < 0:
		return fmt.Errorf("server: session lifetime %d ticks, want > 0 (0: %d)", cfg.SessionTicks, group.SessionTicksDefault)
	}
	return nil
}

// errWaitBound is the cause of a context that ended at Config.WaitMax.
var errWaitBound = errors.New("server: wait bound reached")

// bounded returns ctx bounded by Config.WaitMax for the wait of id; status
// answers its end with a message that says so.
func (s *Server) bounded(ctx context.Context, id multicast.MsgID) (context.Context, context.CancelFunc) {
	d := cmp.Or(s.cfg.WaitMax, WaitMaxDefault)
	return context.WithTimeoutCause(ctx, d, &waitBoundError{id: id, d: d, group: s.group.Name})
}

// waitBoundError is the cause of a wait that reached Config.WaitMax; its
// message is made only when read (most calls end in time).
type waitBoundError struct {
	id    multicast.MsgID
	d     time.Duration
	group string
}

func (e *waitBoundError) Error() string {
	return fmt.Sprintf("server: %s: no result within %s at group %s, this server's bound on a wait; it may still complete: ask again with the same id (%v)",
		e.id, e.d, e.group, errWaitBound)
}

func (e *waitBoundError) Unwrap() error { return errWaitBound }

// run proposes r at this group and, when the group is a destination, waits
// for its piece to be executed here, up to Config.WaitMax.
func (s *Server) run(ctx context.Context, r request) (*apipb.TxnResponse, error) {
	ctx, cancel := s.bounded(ctx, r.id)
	defer cancel()
	// Refused before a log entry is spent on it: the core would refuse it
	// at apply time (multicast.ErrNotEntry). A request routed with another
	// epoch than the group's goes on, for the node to answer for its
	// epoch (another epoch may rank the groups otherwise).
	if at := s.proto.Entries(s.routeTop(), r.dst); !at.Has(s.self) && s.sameEpoch(r.epoch) {
		want := s.top.Name(at.Min())
		if at.Len() > 1 { // Skeen: any destination
			want = "one of its destinations, " + strings.Join(s.names(at), ", ")
		}
		return nil, status.Errorf(codes.FailedPrecondition, "server: group %s is not the entry group of %s under %s: send it to %s",
			s.group.Name, r.id, s.cfg.Cluster.Protocol, want)
	}
	if len(r.payload) > group.MessagePayloadMax {
		return nil, invalid(fmt.Errorf("server: %s encodes to %d bytes, more than a message may carry (%d)", r.id, len(r.payload), group.MessagePayloadMax))
	}
	m := multicast.Message{ID: r.id, Dst: r.dst, Payload: r.payload}
	var wait waiter
	if r.dst.Has(s.self) {
		var forget func()
		wait, forget = s.waiters.add(r.id)
		defer forget()
		defer s.counts.proposals.add(r.id)()
	}
	// A request that names no epoch takes the group's as this replica last
	// applied it: a change applied meanwhile refuses it, and it ran nowhere,
	// so it goes again, with the same id, at the new epoch (DESIGN 14). It
	// is checked against the moves of the epoch it is proposed with
	// (checkMoving), named before the check: proposed at another epoch, it
	// would be refused, not taken unchecked.
	named := r.epoch != 0
	var err error
	for tries := 0; ; tries++ {
		if !named {
			r.epoch = s.replica.Epoch()
			if cur := s.epoch(); cur.epoch == r.epoch && r.pm != nil && !cur.pm.SameOwners(r.pm) {
				// Routed by the owners of an epoch that ended since: it
				// ran nowhere; the client routes it again.
				return nil, status.Errorf(codes.FailedPrecondition, "server: %s: routed by the owners of an earlier epoch, the group is at %d (%s: partitions moved): route it again",
					r.id, r.epoch, apipb.EpochChangedText)
			}
		}
		if err = s.checkMoving(ctx, &r); err != nil {
			return nil, err
		}
		err = s.replica.MulticastFrom(ctx, m, r.epoch, r.home)
		if named || !errors.Is(err, rawnode.ErrEpochChanged) || tries >= epochRetries {
			break
		}
	}
	fresh := err == nil
	switch {
	case fresh, errors.Is(err, group.ErrDuplicate):
		// A duplicate is a retry of a request the group accepted before:
		// it is answered with the first result.
	default:
		return nil, s.status(ctx, err)
	}
	resp := &apipb.TxnResponse{Destinations: s.names(r.dst)}
	if wait == nil {
		return resp, nil
	}
	piece, err := s.result(ctx, r.id, wait, fresh)
	if err != nil {
		return nil, err
	}
	resp.Piece, resp.Executed = piece, true
	return resp, nil
}

// result waits until this replica executed its piece of id, and returns it:
// the one wait was handed when the execution came while it waited, else
// the one the store keeps. fresh tells that id was proposed by this call,
// after its wait was registered: its execution here comes after, and the
// wait is handed its result, so the store is not read first.
func (s *Server) result(ctx context.Context, id multicast.MsgID, wait waiter, fresh bool) (*apipb.PieceResult, error) {
	// The store is checked on every tick too: a result can arrive without
	// an execution here (a snapshot installed from the leader). A replica
	// that has had no leader for a while cannot make progress (it is cut
	// off, or its group lost its quorum): it says so, and the client asks
	// another replica.
	var tick *time.Ticker // made at the first miss: most answers are there at once
	leaderless := time.Duration(0)
	for {
		select {
		case res := <-wait:
			return api.PieceResultToProto(id, s.group.Name, &res), nil
		default:
		}
		if !fresh {
			res, found, err := s.exec.Result(id)
			switch {
			case errors.Is(err, executor.ErrAcknowledged):
				// Its session sent a later request here since: the client
				// said it had this result, which is gone for good. The
				// error's text holds apipb.ResultAcknowledgedText.
				return nil, status.Errorf(codes.FailedPrecondition, "server: group %s: %v", s.group.Name, err)
			case err != nil:
				return nil, status.Error(codes.Unavailable, err.Error())
			case found:
				return api.PieceResultToProto(id, s.group.Name, &res), nil
			}
		}
		fresh = false // every tick reads the store
		if tick == nil {
			tick = time.NewTicker(resultRecheck)
			defer tick.Stop()
		}
		select {
		case res := <-wait:
			return api.PieceResultToProto(id, s.group.Name, &res), nil
		case <-tick.C:
			if s.replica.Leader() != "" {
				leaderless = 0
				continue
			}
			if leaderless += resultRecheck; leaderless >= s.leaderlessMax() {
				return nil, status.Errorf(codes.Unavailable, "server: replica %s of group %s has had no leader for %s: ask another replica", s.cfg.NodeID, s.group.Name, leaderless)
			}
		case <-s.stop:
			return nil, status.Error(codes.Unavailable, "server: shutting down")
		case <-ctx.Done():
			return nil, s.status(ctx, ctx.Err())
		}
	}
}

// resultRecheck is how often a wait for a result looks at the store and at
// the group's leadership.
const resultRecheck = 250 * time.Millisecond

// leaderlessMax is how long a replica without a leader keeps a client
// waiting: a few election timeouts, time for an election to succeed.
func (s *Server) leaderlessMax() time.Duration {
	et := s.cfg.Replication.ElectionTimeout
	if et <= 0 {
		et = 300 * time.Millisecond
	}
	return max(4*et, time.Second)
}

func (s *Server) names(dst partition.GroupSet) []string {
	var out []string
	for _, g := range dst.Slice() {
		out = append(out, s.top.Name(g))
	}
	return out
}

// status turns err into a gRPC status (DESIGN 7).
func (s *Server) status(ctx context.Context, err error) error {
	var nl *replication.NotLeaderError
	if ctx.Err() != nil {
		if cause := context.Cause(ctx); errors.Is(cause, errWaitBound) {
			// The server's bound, not the caller's deadline: the caller
			// still waits, and is told why the call ended.
			return status.Error(codes.DeadlineExceeded, cause.Error())
		}
	}
	var ee *rawnode.EpochError
	switch {
	case errors.As(err, &ee) && !errors.Is(err, rawnode.ErrEpochAhead):
		// DESIGN 14, the stop-sign: nothing ran.
		_ = grpc.SetTrailer(ctx, metadata.Pairs(apipb.EpochTrailer, strconv.FormatUint(ee.Epoch, 10)))
		return status.Error(codes.FailedPrecondition, fmt.Sprintf("server: group %s: %v", s.group.Name, err))
	case errors.Is(err, group.ErrChangeRefused):
		return status.Error(codes.FailedPrecondition, fmt.Sprintf("server: group %s: %v", s.group.Name, err))
	case errors.As(err, &nl):
		md := metadata.Pairs(apipb.LeaderTrailer, nl.Leader)
		if !nl.MayHaveRun {
			md.Set(apipb.NotRunTrailer, "1")
		}
		_ = grpc.SetTrailer(ctx, md)
		return status.Error(codes.Unavailable, fmt.Sprintf("server: group %s: %v", s.group.Name, err))
	case errors.Is(err, group.ErrSessionExpired):
		return status.Error(codes.FailedPrecondition, fmt.Sprintf("server: group %s: %v", s.group.Name, err))
	case errors.Is(err, group.ErrSessionsFull):
		return status.Error(codes.ResourceExhausted, fmt.Sprintf("server: group %s: %v", s.group.Name, err))
	case errors.Is(err, multicast.ErrBusy):
		return status.Error(codes.ResourceExhausted, s.busyMessage(err))
	case errors.Is(err, multicast.ErrNotEntry):
		return status.Error(codes.FailedPrecondition, fmt.Sprintf("server: group %s is not the entry group of this transaction under %s: %v", s.group.Name, s.cfg.Cluster.Protocol, err))
	case errors.Is(err, multicast.ErrInvalid), errors.Is(err, txn.ErrInvalid), errors.Is(err, kv.ErrInvalid):
		return invalid(err)
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, replication.ErrShutdown):
		return status.Error(codes.Unavailable, "server: shutting down")
	}
	return status.Error(codes.Unavailable, err.Error())
}

// Txn implements apipb.KVServer.
func (v *service) Txn(ctx context.Context, req *apipb.TxnRequest) (*apipb.TxnResponse, error) {
	s := v.s
	id, err := s.requestID(req.GetClientId(), req.GetSeq())
	if err != nil {
		return nil, err
	}
	var r request
	switch {
	case req.GetTxn() != nil:
		t, err := api.TxnFromProto(req.GetTxn())
		if err != nil {
			return nil, invalid(err)
		}
		r, err = s.prepareTxn(id, t, req.GetHomeGroup())
		if err != nil {
			return nil, err
		}
	case req.GetCall() != nil:
		r, err = s.prepareCall(id, req.GetCall())
		if err != nil {
			return nil, err
		}
	default:
		return nil, invalid(errors.New("server: the request has neither a txn nor a call"))
	}
	if err := s.checkDestinations(ctx, id, req.GetEpoch(), req.GetDestinationGroups(), r.dst); err != nil {
		return nil, err
	}
	r.epoch = req.GetEpoch()
	r.home = partition.NoGroup
	if g, ok := s.top.Lookup(req.GetOriginGroup()); ok {
		r.home = g
	}
	target := s.self
	if at := s.proto.Entries(s.routeTop(), r.dst); !at.Has(s.self) && s.sameEpoch(r.epoch) {
		target = at.Min()
	}
	if fwd, err := s.mustForward(ctx, target, true); fwd || err != nil {
		if err != nil {
			return nil, err
		}
		return forwardTo(ctx, s, target, false, req, apipb.KVClient.Txn)
	}
	if s.readOnly(&r) {
		// DESIGN 6.5: at the leader after a read barrier, not through
		// the log.
		resp, err := s.readAtLeader(ctx, &r)
		if !errors.Is(err, errReadThroughLog) {
			return resp, err
		}
	}
	return s.run(ctx, r)
}

// forwardTo forwards req to the leader of group g with call, one of
// apipb.KVClient's methods (forward.go).
func forwardTo[Req, Resp any](ctx context.Context, s *Server, g partition.GroupID, read bool, req Req,
	call func(apipb.KVClient, context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	var resp Resp
	err := s.forward(ctx, g, read, func(ctx context.Context, kv apipb.KVClient, opts ...grpc.CallOption) error {
		var err error
		resp, err = call(kv, ctx, req, opts...)
		return err
	})
	return resp, err
}

// routeKey returns the group that serves a request for key (this one for
// a replicated key, and for a key in no partition, which it refuses), and
// whether this replica forwards the request there (mustForward).
func (s *Server) routeKey(ctx context.Context, key []byte, leader bool) (partition.GroupID, bool, error) {
	target := s.self
	if owner, replicated, err := s.partitions().Owner(key); err == nil && !replicated {
		target = owner
	}
	fwd, err := s.mustForward(ctx, target, leader)
	return target, fwd, err
}

// routeGroup returns the group a request names (this one when it names
// none), and whether this replica forwards the request there; a direct
// caller that names another group is refused.
func (s *Server) routeGroup(ctx context.Context, what, name string, leader bool) (partition.GroupID, bool, error) {
	target := s.self
	if name != "" {
		var ok bool
		if target, ok = s.top.Lookup(name); !ok {
			return 0, false, invalid(fmt.Errorf("server: %s: group %q is not a group (groups: %v)", what, name, s.top.Names()))
		}
	}
	fwd, err := s.mustForward(ctx, target, leader)
	if err == nil && !fwd && target != s.self {
		err = status.Errorf(codes.FailedPrecondition, "server: %s for group %s sent to replica %s/%s of group %s: send it there", what, name, s.group.Name, s.cfg.NodeID, s.group.Name)
	}
	return target, fwd, err
}

// Await implements apipb.KVServer.
func (v *service) Await(ctx context.Context, req *apipb.AwaitRequest) (*apipb.AwaitResponse, error) {
	s := v.s
	id, err := awaitID(req)
	if err != nil {
		return nil, err
	}
	target, fwd, err := s.routeGroup(ctx, "await", req.GetGroup(), false)
	switch {
	case err != nil:
		return nil, err
	case fwd:
		return forwardTo(ctx, s, target, true, req, apipb.KVClient.Await)
	}
	ctx, cancel := s.bounded(ctx, id)
	defer cancel()
	wait, forget := s.waiters.add(id)
	defer forget()
	if !s.replica.IsLeader() {
		// A follower applies an entry after its leader, up to a raft
		// round later (it learns the commit from the next append): a
		// result it has is answered at once, one it lacks is the
		// leader's to answer, when there is one.
		res, found, err := s.exec.Result(id)
		switch {
		case err == nil && found:
			return &apipb.AwaitResponse{Piece: api.PieceResultToProto(id, s.group.Name, &res)}, nil
		case err == nil:
			if fwd, ferr := s.mustForward(ctx, s.self, true); fwd && ferr == nil {
				return forwardTo(ctx, s, s.self, true, req, apipb.KVClient.Await)
			}
			if leader := s.replica.Leader(); leader != "" {
				return nil, s.status(ctx, &replication.NotLeaderError{Leader: leader})
			}
		}
		// An error (an acknowledged result) is answered below, for good.
	}
	piece, err := s.result(ctx, id, wait, false)
	if err != nil {
		return nil, err
	}
	return &apipb.AwaitResponse{Piece: piece}, nil
}

// awaitID returns the transaction an Await names: by its numbers
// (client_id, seq), or, when neither is set, by the deprecated string id
// that older clients send.
func awaitID(req *apipb.AwaitRequest) (multicast.MsgID, error) {
	id := multicast.MsgID{Client: req.GetClientId(), Seq: req.GetSeq()}
	if id == (multicast.MsgID{}) {
		spelt := req.GetId() //nolint:staticcheck // the deprecated form, still accepted
		if spelt == "" {
			return id, invalid(errors.New("server: await: no transaction id: set client_id and seq"))
		}
		parsed, err := multicast.ParseMsgID(spelt)
		if err != nil || parsed.IsFlush() {
			return id, invalid(fmt.Errorf("server: await: bad transaction id %q (want c<client_id>.<seq>)", spelt))
		}
		return parsed, nil
	}
	if id.Client == 0 || id.Seq == 0 || id.IsFlush() {
		return id, invalid(fmt.Errorf("server: await: transaction id (client_id %d, seq %d) names no transaction: both are set, and seq starts at 1", id.Client, id.Seq))
	}
	return id, nil
}

// checkDestinations refuses a request whose client computed destinations
// named, by number, other than dst, the ones this server computed: the two
// run different configurations (topology, partition map), and the client
// would await its answers at the wrong groups (DESIGN 1: groups cross the
// wire as numbers checked against the topology). A request that names none
// is not checked.
func (s *Server) checkDestinations(ctx context.Context, id multicast.MsgID, epoch uint64, named []uint32, dst partition.GroupSet) error {
	if len(named) == 0 {
		return nil
	}
	var theirs partition.GroupSet
	for i, g := range named {
		if g >= uint32(s.top.Len()) {
			return invalid(fmt.Errorf("server: %s: destination_groups[%d] is %d, not a group (the topology has %d)", id, i, g, s.top.Len()))
		}
		theirs = theirs.Add(partition.GroupID(g))
	}
	if theirs == dst && len(named) == dst.Len() {
		return nil
	}
	if epoch != 0 && s.replica != nil && epoch != s.replica.Epoch() {
		cur := s.replica.Epoch()
		// Routed with another epoch's owners (a partition moved, DESIGN
		// 14): a client behind learns the epoch and routes again; one
		// ahead of this replica waits for it.
		if epoch > cur {
			return status.Errorf(codes.ResourceExhausted, "server: %s: routed with epoch %d, replica %s is at %d: busy, retry", id, epoch, s.cfg.NodeID, cur)
		}
		_ = grpc.SetTrailer(ctx, metadata.Pairs(apipb.EpochTrailer, strconv.FormatUint(cur, 10)))
		return status.Errorf(codes.FailedPrecondition, "server: %s: %s: routed with epoch %d, the cluster is at epoch %d, whose partition owners differ: route it again",
			id, apipb.EpochChangedText, epoch, cur)
	}
	return status.Errorf(codes.FailedPrecondition, "server: %s: %s: the client routes it to groups %v (%s), group %s to %v (%s): the client's configuration is not the server's; fetch the topology again",
		id, apipb.DestinationsDifferText, named, strings.Join(s.names(theirs), ", "), s.group.Name, dst.Slice(), strings.Join(s.names(dst), ", "))
}

// single runs a one-operation transaction through the log of the key's
// group, and returns the operation's result.
func (s *Server) single(ctx context.Context, client, seq uint64, op txn.Op) (txn.OpResult, error) {
	id, err := s.requestID(client, seq)
	if err != nil {
		return txn.OpResult{}, err
	}
	t := &txn.Txn{Then: []txn.Op{op}}
	r, err := s.prepareTxn(id, t, "")
	if err != nil {
		return txn.OpResult{}, err
	}
	if !r.dst.Has(s.self) {
		return txn.OpResult{}, s.notOwner(op.Key, r.dst)
	}
	if r.dst.Len() > 1 {
		// A write to a replicated key goes to every group, and returns
		// when all have applied it: a Txn, whose answers the client
		// collects from each (the Go client does).
		return txn.OpResult{}, status.Errorf(codes.FailedPrecondition, "server: %s of %q writes a replicated key, held by every group: send it as a Txn and await every group", op.Kind, op.Key)
	}
	resp, err := s.run(ctx, r)
	if err != nil {
		return txn.OpResult{}, err
	}
	p := resp.GetPiece()
	if p.GetAborted() != "" {
		return txn.OpResult{}, status.Error(codes.Aborted, p.GetAborted())
	}
	if p.GetTruncated() {
		return txn.OpResult{}, status.Errorf(codes.OutOfRange, "server: %s: the result is larger than a stored result may be; read less at a time (a smaller scan limit)", id)
	}
	if len(p.GetResults()) != 1 {
		return txn.OpResult{}, status.Errorf(codes.Internal, "server: %s: %d results for one operation", id, len(p.GetResults()))
	}
	return api.ResultFromProto(p.GetResults()[0])
}

// notOwner answers a single-key request sent to a group that does not own
// the key: FailedPrecondition naming the owner.
func (s *Server) notOwner(key []byte, dst partition.GroupSet) error {
	if s.replica != nil {
		ep := s.epoch()
		for _, m := range ep.moves {
			if p := ep.pm.At(m.Partition); m.To == s.self && p.Contains(key) {
				// A client that learnt the move's completion from another
				// group, before this one delivered it: it waits.
				return status.Errorf(codes.ResourceExhausted, "server: key %q is in partition %s, moving to group %s: busy until the move completes here, retry",
					key, p.Name, s.group.Name)
			}
		}
		if boot, _, err := s.pm.Owner(key); err == nil && (boot == s.self || !dst.Has(boot)) {
			// The key's partition moved (DESIGN 14): a client that routed
			// by an older epoch's owners learns the epoch and routes it
			// again.
			return status.Errorf(codes.FailedPrecondition, "server: key %q belongs to group %s, not to %s, in epoch %d (%s: partitions moved): route it again",
				key, strings.Join(s.names(dst), ", "), s.group.Name, s.replica.Epoch(), apipb.EpochChangedText)
		}
	}
	return status.Errorf(codes.FailedPrecondition, "server: key %q belongs to group %s, not to %s: send it there", key, strings.Join(s.names(dst), ", "), s.group.Name)
}

// checkLocal checks that this group holds key, for a read of this
// replica's store (Get, Scan): InvalidArgument for a key in no partition,
// FailedPrecondition naming the owner for another group's key.
func (s *Server) checkLocal(key []byte) error {
	owner, replicated, err := s.partitions().Owner(key)
	if err != nil {
		return invalid(err)
	}
	if !replicated && owner != s.self {
		return s.notOwner(key, partition.SetOf(owner))
	}
	return nil
}

// Get implements apipb.KVServer. It reads this replica's state: at the
// leader after a read barrier, where no queued delivery may still write the
// key (linearizable, DESIGN 6.5: a read-only transaction of one get), or as
// it is with stale set, possibly stale.
func (v *service) Get(ctx context.Context, req *apipb.GetRequest) (*apipb.GetResponse, error) {
	s := v.s
	if _, err := s.requestID(req.GetClientId(), req.GetSeq()); err != nil {
		return nil, err
	}
	if g, fwd, err := s.routeKey(ctx, req.GetKey(), !req.GetStale()); fwd || err != nil {
		if err != nil {
			return nil, err
		}
		return forwardTo(ctx, s, g, true, req, apipb.KVClient.Get)
	}
	if err := s.checkLocal(req.GetKey()); err != nil {
		return nil, err
	}
	if !req.GetStale() {
		return s.getAtLeader(ctx, req)
	}
	val, found, err := s.store.Get(req.GetKey())
	if err != nil {
		return nil, s.status(ctx, err)
	}
	return &apipb.GetResponse{Found: found, Value: val}, nil
}

// getAtLeader serves a linearizable Get at this replica, the leader
// (reads.go): a read-only transaction of one get on the applied state, or,
// when queued deliveries keep holding it up, the same through the log.
func (s *Server) getAtLeader(ctx context.Context, req *apipb.GetRequest) (*apipb.GetResponse, error) {
	op := txn.Op{Kind: txn.OpGet, Key: req.GetKey()}
	t := &txn.Txn{Then: []txn.Op{op}}
	bctx, cancel := context.WithTimeout(ctx, cmp.Or(s.cfg.WaitMax, WaitMaxDefault))
	defer cancel()
	res, err := s.readState(bctx, func() (txn.PieceResult, error) { return s.exec.Read(t) })
	var r txn.OpResult
	switch {
	case errors.Is(err, errReadThroughLog):
		if r, err = s.single(ctx, req.GetClientId(), req.GetSeq(), op); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	case len(res.Results) != 1 || res.Aborted:
		return nil, status.Errorf(codes.Internal, "server: get %q: %d results (aborted: %q)", req.GetKey(), len(res.Results), res.Reason)
	default:
		r = res.Results[0]
	}
	return &apipb.GetResponse{Found: r.Found, Value: r.Value}, nil
}

// Put implements apipb.KVServer.
func (v *service) Put(ctx context.Context, req *apipb.PutRequest) (*apipb.PutResponse, error) {
	if g, fwd, err := v.s.routeKey(ctx, req.GetKey(), true); fwd || err != nil {
		if err != nil {
			return nil, err
		}
		return forwardTo(ctx, v.s, g, false, req, apipb.KVClient.Put)
	}
	value := req.GetValue()
	if value == nil {
		value = []byte{}
	}
	if _, err := v.s.single(ctx, req.GetClientId(), req.GetSeq(), txn.Op{Kind: txn.OpPut, Key: req.GetKey(), Value: value}); err != nil {
		return nil, err
	}
	return &apipb.PutResponse{}, nil
}

// Delete implements apipb.KVServer.
func (v *service) Delete(ctx context.Context, req *apipb.DeleteRequest) (*apipb.DeleteResponse, error) {
	if g, fwd, err := v.s.routeKey(ctx, req.GetKey(), true); fwd || err != nil {
		if err != nil {
			return nil, err
		}
		return forwardTo(ctx, v.s, g, false, req, apipb.KVClient.Delete)
	}
	if _, err := v.s.single(ctx, req.GetClientId(), req.GetSeq(), txn.Op{Kind: txn.OpDelete, Key: req.GetKey()}); err != nil {
		return nil, err
	}
	return &apipb.DeleteResponse{}, nil
}

// Scan implements apipb.KVServer. A plain scan is served a partition at a
// time (the one holding start, or the first after it), by that partition's
// group: this replica, or the leader it forwards to; the answer names where
// the rest starts, the next partition's start when it read its partition
// to the end. A consistent scan is one read-only transaction (scan.go).
func (v *service) Scan(ctx context.Context, req *apipb.ScanRequest) (*apipb.ScanResponse, error) {
	s := v.s
	limit := int(req.GetLimit())
	if limit == 0 {
		limit = txn.ScanLimitMax
	}
	if _, err := s.requestID(req.GetClientId(), req.GetSeq()); err != nil {
		return nil, err
	}
	// The request first, in a scan's terms: limit, keys, order, partitions.
	if limit > txn.ScanLimitMax {
		return nil, invalid(fmt.Errorf("server: scan: limit %d, want 1..txn.ScanLimitMax (%d), or 0 for txn.ScanLimitMax", limit, txn.ScanLimitMax))
	}
	spans, err := s.partitions().Spans(req.GetStart(), req.GetEnd())
	if err != nil {
		return nil, invalid(fmt.Errorf("server: scan: %w", err))
	}
	t := &txn.Txn{Then: []txn.Op{{Kind: txn.OpScan, Key: req.GetStart(), End: req.GetEnd(), Limit: limit}}}
	if err := t.Validate(s.partitions()); err != nil {
		return nil, invalid(err)
	}
	if req.GetConsistent() {
		return s.consistentScan(ctx, req, t)
	}
	first := spans[0]
	if g, fwd, err := s.routeKey(ctx, first.Start, !req.GetStale()); fwd || err != nil {
		if err != nil {
			return nil, err
		}
		return forwardTo(ctx, s, g, true, req, apipb.KVClient.Scan)
	}
	if err := s.checkLocal(first.Start); err != nil {
		return nil, err
	}
	// ScanLimitMax keys of KeyMax bytes with values of up to kv.ValueMax
	// would make an answer far larger than a client receives (4 MiB by
	// default): one answer stops at the byte bound, and says where the
	// rest starts.
	bytesMax := cmp.Or(s.cfg.ScanBytesMax, ScanBytesMaxDefault)
	var kvs []kv.KV
	var next []byte
	if req.GetStale() {
		kvs, next, err = s.store.ScanBytes(first.Start, first.End, limit, bytesMax)
	} else {
		kvs, next, err = s.scanAtLeader(ctx, first, limit, bytesMax)
	}
	if err != nil {
		return nil, s.status(ctx, err)
	}
	if next == nil && len(kvs) < limit && len(spans) > 1 {
		// The partition is read to its end: the rest is the next one's,
		// perhaps another group's, asked for by the next page.
		next = slices.Clone(spans[1].Start)
	}
	out := make([]txn.KV, len(kvs))
	for i, e := range kvs {
		out[i] = txn.KV{Key: e.Key, Value: e.Value}
	}
	return &apipb.ScanResponse{Kvs: api.KVsToProto(out), NextStart: next}, nil
}

// OpenSession implements apipb.KVServer: it opens a session through this
// group's log (group.EncodeSession).
func (v *service) OpenSession(ctx context.Context, req *apipb.OpenSessionRequest) (*apipb.OpenSessionResponse, error) {
	s := v.s
	target, fwd, err := s.routeGroup(ctx, "open session", req.GetGroup(), true)
	switch {
	case err != nil:
		return nil, err
	case fwd:
		// Not a read: a session opened twice is one more idle session,
		// but the caller would not know the first.
		return forwardTo(ctx, s, target, false, req, apipb.KVClient.OpenSession)
	}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(s.cfg.WaitMax, WaitMaxDefault))
	defer cancel()
	id, err := s.replica.OpenSession(ctx)
	if err != nil {
		return nil, s.status(ctx, err)
	}
	var ticks uint64
	s.replica.State(func(st *group.State) { ticks = uint64(st.Config().SessionTicks) })
	return &apipb.OpenSessionResponse{ClientId: id, IdleTicks: ticks, TickMs: float64(s.replica.TickInterval()) / float64(time.Millisecond)}, nil
}

// Topology implements apipb.KVServer: the configuration of the current
// epoch, its members included (members.go), or the bootstrap one.
func (v *service) Topology(_ context.Context, req *apipb.TopologyRequest) (*apipb.TopologyResponse, error) {
	if req.GetBootstrap() {
		resp := api.ConfigToProto(v.s.cfg.Cluster, v.s.cfg.Latency)
		resp.Epoch = 1
		return resp, nil
	}
	// The epoch first: the configuration is at least as new.
	epoch := v.s.replica.Epoch()
	resp := api.ConfigToProto(v.s.config(), v.s.cfg.Latency)
	resp.Epoch = epoch
	api.SetEpochOverlay(resp, v.s.routeTop())
	v.s.setMoving(resp)
	return resp, nil
}

// busyMessage names, for a request the group refused for a full outbox or
// backlog, the group that does not acknowledge (DESIGN 12: the entry group refuses
// new work naming the unreachable group).
func (s *Server) busyMessage(err error) string {
	var to partition.GroupID
	busy := false
	s.replica.State(func(st *group.State) { to, busy = st.Node().BusyWith() })
	if !busy {
		return fmt.Sprintf("server: group %s: %v", s.group.Name, err)
	}
	return fmt.Sprintf("server: group %s refuses new work: group %s is unreachable or slow (it has not acknowledged what this group sent it); retry later: %v", s.group.Name, s.top.Name(to), err)
}

// routeTop returns the topology of the group's epoch: the groups ranked by
// its overlay, with its tree, by which entry groups are chosen (DESIGN 14).
// It is on every request's path: read once per epoch (loadCurrent).
func (s *Server) routeTop() *partition.Topology {
	if s.replica == nil {
		return s.top
	}
	if c := s.current.Load(); c != nil && c.epoch == s.replica.Epoch() {
		return c.top
	}
	return s.loadCurrent().top
}

// sameEpoch reports whether a request routed with epoch (0: a client older
// than epochs, which routes with the group's) was routed with the group's.
func (s *Server) sameEpoch(epoch uint64) bool {
	return epoch == 0 || s.replica == nil || epoch == s.replica.Epoch()
}
