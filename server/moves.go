package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// Partition moves (DESIGN 14; group/moves.go has the whole protocol). The
// server's parts: a change that starts a move or completes one
// (Reconfigure, nextMove); the refusal, as busy, of a request that touches
// a partition moving in the request's epoch (checkMoving: the client
// retries until the move completes); the chunks a replica of the old
// owner serves (MoveChunk); and the copy, run by the new owner's leader
// (mover).

// MoveChunkBytesDefault is the size of the chunks the new owner asks for:
// well under a log entry's bound (group.InboundBytesMax), so that a chunk
// of rows at the largest size still fits.
const MoveChunkBytesDefault = 256 << 10

// moverInterval spaces the mover's looks at its group's moves.
const moverInterval = 50 * time.Millisecond

// nextMove applies the move of req, if any, to next (the configuration of
// the coming epoch, from cur): a new move keeps the partition's owner and
// lists the move; a completion gives the partition its new owner and drops
// the move.
func (s *Server) nextMove(cur group.EpochConfig, next *group.EpochConfig, mv *apipb.PartitionMove) error {
	pm := s.pm
	next.Owners = cur.Owners
	next.Moves = cur.Moves
	if mv == nil {
		return nil
	}
	i, ok := pm.Index(mv.GetPartition())
	if !ok {
		return fmt.Errorf("server: partition move: unknown partition %q", mv.GetPartition())
	}
	if pm.At(i).Replicated {
		return fmt.Errorf("server: partition move: %s is replicated: every group holds it", mv.GetPartition())
	}
	to, ok := s.top.Lookup(mv.GetTo())
	if !ok {
		return fmt.Errorf("server: partition move: unknown group %q (the groups: %s)", mv.GetTo(), strings.Join(s.names(s.top.All()), ", "))
	}
	owners := cur.Owners
	if owners == nil {
		owners = pm.Owners()
	}
	next.Owners = append([]partition.GroupID(nil), owners...)
	next.Moves = nil
	var moving *group.Move
	for _, m := range cur.Moves {
		if m.Partition == i {
			moving = &m
			continue
		}
		next.Moves = append(next.Moves, m)
	}
	switch {
	case mv.GetComplete():
		if moving == nil || moving.To != to {
			return fmt.Errorf("server: partition move: %s is not moving to %s", mv.GetPartition(), mv.GetTo())
		}
		next.Owners[i] = to
	case moving != nil:
		return fmt.Errorf("server: partition move: %s is moving to %s since epoch %d: one move at a time", mv.GetPartition(), s.top.Name(moving.To), moving.Since)
	case owners[i] == to:
		return fmt.Errorf("server: partition move: %s is group %s's already", mv.GetPartition(), mv.GetTo())
	default:
		next.Moves = append(next.Moves, group.Move{Partition: i, To: to, Since: cur.Epoch + 1})
	}
	return nil
}

// checkMoving refuses, as busy, a transaction or call that touches a
// partition moving in the epoch its client routed it with (or this
// replica's, when that is later): nothing may write the partition from
// the move's cut until its new owner holds it. The client retries.
func (s *Server) checkMoving(ctx context.Context, r *request) error {
	if s.replica == nil || (r.txn == nil && r.call == nil) {
		return nil
	}
	if r.epoch > s.replica.Epoch() {
		s.awaitEpoch(ctx, r.epoch)
	}
	ep := s.epoch()
	if ep.epoch < r.epoch {
		// Checked against an older epoch's moves, it could be taken once
		// the replica starts r.epoch, unchecked: refused as busy, as the
		// group would refuse it.
		return status.Errorf(codes.ResourceExhausted, "server: %s: routed with epoch %d, replica %s is at %d: busy, retry", r.id, r.epoch, s.cfg.NodeID, ep.epoch)
	}
	if len(ep.moves) == 0 {
		return nil
	}
	keys, spans, err := s.touched(r)
	if err != nil {
		return nil // refused later, for what it is
	}
	// The partitions r touches, by the epoch's map.
	var parts []partition.Partition
	for _, k := range keys {
		if p, err := ep.pm.Lookup(k); err == nil {
			parts = append(parts, p)
		}
	}
	for _, sp := range spans {
		in, _ := ep.pm.Spans(sp[0], sp[1])
		for _, x := range in {
			parts = append(parts, x.Partition)
		}
	}
	for _, m := range ep.moves {
		name := ep.pm.At(m.Partition).Name
		if slices.ContainsFunc(parts, func(p partition.Partition) bool { return p.Name == name }) {
			s.movesRefused.Add(1)
			return status.Errorf(codes.ResourceExhausted, "server: %s touches partition %s, which is moving to group %s (since epoch %d): busy until the move completes, retry",
				r.id, name, s.top.Name(m.To), m.Since)
		}
	}
	return nil
}

// touched returns the keys and the scanned ranges of r.
func (s *Server) touched(r *request) (keys [][]byte, spans [][2][]byte, err error) {
	if r.call != nil {
		keys, err = s.cfg.Procedures.Keys(*r.call)
		return keys, nil, err
	}
	for _, c := range r.txn.If {
		keys = append(keys, c.Key)
	}
	for _, ops := range [][]txn.Op{r.txn.Then, r.txn.Else} {
		for _, op := range ops {
			if op.Kind == txn.OpScan {
				spans = append(spans, [2][]byte{op.Key, op.End})
				continue
			}
			keys = append(keys, op.Key)
		}
	}
	return keys, spans, nil
}

// MoveChunk implements apipb.KVServer: a chunk of a partition moving away
// from this replica's group, read once the replica ran everything its
// group delivered before the move's cut.
func (v *service) MoveChunk(ctx context.Context, req *apipb.MoveChunkRequest) (*apipb.MoveChunkResponse, error) {
	s := v.s
	if _, err := s.authorizeNode(ctx, "MoveChunk", "read a moving partition"); err != nil {
		return nil, err
	}
	i, ok := s.pm.Index(req.GetPartition())
	if !ok {
		return nil, invalid(fmt.Errorf("server: move chunk: unknown partition %q", req.GetPartition()))
	}
	p := s.pm.At(i)
	start := req.GetStart()
	if len(start) == 0 {
		start = p.Start
	} else if !p.Contains(start) {
		return nil, invalid(fmt.Errorf("server: move chunk: start %q is not in partition %s", start, p.Name))
	}
	if err := s.frozen(i, req.GetSince()); err != nil {
		return nil, err
	}
	bytesMax := min(int(cmp.Or(req.GetBytesMax(), MoveChunkBytesDefault)), MoveChunkBytesDefault*4)
	rows, next, err := s.store.ScanChunk(start, p.End, kv.ScanLimitMax, bytesMax)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "server: move chunk of %s: %v", p.Name, err)
	}
	resp := &apipb.MoveChunkResponse{Next: next}
	for _, r := range rows {
		resp.Rows = append(resp.Rows, &apipb.KeyValue{Key: r.Key, Value: r.Value})
	}
	return resp, nil
}

// frozen returns nil once partition i, moving away from this group since
// epoch since, is frozen at this replica: the replica's group started the
// epoch, this group owned the partition when it did, and the executor ran
// every delivery queued before this replica first saw the epoch (those
// after the cut do not touch the partition: checkMoving, the stop-sign).
func (s *Server) frozen(i int, since uint64) error {
	var err error
	var cut uint64
	var ok bool
	s.replica.State(func(st *group.State) {
		if st.Epoch() < since {
			err = status.Errorf(codes.Unavailable, "server: replica %s has not started epoch %d yet", s.cfg.NodeID, since)
			return
		}
		// The owner cannot change while the partition moves
		// (group.checkMoveChange): the move listed now, since the same
		// epoch, from this group, is the one asked about.
		cur := st.EpochConfig()
		if m, ok := cur.MoveOf(i); !ok || m.Since != since || cur.Owners[i] != s.self {
			err = status.Errorf(codes.FailedPrecondition, "server: partition %s does not move away from group %s since epoch %d (at epoch %d)", s.pm.At(i).Name, s.group.Name, since, cur.Epoch)
			return
		}
		key := moveKey{i, since}
		s.moveCutsMu.Lock()
		defer s.moveCutsMu.Unlock()
		if cut, ok = s.moveCuts[key]; !ok {
			// Under the state's lock: the executor holds every delivery
			// the state did, those before the move's cut among them.
			cut = s.exec.NextSeq()
			s.moveCuts[key] = cut
		}
	})
	if err != nil {
		return err
	}
	// Out of the state's lock (a look at the whole queue): the deliveries
	// below cut only leave the queue, so a later look is as good.
	if p := s.pm.At(i); s.exec.QueuedTouch(cut, p.Start, p.End) {
		return status.Errorf(codes.Unavailable, "server: partition %s is not frozen at replica %s yet: deliveries before the move's cut still wait", p.Name, s.cfg.NodeID)
	}
	return nil
}

// authorizeNode returns the group of the node of the cluster that makes
// the call of ctx, and refuses any other caller; without TLS anyone may
// call, and the group is "".
func (s *Server) authorizeNode(ctx context.Context, method, what string) (string, error) {
	if !s.ready.Load() {
		return "", status.Errorf(codes.Unavailable, "server: replica %s is starting", s.cfg.NodeID)
	}
	if s.cfg.Node == nil {
		return "", nil
	}
	_, node, err := s.tlsCaller(ctx)
	if err != nil {
		return "", err
	}
	if node == "" {
		return "", status.Errorf(codes.PermissionDenied, "server: %s: only a replica of the cluster may %s", method, what)
	}
	g, _, _ := strings.Cut(node, "/")
	return g, nil
}

// moveKey names a move: its partition and the epoch it started.
type moveKey struct {
	partition int
	since     uint64
}

// mover runs the copies of the partitions moving to this replica's group
// while the replica leads it, until stop closes.
func (s *Server) mover(stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	t := time.NewTicker(moverInterval)
	defer t.Stop()
	var logged moveLog
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if !s.replica.IsLeader() {
			continue
		}
		var moves []group.MoveProgress
		s.replica.State(func(st *group.State) { moves = st.MovesIn() })
		for _, m := range moves {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			go func() {
				select {
				case <-stop:
					cancel()
				case <-ctx.Done():
				}
			}()
			err := s.moveStep(ctx, m)
			cancel()
			if err != nil && !errors.Is(err, context.Canceled) {
				logged.note(s, m.Partition, err)
			}
		}
	}
}

// moveLog says a failed step of a move once per kind of failure every
// moveLogEvery, not every moverInterval: a copy waiting for the old owner
// to freeze fails the same way many times.
type moveLog struct {
	last  string
	since time.Time
}

const moveLogEvery = 10 * time.Second

func (l *moveLog) note(s *Server, part int, err error) {
	msg := status.Convert(err).Message()
	if msg == l.last && time.Since(l.since) < moveLogEvery {
		return
	}
	l.last, l.since = msg, time.Now()
	s.log.Info("partition move: waiting", "partition", s.pm.At(part).Name, "reason", msg)
}

// moveStep takes the next step of move m: the next chunk, or, once every
// chunk is in, the change that completes the move.
func (s *Server) moveStep(ctx context.Context, m group.MoveProgress) error {
	name := s.pm.At(m.Partition).Name
	if m.Done {
		_, err := s.moveChange(ctx, &apipb.PartitionMove{Partition: name, To: s.group.Name, Complete: true})
		return err
	}
	// The owner cannot change while the partition moves: the current
	// epoch's is the one it moves from.
	from := partition.NoGroup
	s.replica.State(func(st *group.State) {
		if cur := st.EpochConfig(); cur.Owners != nil {
			from = cur.Owners[m.Partition]
		}
	})
	if from == partition.NoGroup {
		return fmt.Errorf("partition move: %s: no owner at this replica's epoch", name)
	}
	var resp *apipb.MoveChunkResponse
	err := s.forward(s.nodeCall(ctx), from, true, func(ctx context.Context, kv apipb.KVClient, opts ...grpc.CallOption) error {
		var err error
		resp, err = kv.MoveChunk(ctx, &apipb.MoveChunkRequest{Partition: name, Since: m.Since, Start: m.Next, BytesMax: MoveChunkBytesDefault}, opts...)
		return err
	})
	if err != nil {
		return err
	}
	rows := make([]group.MoveRow, len(resp.GetRows()))
	var n int
	for k, r := range resp.GetRows() {
		rows[k] = group.MoveRow{Key: r.GetKey(), Value: r.GetValue()}
		n += len(r.GetKey()) + len(r.GetValue())
	}
	err = s.replica.ProposeChunk(ctx, m.Move, m.Next, resp.GetNext(), rows)
	if errors.Is(err, group.ErrChunkStale) {
		return nil // taken already: the state says where to go on
	}
	if err == nil {
		s.moveBytes.Add(int64(n))
	}
	return err
}

// nodeCall returns ctx for a call this replica makes for itself to another
// replica: as the administrator, forwarded by this node.
func (s *Server) nodeCall(ctx context.Context) context.Context {
	return context.WithValue(ctx, callerKey{}, caller{user: AdminUser})
}

// moveChange asks the group that takes changes for the change of mv,
// from this replica, and returns the epoch it starts.
func (s *Server) moveChange(ctx context.Context, mv *apipb.PartitionMove) (uint64, error) {
	e := s.replica.Epoch()
	entry := s.proto.ChangeEntry(s.routeTop())
	var resp *apipb.ReconfigureResponse
	err := s.forward(s.nodeCall(ctx), entry, false, func(ctx context.Context, kv apipb.KVClient, opts ...grpc.CallOption) error {
		var err error
		resp, err = kv.Reconfigure(ctx, &apipb.ReconfigureRequest{Epoch: e, Move: mv}, opts...)
		return err
	})
	if err != nil {
		return 0, err
	}
	return resp.GetEpoch(), nil
}

// movesInProto returns the copies under way at this replica's group.
func (s *Server) movesInProto() []*apipb.MoveProgress {
	var moves []group.MoveProgress
	var eps []group.EpochConfig
	s.replica.State(func(st *group.State) { moves, eps = st.MovesIn(), st.Epochs() })
	out := make([]*apipb.MoveProgress, 0, len(moves))
	for _, m := range moves {
		from := ""
		for _, ec := range eps {
			if ec.Epoch == m.Since && ec.Owners != nil {
				from = s.top.Name(ec.Owners[m.Partition])
			}
		}
		out = append(out, &apipb.MoveProgress{Partition: s.pm.At(m.Partition).Name, From: from, Since: m.Since, Keys: m.Keys, Bytes: m.Bytes, Done: m.Done})
	}
	return out
}

// setMoving marks the moving partitions of resp, a topology of this
// replica's epoch.
func (s *Server) setMoving(resp *apipb.TopologyResponse) {
	ep := s.epoch()
	for _, m := range ep.moves {
		name := ep.pm.At(m.Partition).Name
		for _, p := range resp.GetPartitions() {
			if p.GetName() == name {
				p.MovingTo, p.MovingSince = s.top.Name(m.To), m.Since
			}
		}
	}
}
