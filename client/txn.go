package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/flexkv/flexkv/api"
	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// Txn runs t: it validates and routes it (errors matching txn.ErrInvalid
// before anything is sent), sends it to the entry group, and returns when
// every destination group has answered. The Result's Destinations lists
// the groups in the order their answers arrived, each with the time from
// the call's start in ms. An aborted transaction returns an error matching
// txn.ErrAborted. When a destination left its results out because they
// were too large to keep, Txn returns the merged Result of the others and
// an error matching txn.ErrTruncated.
func (c *Client) Txn(ctx context.Context, t *txn.Txn) (*txn.Result, error) {
	start := time.Now()
	if err := c.live(); err != nil {
		return nil, err
	}
	v := c.view
	dstOf := func(pm *partition.PartitionMap) (partition.GroupSet, error) {
		return t.Destinations(pm, v.Groups, v.Home)
	}
	if _, err := dstOf(c.epochRoute.Load().pm); err != nil {
		return nil, err
	}
	req := &apipb.TxnRequest{Body: &apipb.TxnRequest_Txn{Txn: api.TxnToProto(t)}, HomeGroup: v.Groups.Name(v.Home)}
	res, err := c.run(ctx, start, req, dstOf)
	if res == nil {
		return nil, err
	}
	// A scan that spans groups comes back from each, up to its limit.
	t.CutScans(res)
	branch := t.Then
	if !res.Succeeded {
		branch = t.Else
	}
	if err == nil && len(res.Results) != len(branch) {
		return nil, fmt.Errorf("%w: %s: %d results for the %d operations of the branch that ran",
			ErrInconsistent, res.ID, len(res.Results), len(branch))
	}
	return res, err
}

// Call runs the stored procedure registered on the servers as procedure,
// with args. keys are the keys the call touches, which route it as a
// transaction's keys do: their owner groups are its destinations (keys of
// replicated partitions add none; a call that touches only those goes to
// the home group). The servers route by the procedure's own keys: a call
// whose keys name other groups fails with ErrInconsistent. Otherwise as
// Txn.
func (c *Client) Call(ctx context.Context, procedure string, args []byte, keys [][]byte) (*txn.Result, error) {
	start := time.Now()
	if err := c.live(); err != nil {
		return nil, err
	}
	v := c.view
	if err := checkCall(procedure, args, keys); err != nil {
		return nil, err
	}
	dstOf := func(pm *partition.PartitionMap) (partition.GroupSet, error) {
		dst, err := pm.Destinations(keys)
		if err != nil {
			return 0, &classError{class: txn.ErrInvalid, err: fmt.Errorf("client: call %q: %w", procedure, err)}
		}
		if dst.Empty() {
			dst = partition.SetOf(v.Home)
		}
		return dst, nil
	}
	if _, err := dstOf(c.epochRoute.Load().pm); err != nil {
		return nil, err
	}
	req := &apipb.TxnRequest{
		Body:      &apipb.TxnRequest_Call{Call: &apipb.Call{Name: procedure, Args: args, Keys: keys}},
		HomeGroup: v.Groups.Name(v.Home),
	}
	return c.run(ctx, start, req, dstOf)
}

// checkCall checks a call as the servers do: a procedure name of
// 1..txn.ProcNameMax bytes of [a-z0-9_.-], at most txn.ProcArgsMax bytes of
// arguments, at most txn.KeysMax valid keys.
func checkCall(name string, args []byte, keys [][]byte) error {
	invalid := func(format string, a ...any) error {
		return &classError{class: txn.ErrInvalid, err: fmt.Errorf(format, a...)}
	}
	if err := (&txn.Call{Name: name, Args: args}).Validate(); err != nil {
		return &classError{class: txn.ErrInvalid, err: fmt.Errorf("client: %w", err)}
	}
	if len(keys) > txn.KeysMax {
		return invalid("client: call %q: %d keys, more than KeysMax (%d)", name, len(keys), txn.KeysMax)
	}
	total := len(args)
	for i, k := range keys {
		if err := partition.CheckKey(k); err != nil {
			return invalid("client: call %q: keys[%d]: %w", name, i, err)
		}
		total += len(k)
	}
	// The keys travel in the request too: together with the arguments
	// they must fit what one request may carry.
	if total > txn.BytesMax {
		return invalid("client: call %q: %d bytes of arguments and keys, more than BytesMax (%d)", name, total, txn.BytesMax)
	}
	return nil
}

// live returns ErrClosed once the client is closed.
func (c *Client) live() error {
	select {
	case <-c.done:
		return ErrClosed
	default:
		return nil
	}
}

// answer is one destination's answer, as it arrived.
type answer struct {
	group partition.GroupID
	ms    float64
	piece *apipb.PieceResult
}

// tally records the answers of a transaction's destinations in arrival
// order.
type tally struct {
	c     *Client
	start time.Time
	id    multicast.MsgID
	mu    sync.Mutex
	got   []answer
}

// add checks piece, g's answer, and records it.
func (t *tally) add(g partition.GroupID, piece *apipb.PieceResult) error {
	name := t.c.view.Groups.Name(g)
	got := multicast.MsgID{Client: piece.GetClientId(), Seq: piece.GetSeq()}
	if got != t.id || piece.GetGroup() != name {
		return fmt.Errorf("%w: asked group %s for %s, got the answer of group %q for %s",
			ErrInconsistent, name, t.id, piece.GetGroup(), got)
	}
	t.mu.Lock()
	t.got = append(t.got, answer{group: g, ms: float64(time.Since(t.start)) / float64(time.Millisecond), piece: piece})
	t.mu.Unlock()
	if t.c.answered != nil {
		t.c.answered(name)
	}
	return nil
}

// run sends req, a transaction or call with destinations dst, under a
// session's next id, and collects the answers of every destination. A
// request refused for an expired session that never ran goes again under a
// new session and the next seq (see the package comment).
func (c *Client) run(ctx context.Context, start time.Time, req *apipb.TxnRequest, dstOf func(*partition.PartitionMap) (partition.GroupSet, error)) (*txn.Result, error) {
	s, err := c.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer c.release(s)
	var rt *epochRoute
	var entry partition.GroupID
	var dst partition.GroupSet
	for renewed, changed := 0, 0; ; renewed++ {
		if now := c.epochRoute.Load(); now != rt {
			// A new epoch's topology: it may rank the groups otherwise,
			// and a partition may have moved (DESIGN 14).
			rt = now
			if dst, err = dstOf(rt.pm); err != nil {
				return nil, err
			}
			entry = c.proto.Entry(rt.top, c.view.Latency, c.origin, dst)
		}
		req.Epoch = rt.epoch
		if c.origin.Group != partition.NoGroup {
			req.OriginGroup = c.view.Groups.Name(c.origin.Group)
		}
		res, err := c.runOnce(ctx, start, s, entry, req, dst)
		if epochChanged(err) && changed < epochResubmits && ctx.Err() == nil {
			// It ran nowhere: resubmit it, routed with the new epoch, as
			// a new request (epoch.go).
			changed++
			renewed--
			c.resubmits.Add(1)
			c.log.Debug("client: epoch changed, resubmit", "group", c.view.Groups.Name(entry), "epoch", req.Epoch, "error", err)
			c.learnEpochOrWait(ctx, entry, changed)
			continue
		}
		if !errors.Is(err, errRenew) {
			return res, err
		}
		s.ids[entry] = 0
		if renewed == renewals {
			return nil, &classError{class: ErrSessionExpired, err: fmt.Errorf("client: group %s: %d sessions in a row expired before their first request: %w", c.view.Groups.Name(entry), renewals+1, err)}
		}
		c.log.Debug("client: session expired before the request ran, open a new one", "group", c.view.Groups.Name(entry), "error", err)
	}
}

// errRenew says that a write's session expired, and that the write never
// ran: it may go again under a new session.
var errRenew = errors.New("client: the session expired before the request ran")

// expired turns the error of a write refused for an expired session into
// errRenew when no attempt may have run, or into an error matching
// ErrSessionExpired; other errors are returned as they are.
func expired(err error, id string, o *outcome) error {
	if !sessionExpired(err) {
		return err
	}
	if !o.mayHaveRun() {
		return fmt.Errorf("%w: %s: %w", errRenew, id, err)
	}
	return &classError{class: ErrSessionExpired, err: fmt.Errorf("client: %s: its session expired after an attempt that may have been accepted: it may have run, it was not resubmitted: %w", id, err)}
}

// runOnce is one submission of run, under s's session at the entry group.
func (c *Client) runOnce(ctx context.Context, start time.Time, s *session, entry partition.GroupID, req *apipb.TxnRequest, dst partition.GroupSet) (*txn.Result, error) {
	client, err := c.sessionAt(ctx, s, entry)
	if err != nil {
		return nil, err
	}
	s.seq++
	req.ClientId, req.Seq = client, s.seq
	// The entry group checks these against the destinations it computes
	// (apipb.DestinationsDifferText): the awaits below go where it sends.
	req.DestinationGroups = req.DestinationGroups[:0]
	for _, g := range dst.Slice() {
		req.DestinationGroups = append(req.DestinationGroups, uint32(g))
	}
	id := multicast.MsgID{Client: client, Seq: s.seq}
	tl := &tally{c: c, start: start, id: id}

	// The awaits end with the call: cancel them, then wait for them, so
	// that no goroutine outlives it.
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	errs := make(chan error, dst.Len())
	awaitAt := func(g partition.GroupID) {
		wg.Go(func() {
			piece, err := c.await(ctx, g, id)
			if err == nil {
				err = tl.add(g, piece)
			}
			errs <- err
		})
	}
	pending := 0
	for _, g := range dst.Slice() {
		if g != entry {
			awaitAt(g)
			pending++
		}
	}

	var resp *apipb.TxnResponse
	var o outcome
	err = c.invoke(ctx, entry, true, "txn "+id.String(), func(ctx context.Context, kv apipb.KVClient, opts ...grpc.CallOption) error {
		var md metadata.MD
		r, err := kv.Txn(ctx, req, append(opts, grpc.Trailer(&md))...)
		resp = r
		o.attempt(err, md)
		c.epochFromTrailer(md)
		return err
	})
	if destinationsDiffer(err) {
		return nil, &classError{class: ErrInconsistent, err: fmt.Errorf("client: %s: the entry group %s routes it elsewhere: %w", id, c.view.Groups.Name(entry), err)}
	}
	if err != nil {
		return nil, expired(err, id.String(), &o)
	}
	switch {
	case dst.Has(entry) && resp.GetExecuted():
		if err := tl.add(entry, resp.GetPiece()); err != nil {
			return nil, err
		}
	case dst.Has(entry):
		awaitAt(entry)
		pending++
	case resp.GetExecuted():
		return nil, fmt.Errorf("%w: %s: group %s executed a piece but is not a destination", ErrInconsistent, id, c.view.Groups.Name(entry))
	}
	for ; pending > 0; pending-- {
		if err := <-errs; err != nil {
			return nil, err
		}
	}
	return c.merge(tl)
}

// await waits for group g's answer for transaction id.
func (c *Client) await(ctx context.Context, g partition.GroupID, id multicast.MsgID) (*apipb.PieceResult, error) {
	var piece *apipb.PieceResult
	err := c.invoke(ctx, g, false, "await "+id.String(), func(ctx context.Context, kv apipb.KVClient, opts ...grpc.CallOption) error {
		r, err := kv.Await(ctx, &apipb.AwaitRequest{ClientId: id.Client, Seq: id.Seq, Group: c.view.Groups.Name(g)}, opts...)
		piece = r.GetPiece()
		return err
	})
	if err != nil {
		return nil, err
	}
	return piece, nil
}

// merge combines the recorded answers into the Result.
func (c *Client) merge(tl *tally) (*txn.Result, error) {
	pieces := make([]txn.PieceResult, len(tl.got))
	dests := make([]txn.DestLatency, len(tl.got))
	for i, a := range tl.got {
		p, err := api.PieceResultFromProto(a.piece)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInconsistent, err)
		}
		pieces[i] = p
		dests[i] = txn.DestLatency{Group: c.view.Groups.Name(a.group), Ms: a.ms}
	}
	res, err := txn.MergeResults(tl.id.String(), pieces)
	switch {
	case err == nil:
	case errors.Is(err, txn.ErrAborted):
		return nil, fmt.Errorf("client: %s aborted: %w", tl.id, err)
	case errors.Is(err, txn.ErrTruncated):
		res.Destinations = dests
		return &res, fmt.Errorf("client: %w", err)
	default:
		return nil, fmt.Errorf("%w: %w", ErrInconsistent, err)
	}
	res.Destinations = dests
	return &res, nil
}
