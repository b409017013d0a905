package dbsim

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// The data of a run. Group g owns one partition, "p<g>/" up to "p<g>0"
// ('0' follows '/'), which holds AccountsPerGroup bank accounts
// "p<g>/a/<i>" and ListsPerGroup lists "p<g>/l/<i>".
const (
	AccountsPerGroup = 2
	ListsPerGroup    = 2
	ListCap          = 6
	// initialBalance is what the loader adds to every account.
	initialBalance = 100
)

func partitionStart(g int) string { return "p" + strconv.Itoa(g) + "/" }

func accountKey(g, i int) string { return partitionStart(g) + "a/" + strconv.Itoa(i) }

func listKey(g, i int) string { return partitionStart(g) + "l/" + strconv.Itoa(i) }

// noiseKey is the key of group g that anonymous requests write
// (Config.Anonymous), which no check reads.
func noiseKey(g int) string { return partitionStart(g) + "n" }

// newWorld returns the topology and partition map of n groups g0..g<n-1>,
// ranked in that order, with g0 the root of a tree whose other groups hang
// from their predecessor in pairs: g1 and g2 under g0, g3 under g1.
func newWorld(n int) (*partition.Topology, *partition.PartitionMap, error) {
	spec := partition.Spec{Parent: map[string]string{}}
	for g := range n {
		name := "g" + strconv.Itoa(g)
		spec.Groups = append(spec.Groups, partition.Group{Name: name})
		if g > 0 {
			spec.Parent[name] = "g" + strconv.Itoa((g-1)/2)
		}
	}
	top, err := partition.NewTopology(spec)
	if err != nil {
		return nil, nil, err
	}
	var parts []partition.Partition
	for g := range n {
		start := partitionStart(g)
		parts = append(parts, partition.Partition{
			Name:  "p" + strconv.Itoa(g),
			Start: []byte(start),
			End:   []byte(start[:len(start)-1] + "0"),
			Group: partition.GroupID(g),
		})
	}
	pm, err := partition.NewPartitionMap(top, parts)
	if err != nil {
		return nil, nil, err
	}
	return top, pm, nil
}

// AppendProc is the stored procedure "append" (args "ID KEY..."): every
// group appends ID to each list it owns among KEY..., a list being the
// comma-separated IDs appended so far, and reports what each list held
// before. A list holds ListCap ids at most: an append to a full list
// aborts that group's piece, and so the call at every destination (DESIGN
// 6), which the checks verify: an aborted append is in none of its lists.
// With Open, only the first list of each group ("p<g>/l/0") has the cap
// and the others none, so a piece whose group owns none of the call's
// capped lists cannot abort: it sends no vote, and waits for the votes of
// those that can (txn.PieceVotes). A call is the list-append transaction of Elle (Kingsbury and
// Alvaro, 2020): the lists' final orders and what every call read are
// checked for serializability.
type AppendProc struct {
	Open bool // only the first list of each group has a cap
}

// ProcName is the name AppendProc is registered under.
const ProcName = "append"

func parseAppend(args []byte) (id string, keys [][]byte, err error) {
	fields := bytes.Fields(args)
	if len(fields) < 2 {
		return "", nil, fmt.Errorf("dbsim: append %q: want an id and at least one key", args)
	}
	return string(fields[0]), fields[1:], nil
}

// AllOrNothing makes every call commit at every destination or at none
// (txn.AllOrNothing): the checks verify it.
func (AppendProc) AllOrNothing() bool { return true }

// CanAbort implements txn.PieceVotes: a piece can abort when its group
// owns one of the call's capped lists.
func (a AppendProc) CanAbort(c *txn.CallPiece) bool {
	_, keys, err := parseAppend(c.Args)
	if err != nil {
		return false // every piece fails alike
	}
	for _, k := range keys {
		if a.capped(k) && c.Owns(k) {
			return true
		}
	}
	return false
}

// capped reports whether list key has a cap (see AppendProc).
func (a AppendProc) capped(key []byte) bool { return !a.Open || bytes.HasSuffix(key, []byte("/l/0")) }

// Keys implements txn.Procedure.
func (AppendProc) Keys(args []byte) ([][]byte, error) {
	_, keys, err := parseAppend(args)
	return keys, err
}

// Run implements txn.Procedure.
func (a AppendProc) Run(p *txn.ProcPiece) (txn.PieceResult, error) {
	id, keys, err := parseAppend(p.Args)
	if err != nil {
		return txn.PieceResult{}, err
	}
	res := txn.PieceResult{Succeeded: true}
	for i, k := range keys {
		if !p.Owns(k) {
			continue
		}
		v, found, err := p.Reader.Get(k)
		if err != nil {
			return txn.PieceResult{}, err
		}
		if a.capped(k) && found && bytes.Count(v, []byte(","))+1 >= ListCap {
			return txn.PieceResult{Aborted: true, Reason: fmt.Sprintf("list %s is full", k)}, nil
		}
		res.Results = append(res.Results, txn.OpResult{Index: i, Kind: txn.OpGet, Key: k, Found: found, Value: v})
		next := id
		if found && len(v) > 0 {
			next = string(v) + "," + id
		}
		if err := p.Writer.Put(k, []byte(next)); err != nil {
			return txn.PieceResult{}, err
		}
	}
	return res, nil
}

// A request is one transaction of a client: its message and what it does.
type request struct {
	msg  multicast.Message
	kind requestKind
	// transfer: amount moved from one account to another, if from holds
	// that much.
	from, to string
	amount   int64
	// append: the lists.
	lists []string
	// pieces are the destinations' results, once all answered.
	pieces []txn.PieceResult
	// invoked and done are the steps (plus one) at which the client first
	// tried to send the request and at which the last destination answered
	// it: its real-time interval (zero: not yet).
	invoked, done int
}

type requestKind uint8

const (
	kindLoad requestKind = iota + 1
	kindTransfer
	kindAppend
	kindPressure // a transfer of nothing that no client waits for (Config.LongCut)
)

func transferTxn(from, to string, amount int64) *txn.Txn {
	return &txn.Txn{
		If: []txn.Compare{{Key: []byte(from), Cmp: txn.CmpGreaterEqual, Int: &amount}},
		Then: []txn.Op{
			{Kind: txn.OpAdd, Key: []byte(from), Int: -amount},
			{Kind: txn.OpAdd, Key: []byte(to), Int: amount},
		},
	}
}

// loadTxn adds the initial balance to the accounts of one group.
func loadTxn(g int) *txn.Txn {
	t := &txn.Txn{}
	for i := range AccountsPerGroup {
		t.Then = append(t.Then, txn.Op{Kind: txn.OpAdd, Key: []byte(accountKey(g, i)), Int: initialBalance})
	}
	return t
}

func appendCall(id multicast.MsgID, lists []string) txn.Call {
	return txn.Call{Name: ProcName, Args: []byte(id.String() + " " + strings.Join(lists, " "))}
}
