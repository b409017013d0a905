package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api"
	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// consistentScan answers a consistent scan (apipb.ScanRequest.consistent):
// t, its one scan op, runs as a read-only transaction multicast to every
// group that owns a part of the range, so that the parts are read at one
// cut (DESIGN 3.1, acyclic order: the transaction's place in every group's
// order is consistent with every other transaction's). The entry group's
// leader coordinates it, as the Go client does a Txn: it proposes the
// transaction, awaits the other destinations' pieces where they run, and
// merges them (txn.Txn.MergeResults). A replica that is not that leader
// forwards the request there, as it would the transaction.
//
// The answer is never paged, since a second page would be another cut:
// past the byte bound it fails with OutOfRange, naming the bound, and
// returns nothing. Two bounds apply: this server's ScanBytesMax on the
// merged answer, and, on each group's part, kv.ValueMax, what a stored
// result may hold (a larger one is kept without its reads:
// txn.ErrTruncated).
func (s *Server) consistentScan(ctx context.Context, req *apipb.ScanRequest, t *txn.Txn) (*apipb.ScanResponse, error) {
	if req.GetStale() {
		return nil, invalid(errors.New("server: scan: consistent and stale both set: a consistent scan is a transaction, ordered at every group it reads; a stale read is one replica's state as it is"))
	}
	id, err := s.requestID(req.GetClientId(), req.GetSeq())
	if err != nil {
		return nil, err
	}
	r, err := s.prepareTxn(id, t, "")
	if err != nil {
		return nil, err
	}
	target := s.self
	if at := s.proto.Entries(s.routeTop(), r.dst); !at.Has(s.self) {
		target = at.Min()
	}
	if fwd, err := s.mustForward(ctx, target, true); fwd || err != nil {
		if err != nil {
			return nil, err
		}
		// A read: asked again elsewhere, it runs again, which is harmless.
		return forwardTo(ctx, s, target, true, req, apipb.KVClient.Scan)
	}
	for tries := 0; ; tries++ {
		pieces, err := s.runScan(ctx, r)
		if err != nil {
			return nil, err
		}
		resp, err := s.mergeScan(r.id, req, t, pieces)
		// Delivered after the end of the epoch it was routed with, it ran
		// nowhere (DESIGN 14): an anonymous read goes again under a new
		// id, at the new epoch; a client's id is the client's to renew.
		if errors.Is(err, errScanEpoch) && req.GetClientId() == 0 && tries < epochRetries {
			r.id = freshID()
			continue
		}
		return resp, err
	}
}

// errScanEpoch marks the error of a consistent scan that its destinations
// aborted because its epoch had ended.
var errScanEpoch = errors.New("server: consistent scan delivered after its epoch")

// runScan runs r, a consistent scan, at this group, the entry group of its
// destinations, and returns the pieces of all of them.
func (s *Server) runScan(ctx context.Context, r request) ([]txn.PieceResult, error) {
	// The awaits end with the call: cancel them, then wait for them, so
	// that no goroutine outlives it.
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	type answer struct {
		piece *apipb.PieceResult
		err   error
	}
	awaited := r.dst.Remove(s.self)
	answers := make(chan answer, awaited.Len())
	for _, g := range awaited.Slice() {
		wg.Go(func() {
			p, err := s.awaitPiece(ctx, g, r.id)
			answers <- answer{p, err}
		})
	}
	resp, err := s.run(ctx, r)
	if err != nil {
		return nil, err
	}
	var pieces []txn.PieceResult
	add := func(p *apipb.PieceResult) error {
		pr, err := api.PieceResultFromProto(p)
		if err != nil {
			return status.Errorf(codes.Internal, "server: consistent scan %s: %v", r.id, err)
		}
		pieces = append(pieces, pr)
		return nil
	}
	if r.dst.Has(s.self) {
		if err := add(resp.GetPiece()); err != nil {
			return nil, err
		}
	}
	for range awaited.Len() {
		a := <-answers
		if a.err != nil {
			return nil, a.err
		}
		if err := add(a.piece); err != nil {
			return nil, err
		}
	}
	return pieces, nil
}

// mergeScan merges the pieces of the consistent scan id and checks the
// answer against the bounds.
func (s *Server) mergeScan(id multicast.MsgID, req *apipb.ScanRequest, t *txn.Txn, pieces []txn.PieceResult) (*apipb.ScanResponse, error) {
	rng := fmt.Sprintf("[%s, %s)", txn.Quote(req.GetStart()), txn.Quote(req.GetEnd()))
	res, err := t.MergeResults(id.String(), pieces)
	switch {
	case errors.Is(err, txn.ErrTruncated):
		return nil, status.Errorf(codes.OutOfRange,
			"server: consistent scan %s: a group's part of the first %d keys holds more than a stored result may (%d bytes, kv.ValueMax), so its reads were not kept: a consistent scan is answered whole or not at all; scan a narrower range or fewer keys (limit), or page it without consistent",
			rng, t.Then[0].Limit, kv.ValueMax)
	case errors.Is(err, txn.ErrEpochChanged):
		return nil, fmt.Errorf("%w: %w", errScanEpoch, status.Errorf(codes.Aborted, "server: consistent scan %s: %v", rng, err))
	case errors.Is(err, txn.ErrAborted):
		// Nothing else aborts a read; said as it is.
		return nil, status.Errorf(codes.Aborted, "server: consistent scan %s: %v", rng, err)
	case err != nil:
		return nil, status.Errorf(codes.Internal, "server: consistent scan %s: %v", rng, err)
	case len(res.Results) != 1 || res.Results[0].Kind != txn.OpScan:
		return nil, status.Errorf(codes.Internal, "server: consistent scan %s: %d results for one scan", rng, len(res.Results))
	}
	kvs := res.Results[0].KVs
	bound := cmp.Or(s.cfg.ScanBytesMax, ScanBytesMaxDefault)
	size := 0
	for _, e := range kvs {
		size += len(e.Key) + len(e.Value)
	}
	if size > bound {
		return nil, status.Errorf(codes.OutOfRange,
			"server: consistent scan %s: its first %d keys hold %d bytes of keys and values, more than the scan byte bound (%d, server.Config.ScanBytesMax): a consistent scan is answered whole or not at all; scan a narrower range or fewer keys (limit), or page it without consistent",
			rng, len(kvs), size, bound)
	}
	return &apipb.ScanResponse{Kvs: api.KVsToProto(kvs)}, nil
}

// awaitPiece returns group g's piece of transaction id, from g's leader,
// through the forwarder: whatever the caller asked of this replica, this
// replica routes its own calls.
func (s *Server) awaitPiece(ctx context.Context, g partition.GroupID, id multicast.MsgID) (*apipb.PieceResult, error) {
	var resp *apipb.AwaitResponse
	err := s.forward(ctx, g, true, func(ctx context.Context, kv apipb.KVClient, opts ...grpc.CallOption) error {
		var err error
		resp, err = kv.Await(ctx, &apipb.AwaitRequest{ClientId: id.Client, Seq: id.Seq, Group: s.top.Name(g)}, opts...)
		return err
	})
	if err != nil {
		return nil, err
	}
	if p := resp.GetPiece(); p.GetGroup() != s.top.Name(g) || p.GetClientId() != id.Client || p.GetSeq() != id.Seq {
		return nil, status.Errorf(codes.Internal, "server: asked group %s for %s, got the piece of group %q for c%d.%d", s.top.Name(g), id, p.GetGroup(), p.GetClientId(), p.GetSeq())
	}
	return resp.GetPiece(), nil
}
