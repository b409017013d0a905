package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/flexkv/flexkv/api"
	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// The fake cluster: real gRPC servers on loopback listeners, one per
// replica, over one shared in-memory state that executes transactions with
// package txn (Pieces, EvalVote, Eval), deduplicates them by id, and keeps
// each group's piece result for Await. Each replica can be scripted to
// misbehave: not be the leader, be busy, lose a response, hold an answer.
//
// Groups a, b, c (ranks 0, 1, 2) in regions ra, rb, rc, three replicas
// each. Keys "a/..." belong to a, "b/..." to b, "c/..." to c, "i/..." are
// replicated (an item table); any other key is in no partition.

const groupsN, replicasN = 3, 3

type fakeCluster struct {
	cfg *partition.ClusterConfig
	lat *partition.Latency
	top *partition.Topology
	pm  *partition.PartitionMap
	rep [groupsN][replicasN]*fakeReplica

	mu         sync.Mutex
	leader     [groupsN]int // index of each group's leader
	noHint     bool         // followers redirect without a leader hint
	stores     [groupsN]*txn.MemStore
	dsts       map[string]partition.GroupSet
	results    map[string]map[partition.GroupID]*apipb.PieceResult
	executions int
	changed    chan struct{}          // closed and replaced on every execution
	gates      [groupsN]chan struct{} // when set, Await at the group waits for it
	flip       [groupsN]bool          // Await at the group reports the other outcome
	awaits     int                    // Await handlers running, at every replica
	scanPage   int                    // when set, a Scan answers at most this many keys and pages the rest
	sessions   int                    // sessions opened
	reads      uint64                 // reads without an id, each run as its own transaction
	// extraDst are groups the fake adds to every transaction's
	// destinations: a server whose configuration is not the client's.
	extraDst partition.GroupSet
	// topology, when set, is what Topology answers in place of cfg, at
	// epoch (members of an epoch, DESIGN 14).
	topology *partition.ClusterConfig
	epoch    uint64
}

// fakeOptions shape a fake cluster.
type fakeOptions struct {
	protocol string
	dead     [][2]int // {group, replica} addresses that nobody serves
}

// call is one request a replica received.
type call struct {
	method string
	id     string // c<client>.<seq>, or the awaited id
}

type fakeReplica struct {
	apipb.UnimplementedKVServer
	cl    *fakeCluster
	group partition.GroupID
	index int
	addr  string

	mu     sync.Mutex
	calls  []call
	script map[string][]func(ctx context.Context) error
}

func newFakeCluster(t *testing.T, o fakeOptions) *fakeCluster {
	t.Helper()
	cl, stop, err := startFake(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return cl
}

// startFake starts a fake cluster; stop stops its servers.
func startFake(o fakeOptions) (cl *fakeCluster, stop func(), err error) {
	if o.protocol == "" {
		o.protocol = "flexcast"
	}
	cl = &fakeCluster{
		dsts:    make(map[string]partition.GroupSet),
		results: make(map[string]map[partition.GroupID]*apipb.PieceResult),
		changed: make(chan struct{}),
	}
	names := []string{"a", "b", "c"}
	cfg := &partition.ClusterConfig{
		Protocol: o.protocol,
		Overlay:  names,
		Tree:     map[string]string{"b": "a", "c": "a"},
		Partitions: []partition.PartitionConfig{
			{Name: "pa", Start: "a/", End: "a0", Group: "a"},
			{Name: "pb", Start: "b/", End: "b0", Group: "b"},
			{Name: "pc", Start: "c/", End: "c0", Group: "c"},
			{Name: "items", Start: "i/", End: "i0", Replicated: true},
		},
	}
	var servers []*grpc.Server
	stop = func() {
		for _, s := range servers {
			s.Stop()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	dead := 0
	for g, name := range names {
		gc := partition.GroupConfig{Name: name, Region: "r" + name}
		for i := range replicasN {
			// The raft addresses are never dialed: the client talks to
			// the gRPC ones alone.
			rc := partition.ReplicaConfig{ID: fmt.Sprintf("%s%d", name, i), Raft: fmt.Sprintf("127.0.0.1:%d", 101+g*replicasN+i)}
			if slices.Contains(o.dead, [2]int{g, i}) {
				// A privileged port nothing listens on refuses
				// connections; not a port that was free a moment ago,
				// which another test could take, or, in the ephemeral
				// range, a dial could connect to itself with.
				dead++
				addr, err := testaddr.RefusedAddr(dead)
				if err != nil {
					return nil, nil, err
				}
				cl.rep[g][i] = &fakeReplica{cl: cl, group: partition.GroupID(g), index: i, addr: addr}
				rc.GRPC, rc.Peer = addr, fakePeerAddr(addr)
				gc.Replicas = append(gc.Replicas, rc)
				continue
			}
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return nil, nil, err
			}
			r := &fakeReplica{cl: cl, group: partition.GroupID(g), index: i, addr: lis.Addr().String()}
			cl.rep[g][i] = r
			rc.GRPC, rc.Peer = r.addr, fakePeerAddr(r.addr)
			gc.Replicas = append(gc.Replicas, rc)
			srv := grpc.NewServer()
			apipb.RegisterKVServer(srv, r)
			servers = append(servers, srv)
			go func() { _ = srv.Serve(lis) }()
		}
		cfg.Groups = append(cfg.Groups, gc)
	}
	top, pm, err := cfg.Build()
	if err != nil {
		return nil, nil, err
	}
	// rd is a region without a group.
	lat, err := partition.NewLatency([]string{"ra", "rb", "rc", "rd"}, [][]float64{
		{1, 10, 50, 100},
		{10, 1, 20, 30},
		{50, 20, 1, 5},
		{100, 30, 5, 1},
	})
	if err != nil {
		return nil, nil, err
	}
	cl.cfg, cl.lat, cl.top, cl.pm = cfg, lat, top, pm
	for g := range groupsN {
		cl.stores[g] = txn.NewMemStore(nil)
	}
	return cl, stop, nil
}

// endpoint returns the address of replica i of group g.
func (cl *fakeCluster) endpoint(g, i int) string { return cl.rep[g][i].addr }

func (cl *fakeCluster) setLeader(g, i int) {
	cl.mu.Lock()
	cl.leader[g] = i
	cl.mu.Unlock()
}

// gate makes Await at group g wait until the returned function is called.
func (cl *fakeCluster) gate(g int) (open func()) {
	ch := make(chan struct{})
	cl.mu.Lock()
	cl.gates[g] = ch
	cl.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(ch) }) }
}

// waitAwaits waits until no Await handler runs at any replica. A call the
// client gave up on ends at the server only once the server has read the
// cancellation, which on a loaded machine under -race can take longer than
// goleak waits for a goroutine to end: a leak check of the client waits
// for this first, so that it sees the client's goroutines alone.
func (cl *fakeCluster) waitAwaits(t *testing.T) {
	t.Helper()
	const waitMax = 10 * time.Second
	deadline := time.Now().Add(waitMax)
	for {
		cl.mu.Lock()
		n := cl.awaits
		cl.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d Await handlers of the fake cluster still run %v after their calls ended", n, waitMax)
		}
		time.Sleep(time.Millisecond)
	}
}

// calls returns every call every replica received, by "group/replica".
func (cl *fakeCluster) calls() map[string][]call {
	out := map[string][]call{}
	for g := range groupsN {
		for i := range replicasN {
			r := cl.rep[g][i]
			r.mu.Lock()
			if len(r.calls) > 0 {
				out[fmt.Sprintf("%s/%d", cl.top.Name(partition.GroupID(g)), i)] = slices.Clone(r.calls)
			}
			r.mu.Unlock()
		}
	}
	return out
}

// count returns how many calls of method replica i of group g received.
func (cl *fakeCluster) count(g, i int, method string) int {
	r := cl.rep[g][i]
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.calls {
		if c.method == method {
			n++
		}
	}
	return n
}

// then queues behaviours for the next calls of method ("txn",
// "txn-answer" after the execution, "await", "get", "put", ...), one per
// call; a behaviour returning nil lets the call go on.
func (r *fakeReplica) then(method string, fs ...func(ctx context.Context) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.script == nil {
		r.script = map[string][]func(ctx context.Context) error{}
	}
	r.script[method] = append(r.script[method], fs...)
}

// scripted runs the next behaviour queued for method, if any.
func (r *fakeReplica) scripted(ctx context.Context, method string) error {
	r.mu.Lock()
	var f func(ctx context.Context) error
	if q := r.script[method]; len(q) > 0 {
		f, r.script[method] = q[0], q[1:]
	}
	r.mu.Unlock()
	if f == nil {
		return nil
	}
	return f(ctx)
}

func (r *fakeReplica) record(method, id string) {
	r.mu.Lock()
	r.calls = append(r.calls, call{method: method, id: id})
	r.mu.Unlock()
}

// Behaviours.
func busy(context.Context) error { return status.Error(codes.ResourceExhausted, "fake: outbox full") }

func unavailable(hint string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if hint != "" {
			_ = grpc.SetTrailer(ctx, metadata.Pairs(apipb.LeaderTrailer, hint))
		}
		return status.Error(codes.Unavailable, "fake: not the leader")
	}
}

// leaderCheck answers Unavailable, with the leader's address as a hint,
// unless r is its group's leader.
func (r *fakeReplica) leaderCheck(ctx context.Context) error {
	cl := r.cl
	cl.mu.Lock()
	leader, noHint := cl.leader[r.group], cl.noHint
	cl.mu.Unlock()
	if leader == r.index {
		return nil
	}
	hint := ""
	if !noHint {
		hint = cl.rep[r.group][leader].addr
	}
	// A follower proposes nothing: it says so, as the servers do.
	_ = grpc.SetTrailer(ctx, metadata.Pairs(apipb.NotRunTrailer, "1"))
	return unavailable(hint)(ctx)
}

func idOf(client, seq uint64) string { return multicast.MsgID{Client: client, Seq: seq}.String() }

// OpenSession opens a session at the leader: ids from 64 up, unique in the
// cluster.
func (r *fakeReplica) OpenSession(ctx context.Context, _ *apipb.OpenSessionRequest) (*apipb.OpenSessionResponse, error) {
	r.record("open", "")
	if err := r.scripted(ctx, "open"); err != nil {
		return nil, err
	}
	if err := r.leaderCheck(ctx); err != nil {
		return nil, err
	}
	cl := r.cl
	cl.mu.Lock()
	defer cl.mu.Unlock()
	cl.sessions++
	return &apipb.OpenSessionResponse{ClientId: 64*uint64(cl.sessions) + uint64(r.group)}, nil
}

func (r *fakeReplica) Topology(context.Context, *apipb.TopologyRequest) (*apipb.TopologyResponse, error) {
	r.record("topology", "")
	r.cl.mu.Lock()
	cfg, epoch := r.cl.cfg, r.cl.epoch
	if r.cl.topology != nil {
		cfg = r.cl.topology
	}
	r.cl.mu.Unlock()
	resp := api.ConfigToProto(cfg, r.cl.lat)
	resp.Epoch = epoch
	return resp, nil
}

func (r *fakeReplica) Txn(ctx context.Context, req *apipb.TxnRequest) (*apipb.TxnResponse, error) {
	id := idOf(req.GetClientId(), req.GetSeq())
	r.record("txn", id)
	if err := r.scripted(ctx, "txn"); err != nil {
		return nil, err
	}
	if err := r.leaderCheck(ctx); err != nil {
		return nil, err
	}
	dst, err := r.cl.execute(id, req)
	if _, ok := status.FromError(err); ok && err != nil {
		return nil, err
	}
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	resp := &apipb.TxnResponse{}
	for _, g := range dst.Slice() {
		resp.Destinations = append(resp.Destinations, r.cl.top.Name(g))
	}
	if dst.Has(r.group) {
		resp.Piece, resp.Executed = r.cl.piece(id, r.group), true
	}
	if err := r.scripted(ctx, "txn-answer"); err != nil {
		return nil, err
	}
	return resp, nil
}

func (r *fakeReplica) Await(ctx context.Context, req *apipb.AwaitRequest) (*apipb.AwaitResponse, error) {
	cl := r.cl
	cl.mu.Lock()
	cl.awaits++
	cl.mu.Unlock()
	defer func() {
		cl.mu.Lock()
		cl.awaits--
		cl.mu.Unlock()
	}()
	id := idOf(req.GetClientId(), req.GetSeq())
	r.record("await", id)
	if err := r.scripted(ctx, "await"); err != nil {
		return nil, err
	}
	for {
		cl.mu.Lock()
		piece := cl.results[id][r.group]
		changed, gate, flip := cl.changed, cl.gates[r.group], cl.flip[r.group]
		cl.mu.Unlock()
		if piece != nil {
			if gate != nil {
				select {
				case <-gate:
				case <-ctx.Done():
					return nil, status.FromContextError(ctx.Err()).Err()
				}
			}
			if flip {
				piece = proto.Clone(piece).(*apipb.PieceResult)
				piece.Succeeded = !piece.Succeeded
			}
			return &apipb.AwaitResponse{Piece: piece}, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
}

// single runs a one-operation transaction at r, its group's leader.
func (r *fakeReplica) single(ctx context.Context, method string, client, seq uint64, op txn.Op) (txn.OpResult, error) {
	id := idOf(client, seq)
	if client == 0 && seq == 0 {
		r.cl.mu.Lock()
		r.cl.reads++
		id = fmt.Sprintf("read.%d", r.cl.reads) // as the server's anonymous ids: not deduplicated
		r.cl.mu.Unlock()
	}
	r.record(method, id)
	if err := r.scripted(ctx, method); err != nil {
		return txn.OpResult{}, err
	}
	if err := r.leaderCheck(ctx); err != nil {
		return txn.OpResult{}, err
	}
	t := &txn.Txn{Then: []txn.Op{op}}
	dst, err := r.cl.execute(id, &apipb.TxnRequest{
		ClientId: client, Seq: seq,
		Body: &apipb.TxnRequest_Txn{Txn: api.TxnToProto(t)}, HomeGroup: r.cl.top.Name(r.group),
	})
	if err != nil {
		return txn.OpResult{}, status.Error(codes.InvalidArgument, err.Error())
	}
	if dst != partition.SetOf(r.group) {
		return txn.OpResult{}, status.Errorf(codes.FailedPrecondition, "fake: %s is not for group %s", id, r.cl.top.Name(r.group))
	}
	p, err := api.PieceResultFromProto(r.cl.piece(id, r.group))
	if err != nil || len(p.Results) != 1 {
		return txn.OpResult{}, status.Errorf(codes.Internal, "fake: %s: %v %v", id, p, err)
	}
	return p.Results[0], nil
}

func (r *fakeReplica) Get(ctx context.Context, req *apipb.GetRequest) (*apipb.GetResponse, error) {
	res, err := r.single(ctx, "get", req.GetClientId(), req.GetSeq(), txn.Op{Kind: txn.OpGet, Key: req.GetKey()})
	if err != nil {
		return nil, err
	}
	return &apipb.GetResponse{Found: res.Found, Value: res.Value}, nil
}

func (r *fakeReplica) Put(ctx context.Context, req *apipb.PutRequest) (*apipb.PutResponse, error) {
	_, err := r.single(ctx, "put", req.GetClientId(), req.GetSeq(), txn.Op{Kind: txn.OpPut, Key: req.GetKey(), Value: req.GetValue()})
	if err != nil {
		return nil, err
	}
	return &apipb.PutResponse{}, nil
}

func (r *fakeReplica) Delete(ctx context.Context, req *apipb.DeleteRequest) (*apipb.DeleteResponse, error) {
	_, err := r.single(ctx, "delete", req.GetClientId(), req.GetSeq(), txn.Op{Kind: txn.OpDelete, Key: req.GetKey()})
	if err != nil {
		return nil, err
	}
	return &apipb.DeleteResponse{}, nil
}

func (r *fakeReplica) Scan(ctx context.Context, req *apipb.ScanRequest) (*apipb.ScanResponse, error) {
	op := txn.Op{Kind: txn.OpScan, Key: req.GetStart(), End: req.GetEnd(), Limit: int(req.GetLimit())}
	r.cl.mu.Lock()
	page := r.cl.scanPage
	r.cl.mu.Unlock()
	if page > 0 && op.Limit > page {
		op.Limit = page + 1 // one more: the page's next_start
	}
	res, err := r.single(ctx, "scan", req.GetClientId(), req.GetSeq(), op)
	if err != nil {
		return nil, err
	}
	var next []byte
	if page > 0 && len(res.KVs) > page {
		next, res.KVs = res.KVs[page].Key, res.KVs[:page]
	}
	return &apipb.ScanResponse{Kvs: api.KVsToProto(res.KVs), NextStart: next}, nil
}

// piece returns group g's result for id.
func (cl *fakeCluster) piece(id string, g partition.GroupID) *apipb.PieceResult {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	return cl.results[id][g]
}

// execute runs the request with id once, at every destination, and
// returns its destinations; a request seen before is not run again.
func (cl *fakeCluster) execute(id string, req *apipb.TxnRequest) (partition.GroupSet, error) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if dst, ok := cl.dsts[id]; ok {
		return dst, nil
	}
	home := partition.GroupID(0)
	if h := req.GetHomeGroup(); h != "" {
		var ok bool
		if home, ok = cl.top.Lookup(h); !ok {
			return 0, fmt.Errorf("fake: unknown home group %q", h)
		}
	}
	results := map[partition.GroupID]*apipb.PieceResult{}
	mid := multicast.MsgID{Client: req.GetClientId(), Seq: req.GetSeq()}
	var dst partition.GroupSet
	switch {
	case req.GetTxn() != nil:
		t, err := api.TxnFromProto(req.GetTxn())
		if err != nil {
			return 0, err
		}
		if dst, err = t.Destinations(cl.pm, cl.top, home); err != nil {
			return 0, err
		}
		if dst, err = cl.checkNamed(id, req, dst); err != nil {
			return 0, err
		}
		pieces, err := t.Pieces(cl.pm, cl.top, dst)
		if err != nil {
			return 0, err
		}
		var votes []txn.Vote
		for i := range pieces {
			if p := &pieces[i]; !p.VoteTo.Empty() {
				v, err := txn.EvalVote(cl.stores[p.Group], p)
				if err != nil {
					return 0, err
				}
				votes = append(votes, v)
			}
		}
		for i := range pieces {
			p := &pieces[i]
			var mine []txn.Vote
			for _, v := range votes {
				if p.Voters.Has(v.Group) {
					mine = append(mine, v)
				}
			}
			var res txn.PieceResult
			ok, ops, err := txn.Eval(cl.stores[p.Group], cl.stores[p.Group], p, mine...)
			switch {
			case errors.Is(err, txn.ErrAborted):
				res = txn.PieceResult{Aborted: true, Reason: err.Error()}
			case err != nil:
				return 0, err
			default:
				res = txn.PieceResult{Succeeded: ok, Results: ops}
			}
			results[p.Group] = api.PieceResultToProto(mid, cl.top.Name(p.Group), &res)
		}
	case req.GetCall() != nil:
		var err error
		if dst, err = cl.pm.Destinations(req.GetCall().GetKeys()); err != nil {
			return 0, err
		}
		if dst.Empty() {
			dst = partition.SetOf(home)
		}
		if dst, err = cl.checkNamed(id, req, dst); err != nil {
			return 0, err
		}
		for _, g := range dst.Slice() {
			results[g] = &apipb.PieceResult{ClientId: mid.Client, Seq: mid.Seq, Group: cl.top.Name(g), Succeeded: true}
		}
	default:
		return 0, errors.New("fake: neither txn nor call")
	}
	cl.dsts[id], cl.results[id] = dst, results
	cl.executions++
	close(cl.changed)
	cl.changed = make(chan struct{})
	return dst, nil
}

// checkNamed adds extraDst to dst, the destinations the fake computed for
// request id, and refuses the request, as a server does, if it names other
// destination groups.
func (cl *fakeCluster) checkNamed(id string, req *apipb.TxnRequest, dst partition.GroupSet) (partition.GroupSet, error) {
	for _, g := range cl.extraDst.Slice() {
		dst = dst.Add(g)
	}
	named := req.GetDestinationGroups()
	if len(named) == 0 {
		return dst, nil
	}
	var theirs partition.GroupSet
	for _, g := range named {
		theirs = theirs.Add(partition.GroupID(g))
	}
	if theirs != dst || len(named) != dst.Len() {
		return 0, status.Errorf(codes.FailedPrecondition, "fake: %s: %s: the client routes it to %v, the fake to %v", id, apipb.DestinationsDifferText, named, dst.Slice())
	}
	return dst, nil
}

// valueOf is the value s holds at key, "" if none.
func valueOf(s *txn.MemStore, key string) string {
	v, _, _ := s.Get([]byte(key))
	return string(v)
}

// fakePeerAddr is a peer address of a fake replica at addr, unique like it
// (the fakes serve no peer service; the configuration must name one).
func fakePeerAddr(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return net.JoinHostPort("peer.invalid", port)
}
