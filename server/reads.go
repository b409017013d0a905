package server

import (
	"cmp"
	"context"
	"errors"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api"
	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/executor"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// Reads at the leader (DESIGN 6.5): a read-only transaction or call whose
// only destination is this group, and a Get, run at the leader on the
// applied state after a read barrier, instead of through the log at every
// replica. The barrier (replication's ReadBarrier, shared by the reads
// waiting at once) makes the state hold every write acknowledged before
// the read was invoked; the executor's read (executor.Read) reads one
// point in time of it, at which no queued delivery may still write what
// the read reads. A read that queued deliveries keep holding up, or a
// call that turns out to write, goes through the log like any other
// transaction: readThroughLog.

// readWaitsMax bounds the entries a read at the leader lets apply while
// queued deliveries hold it up (each waiting for a vote from another
// group) before it goes through the log, where it queues behind them.
const readWaitsMax = 16

// errReadThroughLog: the read is not served at the leader; the caller
// sends it through the log.
var errReadThroughLog = errors.New("server: read through the log")

// readCounts counts the reads served at the leader and those that went
// through the log after all (flexkv_reads_total).
type readCounts struct {
	leader, log atomic.Uint64
}

// readOnly returns the transaction or call of r when it is a read this
// replica may serve at the leader: read-only, addressed to this group alone,
// routed with the group's epoch (an older one goes through the log, which
// answers it with the stop-sign, DESIGN 14).
func (s *Server) readOnly(r *request) bool {
	switch {
	case r.dst != partition.SetOf(s.self):
		return false
	case r.epoch != 0 && r.epoch != s.replica.Epoch():
		return false
	case r.txn != nil:
		return r.txn.ReadOnly()
	case r.call != nil && s.cfg.Procedures != nil:
		proc, ok := s.cfg.Procedures.Lookup(r.call.Name)
		return ok && txn.IsReadOnly(proc)
	}
	return false
}

// readAtLeader serves the read r at this replica, the leader, or returns
// errReadThroughLog.
func (s *Server) readAtLeader(ctx context.Context, r *request) (*apipb.TxnResponse, error) {
	ctx, cancel := s.bounded(ctx, r.id)
	defer cancel()
	res, err := s.readState(ctx, func() (txn.PieceResult, error) {
		if r.call != nil {
			return s.exec.ReadCall(r.id, *r.call)
		}
		return s.exec.Read(r.txn)
	})
	if err != nil {
		return nil, err
	}
	return &apipb.TxnResponse{Destinations: s.names(r.dst), Piece: api.PieceResultToProto(r.id, s.group.Name, &res), Executed: true}, nil
}

// readState passes a read barrier and runs read on the state, again after
// each entry while queued deliveries hold it up (executor.ErrReadWaits;
// a read-only call held up by open jobs only once they no longer would:
// Executor.HeldUp), readWaitsMax entries at most; then, or when the piece
// wrote (executor.ErrNotReadOnly), it returns errReadThroughLog.
func (s *Server) readState(ctx context.Context, read func() (txn.PieceResult, error)) (txn.PieceResult, error) {
	if err := s.replica.ReadBarrier(ctx); err != nil {
		return txn.PieceResult{}, s.status(ctx, err)
	}
	var err error
	for waits := 0; ; waits++ {
		applied := s.replica.Applied()
		var res txn.PieceResult
		if !s.exec.HeldUp(err) {
			// A read-only call that an open job held up runs again only
			// once the jobs that wrote what it read completed.
			res, err = read()
		}
		switch {
		case err == nil:
			s.reads.leader.Add(1)
			return res, nil
		case errors.Is(err, executor.ErrReadWaits) && waits < readWaitsMax:
			// The state moves on once the next entry applies (the votes
			// the queued deliveries wait for come through the log).
			if err := s.replica.WaitApplied(ctx, applied+1); err != nil {
				return txn.PieceResult{}, s.status(ctx, err)
			}
		case errors.Is(err, executor.ErrReadWaits), errors.Is(err, executor.ErrNotReadOnly):
			s.reads.log.Add(1)
			return txn.PieceResult{}, errReadThroughLog
		case errors.Is(err, executor.ErrNotOwned):
			return txn.PieceResult{}, s.movedAway(err)
		default:
			return txn.PieceResult{}, s.status(ctx, err)
		}
	}
}

// scanAtLeader scans sp at this replica, the leader, linearizably: after a
// read barrier, on a view of the applied state at which no queued delivery
// may still write in sp (executor.ScanView), as a read-only transaction's
// scan reads. The store itself may hold a later delivery that ran ahead of
// an earlier one waiting for a vote: not a point of the group's order. A
// scan waits for such deliveries, entry by entry, up to the server's wait
// bound.
func (s *Server) scanAtLeader(ctx context.Context, sp partition.Span, limit, bytesMax int) ([]kv.KV, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(s.cfg.WaitMax, WaitMaxDefault))
	defer cancel()
	if err := s.replica.ReadBarrier(ctx); err != nil {
		return nil, nil, err
	}
	for {
		applied := s.replica.Applied()
		v, err := s.exec.ScanView(sp.Start, sp.End)
		switch {
		case errors.Is(err, executor.ErrReadWaits):
			if err := s.replica.WaitApplied(ctx, applied+1); err != nil {
				return nil, nil, err
			}
			continue
		case errors.Is(err, executor.ErrNotOwned):
			return nil, nil, s.movedAway(err)
		case err != nil:
			return nil, nil, err
		}
		defer v.Release()
		return v.ScanBytes(sp.Start, sp.End, limit, bytesMax)
	}
}

// movedAway answers a read routed by another epoch's owners (a partition
// moved, DESIGN 14): the client learns the epoch and routes it again.
func (s *Server) movedAway(err error) error {
	return status.Errorf(codes.FailedPrecondition, "server: group %s at epoch %d: %v (%s: partitions moved): route it again",
		s.group.Name, s.replica.Epoch(), err, apipb.EpochChangedText)
}
