package txn

import (
	"errors"
	"fmt"
	"iter"

	"github.com/flexkv/flexkv/partition"
)

// Routing rule (DESIGN 6; partition.PartitionMap.Destinations).
//
// The destinations of a transaction are the owner groups of the keys it
// touches, compares and both branches alike (which branch runs is known
// only once the compares are evaluated), with two rules for keys of
// replicated partitions, which every group holds a copy of:
//   - a write (put, delete, add) to a replicated key, in either branch,
//     makes every group a destination: each copy must apply the write in
//     the same order as the other transactions of its group;
//   - a read (get, scan, compare) of a replicated key adds no destination:
//     any destination can read its own copy. A transaction that only reads
//     replicated keys goes to one group, the client's home group.
//
// Every copy of a replicated key has seen the same writes at a given
// transaction, because those writes reach every group and the groups'
// delivery orders agree; so a compare on a replicated key is local to every
// group.

// Destinations returns the groups t must be multicast to, by the rule above;
// home is the group that serves a transaction that only reads replicated
// keys, and is checked only then. It validates t as Validate does.
func (t *Txn) Destinations(pm *partition.PartitionMap, top *partition.Topology, home partition.GroupID) (partition.GroupSet, error) {
	pl, err := t.place(pm)
	if err != nil {
		return 0, err
	}
	want, err := pl.destinations(t, top)
	if err != nil {
		return 0, err
	}
	if want.Empty() {
		if !top.Valid(home) {
			return 0, fmt.Errorf("txn: home group %d is not a group of the topology (0..%d)", home, top.Len()-1)
		}
		want = partition.SetOf(home)
	}
	return want, nil
}

// destinations returns the destination set of t, or the empty set when it
// only reads replicated keys.
func (pl *placement) destinations(t *Txn, top *partition.Topology) (partition.GroupSet, error) {
	if top == nil {
		return 0, errors.New("txn: routing without a topology")
	}
	var owners partition.GroupSet
	replicatedWrite := false
	for _, p := range pl.ifs {
		owners |= p.owners()
	}
	for _, b := range []branch{thenBranch, elseBranch} {
		for i, p := range pl.ops[b] {
			owners |= p.owners()
			replicatedWrite = replicatedWrite || (p.replicated && t.ops(b)[i].Kind.Writes())
		}
	}
	if !top.ValidSet(owners) {
		return 0, fmt.Errorf("txn: partition map names groups %s outside the topology (0..%d)", owners, top.Len()-1)
	}
	if replicatedWrite {
		return top.All(), nil
	}
	return owners, nil
}

// Piece is the part of a transaction one destination group executes
// (DESIGN 0): every group evaluates the outcome of If, then runs the
// operations of the branch that won that are its own.
//
// A scan whose range spans partitions of several groups is run by each of
// them, over the parts of the range it holds (Spans), and the lowest-ranked
// destination reads the parts in replicated partitions: each reports up to
// the scan's Limit keys, and the client merges the reports in key order and
// keeps the first Limit (Txn.MergeResults). Every part is read at the
// transaction's place in its group's order, so the merged scan is one cut
// of the whole range, as any transaction's reads are.
//
// A group runs the operations on the keys it owns, every write to a
// replicated key (each group applies it to its copy), and, when it is the
// lowest-ranked destination (the FlexCast lca, which answers the client's
// original call), the reads of replicated keys, so that exactly one group
// reports them. A write to a replicated key is reported by every group,
// with the same result, since the copies agree.
//
// A compare is local when its key is owned by Group or replicated; a remote
// compare is evaluated by its owner, which sends its vote: whether all the
// compares it owns hold (EvalVote). Every destination waits for the votes
// of all owners of its remote compares, so that every group computes the
// same outcome.
//
// Atomic aborts. An add aborts on a stored value that is not an integer or
// on overflow (ErrNotInteger, ErrOverflow), which only the group holding the
// key can tell, unless it wraps (Op.Wrap), which never aborts. So in a
// transaction with several destinations, a group that runs an add that
// does not wrap on a key it owns, in either branch, votes too: its vote also
// says whether its operations of each branch can run, and names the first
// that aborts. Every destination waits for the votes of all such groups, and
// a branch that any group cannot run aborts the transaction at every
// destination, each reporting the same abort (Eval). Adds to replicated keys
// need no vote: every group runs them on equal copies, with equal outcomes.
// A single-destination transaction never votes, nor does one without remote
// compares and without adds that do not wrap on owned keys: a transfer whose
// adds wrap, guarded by a compare of one group, waits only for that group's
// vote, and that group for none.
//
// A vote is evaluated on the state the piece then runs on: the executor
// computes a group's vote once nothing that runs before the piece can
// change what the vote reads (conflict.go).
type Piece struct {
	Group partition.GroupID
	Txn   *Txn // the whole transaction, shared by the pieces; read only
	// If has one entry per compare of Txn.If, in order.
	If []PieceCompare
	// Then and Else are the positions, ascending, of the operations of
	// Txn.Then and Txn.Else that Group runs.
	Then, Else []int
	// ThenSpans and ElseSpans are nil, or parallel to Then and Else: for a
	// scan whose range is not inside one partition, the parts of it that
	// Group reads, in key order (nil for the other operations, which Group
	// runs on their whole key or range).
	ThenSpans, ElseSpans [][]partition.Span
	// Voters are the groups whose votes Group waits for: the other
	// voting groups, which are the owners of compares and, with several
	// destinations, the groups that run an add on a key they own.
	Voters partition.GroupSet
	// VoteTo are the groups Group sends its vote to: the other
	// destinations, when Group is a voting group; none otherwise.
	VoteTo partition.GroupSet
}

// PieceCompare says who evaluates one compare of a piece.
type PieceCompare struct {
	// Local: the piece's group evaluates the compare itself.
	Local bool
	// Owner is the group that owns the compare's key, or NoGroup when the
	// key is replicated (local everywhere).
	Owner partition.GroupID
}

// ops returns the operation positions of b.
func (p *Piece) ops(b branch) []int {
	if b == thenBranch {
		return p.Then
	}
	return p.Else
}

// spans returns the spans of b, parallel to p.ops(b), or nil.
func (p *Piece) spans(b branch) [][]partition.Span {
	if b == thenBranch {
		return p.ThenSpans
	}
	return p.ElseSpans
}

// Ops yields the operations of the piece, those of Then and then those of
// Else, each with its branch's index.
func (p *Piece) Ops() iter.Seq[*Op] {
	return func(yield func(*Op) bool) {
		for _, b := range []branch{thenBranch, elseBranch} {
			ops := p.Txn.ops(b)
			for _, i := range p.ops(b) {
				if !yield(&ops[i]) {
					return
				}
			}
		}
	}
}

// Pieces splits t into the pieces of the groups of dst, in rank order. dst
// is the destination set t was multicast to, which Pieces checks: what
// Destinations returns, the home group included. It validates t as Validate
// does. The pieces share t, which must not change while they are used.
func (t *Txn) Pieces(pm *partition.PartitionMap, top *partition.Topology, dst partition.GroupSet) ([]Piece, error) {
	pl, voters, err := t.split(pm, top, dst)
	if err != nil {
		return nil, err
	}
	pieces := make([]Piece, 0, dst.Len())
	for _, g := range dst.Slice() {
		pieces = append(pieces, pl.piece(t, g, dst, voters))
	}
	return pieces, nil
}

// PieceOf returns the piece of group g, which must be in dst, that Pieces
// returns among the others: the executor needs only its own.
func (t *Txn) PieceOf(pm *partition.PartitionMap, top *partition.Topology, dst partition.GroupSet, g partition.GroupID) (*Piece, error) {
	pl, voters, err := t.split(pm, top, dst)
	if err != nil {
		return nil, err
	}
	p := pl.piece(t, g, dst, voters)
	return &p, nil
}

// split places t, checks dst as Pieces does, and returns the placement and
// the voting groups.
func (t *Txn) split(pm *partition.PartitionMap, top *partition.Topology, dst partition.GroupSet) (placement, partition.GroupSet, error) {
	pl, err := t.place(pm)
	if err != nil {
		return placement{}, 0, err
	}
	want, err := pl.destinations(t, top)
	if err != nil {
		return placement{}, 0, err
	}
	switch {
	case want.Empty():
		if dst.Len() != 1 || !top.ValidSet(dst) {
			return placement{}, 0, fmt.Errorf("txn: destination set %s: a transaction that only reads replicated keys has one destination of the topology (0..%d)",
				dst, top.Len()-1)
		}
	case dst != want:
		return placement{}, 0, fmt.Errorf("txn: destination set %s, want %s", dst, want)
	}
	return pl, pl.voters(t, dst), nil
}

// piece returns the piece of group g of dst, with voters the voting groups.
func (pl *placement) piece(t *Txn, g partition.GroupID, dst, voters partition.GroupSet) Piece {
	lca := dst.Min()
	pc := Piece{Group: g, Txn: t, If: make([]PieceCompare, len(t.If))}
	for i, p := range pl.ifs {
		pc.If[i] = PieceCompare{Local: p.replicated || p.group == g, Owner: p.group}
	}
	pc.Voters = voters.Remove(g)
	if voters.Has(g) {
		pc.VoteTo = dst.Remove(g)
	}
	for _, b := range []branch{thenBranch, elseBranch} {
		var idx []int
		var spans [][]partition.Span
		for i, p := range pl.ops[b] {
			var mine []partition.Span
			run := p.group == g
			switch {
			case p.spans != nil:
				mine = p.spansAt(g, lca)
				run = len(mine) > 0
			case p.replicated:
				run = t.ops(b)[i].Kind.Writes() || g == lca
			}
			if !run {
				continue
			}
			idx = append(idx, i)
			if mine != nil && spans == nil {
				spans = make([][]partition.Span, len(idx)-1, cap(idx))
			}
			if spans != nil {
				spans = append(spans, mine)
			}
		}
		if b == thenBranch {
			pc.Then, pc.ThenSpans = idx, spans
		} else {
			pc.Else, pc.ElseSpans = idx, spans
		}
	}
	return pc
}

// voters returns the groups that vote on t (see Piece): the owners of its
// compares, and, when dst has several groups, the groups that run an add on
// a key they own.
func (pl *placement) voters(t *Txn, dst partition.GroupSet) partition.GroupSet {
	var v partition.GroupSet
	for _, p := range pl.ifs {
		if !p.replicated {
			v = v.Add(p.group)
		}
	}
	if dst.Len() < 2 {
		return v
	}
	for _, b := range []branch{thenBranch, elseBranch} {
		for i, p := range pl.ops[b] {
			if !p.replicated && t.ops(b)[i].canAbort() {
				v = v.Add(p.group)
			}
		}
	}
	return v
}
