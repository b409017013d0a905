// Package api converts between the messages of FlexKV's client API (package
// kvpb, generated) and FlexKV's own types: transactions and results of
// package txn, the cluster configuration of package partition. The client
// and the server both convert through it, so the two sides of the wire agree
// by construction, and the generated code imports nothing hand-written.
package api

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// invalidError gives a conversion error the class txn.ErrInvalid without
// that error's text in the message, as package txn does for its own.
type invalidError struct{ err error }

func (e *invalidError) Error() string        { return e.err.Error() }
func (e *invalidError) Unwrap() error        { return e.err }
func (e *invalidError) Is(target error) bool { return target == txn.ErrInvalid }

func invalidf(format string, args ...any) error {
	return &invalidError{err: fmt.Errorf(format, args...)}
}

// TxnToProto converts t. It keeps what makes t invalid (an unknown kind, a
// compare without operand, a limit out of range), so that the receiver's
// validation reports it; it returns nil for a nil t.
func TxnToProto(t *txn.Txn) *apipb.Txn {
	if t == nil {
		return nil
	}
	p := &apipb.Txn{}
	if len(t.If) > 0 {
		p.If = make([]*apipb.Compare, len(t.If))
	}
	for i, c := range t.If {
		pc := &apipb.Compare{Key: c.Key, Cmp: apipb.Cmp(c.Cmp)}
		switch {
		case c.Int != nil:
			pc.Operand = &apipb.Compare_Int{Int: *c.Int}
		case c.Value != nil:
			pc.Operand = &apipb.Compare_Value{Value: c.Value}
		}
		p.If[i] = pc
	}
	p.Then = opsToProto(t.Then)
	p.Else = opsToProto(t.Else)
	return p
}

func opsToProto(ops []txn.Op) []*apipb.Op {
	if len(ops) == 0 {
		return nil
	}
	out := make([]*apipb.Op, len(ops))
	for i, o := range ops {
		limit := uint32(math.MaxUint32) // out of range stays out of range
		if o.Limit >= 0 && uint64(o.Limit) < math.MaxUint32 {
			limit = uint32(o.Limit)
		}
		out[i] = &apipb.Op{Kind: apipb.OpKind(o.Kind), Key: o.Key, Value: o.Value, Int: o.Int, End: o.End, Limit: limit, Wrap: o.Wrap}
	}
	return out
}

// catchAll is a partition map that holds every valid key: validating
// against it checks everything txn.Validate checks but the placement of the
// keys, which only the cluster's own map can tell.
var catchAll = func() *partition.PartitionMap {
	top, err := partition.NewTopology(partition.Spec{Groups: []partition.Group{{Name: "any"}}})
	if err != nil {
		panic(fmt.Sprintf("api: catch-all topology: %v", err))
	}
	// "\x00" is the smallest non-empty key: the range holds them all.
	pm, err := partition.NewPartitionMap(top, []partition.Partition{{Name: "all", Start: []byte{0}, Group: 0}})
	if err != nil {
		panic(fmt.Sprintf("api: catch-all partition map: %v", err))
	}
	return pm
}()

// TxnFromProto converts p and checks everything about it that needs no
// partition map (kinds, fields, bounds, keys, sizes), as txn.Validate does.
// Errors match txn.ErrInvalid and name the field: `api: then[1].kind:
// unknown op kind 9`. The Txn shares p's byte slices. Validate it against
// the cluster's partition map before routing it.
func TxnFromProto(p *apipb.Txn) (*txn.Txn, error) {
	if p == nil {
		return nil, invalidf("api: txn: missing")
	}
	t := &txn.Txn{}
	if len(p.If) > 0 {
		t.If = make([]txn.Compare, len(p.If))
	}
	for i, pc := range p.If {
		if pc == nil {
			return nil, invalidf("api: if[%d]: missing", i)
		}
		c := txn.Compare{Key: pc.Key, Cmp: txn.Cmp(pc.Cmp)}
		if !c.Cmp.Valid() || int32(pc.Cmp) != int32(c.Cmp) {
			return nil, invalidf("api: if[%d].cmp: unknown relation %d", i, pc.Cmp)
		}
		switch op := pc.Operand.(type) {
		case *apipb.Compare_Int:
			v := op.Int
			c.Int = &v
		case *apipb.Compare_Value:
			c.Value = op.Value
			if c.Value == nil {
				c.Value = []byte{} // set: the empty value, not no operand
			}
		case nil:
			return nil, invalidf("api: if[%d]: neither int nor value given, want one", i)
		}
		t.If[i] = c
	}
	var err error
	if t.Then, err = opsFromProto("then", p.Then); err != nil {
		return nil, err
	}
	if t.Else, err = opsFromProto("else", p.Else); err != nil {
		return nil, err
	}
	if err := t.Validate(catchAll); err != nil {
		return nil, err
	}
	return t, nil
}

func opsFromProto(branch string, ops []*apipb.Op) ([]txn.Op, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	out := make([]txn.Op, len(ops))
	for i, po := range ops {
		if po == nil {
			return nil, invalidf("api: %s[%d]: missing", branch, i)
		}
		kind := txn.OpKind(po.Kind)
		if !kind.Valid() || int32(po.Kind) != int32(kind) {
			return nil, invalidf("api: %s[%d].kind: unknown op kind %d", branch, i, po.Kind)
		}
		if po.Limit > txn.ScanLimitMax {
			// Checked here as well as by Validate: on a 32-bit platform
			// the conversion to int could wrap.
			return nil, invalidf("api: %s[%d].limit: %d, want at most ScanLimitMax (%d)", branch, i, po.Limit, txn.ScanLimitMax)
		}
		out[i] = txn.Op{Kind: kind, Key: po.Key, Value: po.Value, Int: po.Int, End: po.End, Limit: int(po.Limit), Wrap: po.Wrap}
	}
	return out, nil
}

// KVsToProto converts the pairs of a scan.
func KVsToProto(kvs []txn.KV) []*apipb.KeyValue {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]*apipb.KeyValue, len(kvs))
	for i, kv := range kvs {
		out[i] = &apipb.KeyValue{Key: kv.Key, Value: kv.Value}
	}
	return out
}

// KVsFromProto converts the pairs of a scan; a missing pair is an empty
// one.
func KVsFromProto(kvs []*apipb.KeyValue) []txn.KV {
	if len(kvs) == 0 {
		return nil
	}
	out := make([]txn.KV, len(kvs))
	for i, kv := range kvs {
		out[i] = txn.KV{Key: kv.GetKey(), Value: kv.GetValue()}
	}
	return out
}

// ResultToProto converts the result of one operation. A negative Index
// (never produced by the executor) becomes the largest index.
func ResultToProto(r txn.OpResult) *apipb.OpResult {
	index := uint32(math.MaxUint32)
	if r.Index >= 0 && uint64(r.Index) < math.MaxUint32 {
		index = uint32(r.Index)
	}
	return &apipb.OpResult{
		Index: index, Kind: apipb.OpKind(r.Kind), Key: r.Key, Found: r.Found, Value: r.Value, Int: r.Int,
		Kvs: KVsToProto(r.KVs),
	}
}

// ResultFromProto converts the result of one operation; an unknown kind or
// an index beyond txn.OpsMax is an error.
func ResultFromProto(p *apipb.OpResult) (txn.OpResult, error) {
	if p == nil {
		return txn.OpResult{}, fmt.Errorf("api: result: missing")
	}
	kind := txn.OpKind(p.Kind)
	if !kind.Valid() || int32(p.Kind) != int32(kind) {
		return txn.OpResult{}, fmt.Errorf("api: result %d: unknown op kind %d", p.Index, p.Kind)
	}
	if p.Index >= txn.OpsMax {
		return txn.OpResult{}, fmt.Errorf("api: result index %d, want less than OpsMax (%d)", p.Index, txn.OpsMax)
	}
	return txn.OpResult{
		Index: int(p.Index), Kind: kind, Key: p.Key, Found: p.Found, Value: p.Value, Int: p.Int,
		KVs: KVsFromProto(p.Kvs),
	}, nil
}

// ResultsToProto converts the results of a piece.
func ResultsToProto(rs []txn.OpResult) []*apipb.OpResult {
	if len(rs) == 0 {
		return nil
	}
	out := make([]*apipb.OpResult, len(rs))
	for i, r := range rs {
		out[i] = ResultToProto(r)
	}
	return out
}

// ResultsFromProto converts the results of a piece.
func ResultsFromProto(ps []*apipb.OpResult) ([]txn.OpResult, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	out := make([]txn.OpResult, len(ps))
	for i, p := range ps {
		r, err := ResultFromProto(p)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

// PieceResultToProto converts group's result for its piece of transaction
// id. The id travels as its numbers (client_id, seq), and in its
// deprecated string form for older clients.
func PieceResultToProto(id multicast.MsgID, group string, r *txn.PieceResult) *apipb.PieceResult {
	p := &apipb.PieceResult{
		Id:       id.String(), //nolint:staticcheck // deprecated, set for older clients
		ClientId: id.Client, Seq: id.Seq, Group: group,
		Succeeded: r.Succeeded, Results: ResultsToProto(r.Results), Truncated: r.Truncated,
	}
	if r.Aborted {
		p.Aborted = r.Reason
		if p.Aborted == "" {
			p.Aborted = "aborted" // an empty reason would read as no abort
		}
	}
	return p
}

// PieceResultFromProto converts a piece's result (its id and group aside,
// which the caller checks against what it asked).
func PieceResultFromProto(p *apipb.PieceResult) (txn.PieceResult, error) {
	if p == nil {
		return txn.PieceResult{}, fmt.Errorf("api: piece result: missing")
	}
	results, err := ResultsFromProto(p.Results)
	if err != nil {
		id := multicast.MsgID{Client: p.ClientId, Seq: p.Seq}
		return txn.PieceResult{}, fmt.Errorf("api: piece result of %s at %s: %w", id, p.Group, err)
	}
	return txn.PieceResult{
		Succeeded: p.Succeeded, Aborted: p.Aborted != "", Reason: p.Aborted, Results: results, Truncated: p.Truncated,
	}, nil
}

// ConfigToProto converts a cluster configuration and its latency matrix
// (nil: none) for a Topology answer. The overlay is always given in full
// (an empty Overlay means the order of the groups); the tree is sorted by
// child; the matrix is given whole, every region of it.
func ConfigToProto(cfg *partition.ClusterConfig, lat *partition.Latency) *apipb.TopologyResponse {
	p := &apipb.TopologyResponse{Protocol: cfg.Protocol, Overlay: slices.Clone(cfg.Overlay), Consistency: cfg.Consistency}
	if len(p.Overlay) == 0 {
		for _, g := range cfg.Groups {
			p.Overlay = append(p.Overlay, g.Name)
		}
	}
	for _, child := range slices.Sorted(maps.Keys(cfg.Tree)) {
		p.Tree = append(p.Tree, &apipb.TreeEdge{Child: child, Parent: cfg.Tree[child]})
	}
	for _, g := range cfg.Groups {
		pg := &apipb.Group{Name: g.Name, Region: g.Region}
		for _, r := range g.Replicas {
			pg.Replicas = append(pg.Replicas, &apipb.Replica{Id: r.ID, Raft: r.Raft, Grpc: r.GRPC, Peer: r.Peer, Http: r.HTTP})
		}
		p.Groups = append(p.Groups, pg)
	}
	for _, part := range cfg.Partitions {
		p.Partitions = append(p.Partitions, &apipb.Partition{
			Name: part.Name, Start: []byte(part.Start), End: []byte(part.End), Group: part.Group, Replicated: part.Replicated,
		})
	}
	if lat != nil {
		p.Regions = lat.Regions()
		for _, from := range p.Regions {
			row := &apipb.LatencyRow{Region: from, RttMs: make([]float64, len(p.Regions))}
			for j, to := range p.Regions {
				row.RttMs[j] = lat.RTTMs(from, to)
			}
			p.Latency = append(p.Latency, row)
		}
	}
	return p
}

// ConfigFromProto converts a Topology answer back to the cluster
// configuration, which it validates (partition.ClusterConfig.Validate), and
// its latency matrix, nil when the answer has none. Every group's region
// must be in the matrix. The configuration's Latency path is empty: the
// matrix is returned instead.
func ConfigFromProto(p *apipb.TopologyResponse) (*partition.ClusterConfig, *partition.Latency, error) {
	if p == nil {
		return nil, nil, fmt.Errorf("api: topology: missing")
	}
	// A later epoch's members may hold a learner on its way in: any
	// number of replicas (DESIGN 14).
	cfg := &partition.ClusterConfig{Protocol: p.Protocol, Overlay: slices.Clone(p.Overlay), EpochMembers: p.GetEpoch() > 1, Consistency: p.GetConsistency()}
	if len(p.Tree) > 0 {
		cfg.Tree = make(map[string]string, len(p.Tree))
	}
	for i, e := range p.Tree {
		if _, dup := cfg.Tree[e.GetChild()]; dup {
			return nil, nil, fmt.Errorf("api: topology: tree[%d]: child %q given twice", i, e.GetChild())
		}
		cfg.Tree[e.GetChild()] = e.GetParent()
	}
	for _, g := range p.Groups {
		gc := partition.GroupConfig{Name: g.GetName(), Region: g.GetRegion()}
		for _, r := range g.GetReplicas() {
			gc.Replicas = append(gc.Replicas, partition.ReplicaConfig{ID: r.GetId(), Raft: r.GetRaft(), GRPC: r.GetGrpc(), Peer: r.GetPeer(), HTTP: r.GetHttp()})
		}
		cfg.Groups = append(cfg.Groups, gc)
	}
	for _, part := range p.Partitions {
		cfg.Partitions = append(cfg.Partitions, partition.PartitionConfig{
			Name: part.GetName(), Start: string(part.GetStart()), End: string(part.GetEnd()),
			Group: part.GetGroup(), Replicated: part.GetReplicated(),
		})
	}
	if err := protocol.Validate(cfg); err != nil {
		return nil, nil, fmt.Errorf("api: topology: %w", err)
	}
	if len(p.Regions) == 0 && len(p.Latency) == 0 {
		return cfg, nil, nil
	}
	if len(p.Latency) != len(p.Regions) {
		return nil, nil, fmt.Errorf("api: topology: %d latency rows for %d regions", len(p.Latency), len(p.Regions))
	}
	rtt := make([][]float64, len(p.Latency))
	for i, row := range p.Latency {
		if row.GetRegion() != p.Regions[i] {
			return nil, nil, fmt.Errorf("api: topology: latency[%d] is region %q, want %q (rows in the order of regions)",
				i, row.GetRegion(), p.Regions[i])
		}
		rtt[i] = row.GetRttMs()
	}
	lat, err := partition.NewLatency(p.Regions, rtt)
	if err != nil {
		return nil, nil, fmt.Errorf("api: topology: %w", err)
	}
	for i, g := range cfg.Groups {
		region := g.Region
		if region == "" {
			region = g.Name
		}
		if !lat.Has(region) {
			return nil, nil, fmt.Errorf("api: topology: groups[%d]: region %q of group %q is not in the latency matrix",
				i, region, g.Name)
		}
	}
	return cfg, lat, nil
}

// SetEpochOverlay fills the epoch_overlay and epoch_tree of a Topology
// answer from top, the topology of the answering group's epoch (its ranks
// and tree; group.State.Topology).
func SetEpochOverlay(p *apipb.TopologyResponse, top *partition.Topology) {
	r := top.Ranks()
	p.EpochOverlay = make([]string, top.Len())
	for k := range top.Len() {
		p.EpochOverlay[k] = top.Name(r.Group(partition.GroupID(k)))
	}
	p.EpochTree = nil
	if !top.HasTree() {
		return
	}
	for g := range top.Len() {
		if par := top.Parent(partition.GroupID(g)); par != partition.NoGroup {
			p.EpochTree = append(p.EpochTree, &apipb.TreeEdge{Child: top.Name(partition.GroupID(g)), Parent: top.Name(par)})
		}
	}
	slices.SortFunc(p.EpochTree, func(a, b *apipb.TreeEdge) int { return strings.Compare(a.Child, b.Child) })
}

// EpochTopology returns the topology of the epoch of a Topology answer:
// top (the answer's groups, numbered by its overlay) ranked by
// epoch_overlay, with epoch_tree. An answer without them (a server older
// than overlay changes) gives top.
func EpochTopology(p *apipb.TopologyResponse, top *partition.Topology) (*partition.Topology, error) {
	if len(p.GetEpochOverlay()) == 0 {
		return top, nil
	}
	order := make([]partition.GroupID, 0, len(p.EpochOverlay))
	for _, name := range p.EpochOverlay {
		g, ok := top.Lookup(name)
		if !ok {
			return nil, fmt.Errorf("api: topology: epoch overlay names unknown group %q", name)
		}
		order = append(order, g)
	}
	var parent []partition.GroupID
	if len(p.EpochTree) > 0 {
		parent = make([]partition.GroupID, top.Len())
		for g := range parent {
			parent[g] = partition.NoGroup
		}
		for _, e := range p.EpochTree {
			c, ok1 := top.Lookup(e.GetChild())
			par, ok2 := top.Lookup(e.GetParent())
			if !ok1 || !ok2 {
				return nil, fmt.Errorf("api: topology: epoch tree edge %s=%s names an unknown group", e.GetChild(), e.GetParent())
			}
			parent[c] = par
		}
	}
	t, err := top.WithOverlay(order, parent)
	if err != nil {
		return nil, fmt.Errorf("api: topology: epoch overlay: %w", err)
	}
	return t, nil
}
