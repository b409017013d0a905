package txn

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/flexkv/flexkv/partition"
)

// Reader reads a group's committed state: a Pebble snapshot or batch in the
// executor, a map in tests. The slices it returns are the caller's to keep:
// Eval returns them in its results.
type Reader interface {
	// Get returns the value stored at key; found is false when there is
	// none.
	Get(key []byte) (value []byte, found bool, err error)
	// Scan returns the keys of [start, end) that have a value, with their
	// values, in ascending key order, at most limit of them.
	Scan(start, end []byte, limit int) ([]KV, error)
}

// Writer receives the writes of an evaluated piece: a Pebble batch in the
// executor. Eval calls it only once the piece has run to completion, one
// call per key written, in ascending key order.
type Writer interface {
	Put(key, value []byte) error
	Delete(key []byte) error
}

// Abort is a deterministic abort at one position of a transaction: the
// index of the compare (in If) or of the operation (in its branch) that
// aborted, and the abort error's text. The zero Abort, with no Reason, is
// no abort.
type Abort struct {
	Index  int
	Reason string
}

// Aborted reports whether a is an abort.
func (a Abort) Aborted() bool { return a.Reason != "" }

// Vote is what a voting group tells the other destinations of a
// transaction (see Piece): its evaluation of the compares it owns, and
// whether its operations of each branch can run.
type Vote struct {
	Group partition.GroupID
	// Holds: every compare Group owns holds (false when one aborted).
	Holds bool
	// If is the abort of the first compare Group owns that aborted (an Int
	// operand against a stored value that is not an integer), if any.
	If Abort
	// Then and Else are the aborts of the first operation of Group's piece
	// in that branch that aborts, if any: that branch cannot run.
	Then, Else Abort
	// Used: Group did not run its piece, because the transaction's id was
	// already used there (a result, or a delivery queued under it), and
	// says so, so that the destinations waiting for its vote do not wait
	// for ever. Other: the id was used there by another transaction (other
	// destinations or payload). Digest is the digest of the delivery Group
	// skipped: a destination acts on the vote only for a delivery with the
	// same digest (see Executor). A used vote has no other field set; Eval
	// aborts on it.
	Used, Other bool
	Digest      uint64
}

// branch returns the abort v reports for b.
func (v *Vote) branch(b branch) Abort {
	if b == thenBranch {
		return v.Then
	}
	return v.Else
}

// EvalVote evaluates p.Group's vote on r: the compares p.Group owns (not the
// replicated ones, which every group evaluates itself), and a trial run,
// without writes, of p's operations of each branch that has an add, to
// learn whether it aborts. Only adds abort, and an add on a replicated key
// aborts alike at every group, so a branch without one needs no trial. r
// must be the state p will run on. An error comes from r; an abort is part
// of the vote, so that every destination aborts alike.
func EvalVote(r Reader, p *Piece) (Vote, error) {
	if err := p.check(); err != nil {
		return Vote{}, err
	}
	v := Vote{Group: p.Group, Holds: true}
	e := &evaluator{r: r}
	for i, pc := range p.If {
		if pc.Owner != p.Group {
			continue
		}
		holds, err := e.compare(i, &p.Txn.If[i])
		if err != nil {
			if !errors.Is(err, ErrAborted) {
				return Vote{}, err
			}
			v.If = Abort{Index: i, Reason: err.Error()}
			v.Holds = false
			break
		}
		v.Holds = v.Holds && holds
	}
	for _, b := range []branch{thenBranch, elseBranch} {
		if !p.hasAdd(b) {
			continue
		}
		// Compares write nothing, so each trial starts from r.
		_, abort, err := (&evaluator{r: r}).run(p, b)
		if err != nil {
			return Vote{}, err
		}
		if abort != nil {
			a := Abort{Index: abort.index, Reason: abort.err.Error()}
			if b == thenBranch {
				v.Then = a
			} else {
				v.Else = a
			}
		}
	}
	return v, nil
}

// hasAdd reports whether p runs an add that can abort (one that does not
// wrap) in b.
func (p *Piece) hasAdd(b branch) bool {
	ops := p.Txn.ops(b)
	for _, i := range p.ops(b) {
		if ops[i].canAbort() {
			return true
		}
	}
	return false
}

// abortAt is an abort found while evaluating: its position and error.
type abortAt struct {
	index int
	err   error
}

// earlier returns the abort of the two at the lower position; at equal
// positions (an add on a replicated key, which every group runs) a, which
// callers pass as their own, whose error wraps the cause.
func earlier(a, b *abortAt) *abortAt {
	switch {
	case a == nil:
		return b
	case b == nil || a.index <= b.index:
		return a
	}
	return b
}

// remoteAbort turns an abort a vote reports into an abort error with the
// same text as the voter's own.
func remoteAbort(a Abort) *abortAt {
	if !a.Aborted() {
		return nil
	}
	return &abortAt{index: a.Index, err: &classError{class: ErrAborted, err: errors.New(a.Reason)}}
}

// Eval runs piece p: it evaluates the local compares of p on r, combines
// them with votes (exactly one from each group of p.Voters; none for a
// piece that waits for no vote), runs the operations of the winning branch
// that p owns, each seeing the writes of the ones before it, and hands the
// writes to w. It returns whether Then ran, and one OpResult per operation
// run, in order; their Index is the position in the branch.
//
// An abort (error matching ErrAborted) returns before w is called: the
// piece writes nothing. The transaction aborts when a compare aborts (a
// non-integer under an Int operand: a local compare, or one a vote
// reports), or else when an operation of the winning branch aborts (a
// non-integer under add, or an overflow: one of p's, or one a vote reports
// for its group). Of several aborts, the one at the lowest position wins,
// compares before operations: every destination sees the same candidates
// (its own and those of the votes, which every voting group sends to every
// other destination), so every destination reports the same abort, with the
// same text. A used vote (Vote.Used) aborts the piece at once: its group
// did not run the transaction. Any other error comes from r or w, or from a piece or votes
// that do not fit together; after an error from w the caller must discard
// what w received.
func Eval(r Reader, w Writer, p *Piece, votes ...Vote) (bool, []OpResult, error) {
	if err := p.check(); err != nil {
		return false, nil, err
	}
	holds := true
	var got partition.GroupSet
	var abort *abortAt
	for _, v := range votes {
		switch {
		case !p.Voters.Has(v.Group):
			return false, nil, fmt.Errorf("txn: piece of group %d: unexpected vote of group %d (voters %s)", p.Group, v.Group, p.Voters)
		case got.Has(v.Group):
			return false, nil, fmt.Errorf("txn: piece of group %d: two votes of group %d", p.Group, v.Group)
		case v.Used:
			return false, nil, abortf("txn: the transaction's id was already used at group %d", v.Group)
		}
		got = got.Add(v.Group)
		holds = holds && v.Holds
		abort = earlier(abort, remoteAbort(v.If))
	}
	if got != p.Voters {
		return false, nil, fmt.Errorf("txn: piece of group %d: missing votes of groups %s", p.Group, p.Voters&^got)
	}
	e := &evaluator{r: r}
	var local *abortAt
	for i, pc := range p.If {
		if !pc.Local {
			continue
		}
		h, err := e.compare(i, &p.Txn.If[i])
		if err != nil {
			if !errors.Is(err, ErrAborted) {
				return false, nil, err
			}
			local = earlier(local, &abortAt{index: i, err: err})
			continue
		}
		holds = holds && h
	}
	if a := earlier(local, abort); a != nil {
		return false, nil, a.err
	}
	b := thenBranch
	if !holds {
		b = elseBranch
	}
	results, own, err := e.run(p, b)
	if err != nil {
		return false, nil, err
	}
	for i := range votes {
		own = earlier(own, remoteAbort(votes[i].branch(b)))
	}
	if own != nil {
		return false, nil, own.err
	}
	if err := e.flush(w); err != nil {
		return false, nil, err
	}
	return holds, results, nil
}

// run runs p's operations of b, holding their writes back, up to the first
// that aborts, which it returns; an error is from the Reader.
func (e *evaluator) run(p *Piece, b branch) ([]OpResult, *abortAt, error) {
	ops := p.Txn.ops(b)
	spans := p.spans(b)
	results := make([]OpResult, 0, len(p.ops(b)))
	for j, i := range p.ops(b) {
		var sp []partition.Span
		if spans != nil {
			sp = spans[j]
		}
		res, err := e.op(b, i, &ops[i], sp)
		if err != nil {
			if errors.Is(err, ErrAborted) {
				return nil, &abortAt{index: i, err: err}, nil
			}
			return nil, nil, err
		}
		results = append(results, res)
	}
	return results, nil, nil
}

// check verifies that p's transaction is well formed and that p fits it: a
// piece built by Pieces always passes.
func (p *Piece) check() error {
	if p == nil || p.Txn == nil {
		return errors.New("txn: evaluating a piece without a transaction")
	}
	if err := p.Txn.checkShape(); err != nil {
		return err
	}
	if len(p.If) != len(p.Txn.If) {
		return fmt.Errorf("txn: piece of group %d has %d compares, its transaction %d", p.Group, len(p.If), len(p.Txn.If))
	}
	for _, b := range []branch{thenBranch, elseBranch} {
		if sp := p.spans(b); sp != nil && len(sp) != len(p.ops(b)) {
			return fmt.Errorf("txn: piece of group %d: %d %s spans for %d operations", p.Group, len(sp), b, len(p.ops(b)))
		}
		prev := -1
		for _, i := range p.ops(b) {
			if i <= prev || i >= len(p.Txn.ops(b)) {
				return fmt.Errorf("txn: piece of group %d: %s positions not ascending in 0..%d", p.Group, b, len(p.Txn.ops(b))-1)
			}
			prev = i
		}
	}
	return nil
}

// Overlay holds a piece's writes back over a Reader until the piece
// completes, as Eval does for a transaction's piece: reads see the writes,
// Flush hands the final state of each written key to a Writer, in key
// order. The executor runs stored procedures over one.
//
// What Get and Scan return is the caller's to keep and change, as a
// Reader's is: the keys and values the overlay holds are returned as
// copies, the Reader's as they come.
type Overlay struct{ e evaluator }

// overlayWrites is the room an overlay starts with for writes: a gTPC-C
// new-order writes about 25 keys, and each growth of the sorted slice
// copies it.
const overlayWrites = 16

// NewOverlay returns an empty overlay over r.
func NewOverlay(r Reader) *Overlay {
	return &Overlay{e: evaluator{r: r, copyHeld: true, writes: make([]write, 0, overlayWrites)}}
}

// Reset empties the overlay and makes it read r, keeping its room for
// writes: the keys and values it held are dropped, not reused.
func (o *Overlay) Reset(r Reader) {
	clear(o.e.writes)
	o.e.writes = o.e.writes[:0]
	o.e.r = r
}

// Get reads key, seeing the overlay's writes.
func (o *Overlay) Get(key []byte) ([]byte, bool, error) { return o.e.get(key) }

// Scan reads [start, end), at most limit keys, seeing the overlay's writes.
func (o *Overlay) Scan(start, end []byte, limit int) ([]KV, error) {
	return o.e.scan(start, end, limit)
}

// Put holds a write of value at key. The overlay keeps key and value, which
// the caller must not change afterwards.
func (o *Overlay) Put(key, value []byte) { o.e.set(key, value, false) }

// Delete holds a delete of key.
func (o *Overlay) Delete(key []byte) { o.e.set(key, nil, true) }

// Holds reports whether the overlay holds a write of key.
func (o *Overlay) Holds(key []byte) bool { _, ok := o.e.find(key); return ok }

// Len returns the number of keys written.
func (o *Overlay) Len() int { return len(o.e.writes) }

// Flush hands the held writes to w in key order.
func (o *Overlay) Flush(w Writer) error { return o.e.flush(w) }

// write is a pending write of the piece being evaluated.
type write struct {
	key, value []byte
	deleted    bool
}

// evaluator runs one piece. Writes are held back in writes, sorted by key
// with one entry per key, until the piece completes: reads see them, an
// abort drops them, and the Writer gets the final state of each key once.
// A piece has at most OpsMax operations, so a sorted slice is enough.
type evaluator struct {
	r      Reader
	writes []write
	// copyHeld makes reads return copies of the held keys and values
	// (Overlay); Eval returns them as they are in its results.
	copyHeld bool
}

func (e *evaluator) find(key []byte) (int, bool) {
	return slices.BinarySearchFunc(e.writes, key, func(w write, k []byte) int { return bytes.Compare(w.key, k) })
}

func (e *evaluator) get(key []byte) ([]byte, bool, error) {
	if i, ok := e.find(key); ok {
		w := e.writes[i]
		switch {
		case w.deleted:
			return nil, false, nil
		case e.copyHeld:
			return bytes.Clone(w.value), true, nil
		}
		return w.value, true, nil
	}
	v, found, err := e.r.Get(key)
	if err != nil || !found {
		return nil, false, err
	}
	return v, true, nil
}

func (e *evaluator) set(key, value []byte, deleted bool) {
	w := write{key: key, value: value, deleted: deleted}
	if i, ok := e.find(key); ok {
		e.writes[i] = w
	} else {
		e.writes = slices.Insert(e.writes, i, w)
	}
}

// scan merges the reader's keys of [start, end) with the pending writes.
// Pending deletes may hide up to one reader key each, so the reader is
// asked for that many more than limit; past them, every further reader key
// sorts after limit surviving ones.
func (e *evaluator) scan(start, end []byte, limit int) ([]KV, error) {
	lo, _ := e.find(start)
	hi, _ := e.find(end)
	pending := e.writes[lo:hi]
	deletes := 0
	for _, w := range pending {
		if w.deleted {
			deletes++
		}
	}
	base, err := e.r.Scan(start, end, limit+deletes)
	if err != nil {
		return nil, err
	}
	if len(base) > limit+deletes {
		return nil, fmt.Errorf("txn: reader returned %d keys for a scan limited to %d", len(base), limit+deletes)
	}
	out := make([]KV, 0, min(limit, len(base)+len(pending)))
	i, j := 0, 0
	for len(out) < limit && (i < len(base) || j < len(pending)) {
		var order int
		switch {
		case i == len(base):
			order = 1
		case j == len(pending):
			order = -1
		default:
			order = bytes.Compare(base[i].Key, pending[j].key)
		}
		if order < 0 {
			out = append(out, base[i])
			i++
			continue
		}
		if order == 0 {
			i++ // the pending write replaces the stored value
		}
		if w := pending[j]; !w.deleted {
			if e.copyHeld {
				w.key, w.value = bytes.Clone(w.key), bytes.Clone(w.value)
			}
			out = append(out, KV{Key: w.key, Value: w.value})
		}
		j++
	}
	return out, nil
}

// flush hands the pending writes to w in key order.
func (e *evaluator) flush(w Writer) error {
	for _, p := range e.writes {
		var err error
		if p.deleted {
			err = w.Delete(p.key)
		} else {
			err = w.Put(p.key, p.value)
		}
		if err != nil {
			return fmt.Errorf("txn: write %s: %w", Quote(p.key), err)
		}
	}
	return nil
}

// integer reads a stored value as an integer (see the package comment); a
// missing value is 0.
func integer(v []byte, found bool) (int64, bool) {
	if !found {
		return 0, true
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, err == nil
}

func (e *evaluator) compare(i int, c *Compare) (bool, error) {
	v, found, err := e.get(c.Key)
	if err != nil {
		return false, fmt.Errorf("txn: if[%d]: read %s: %w", i, Quote(c.Key), err)
	}
	if c.Int == nil {
		return c.Cmp.holds(bytes.Compare(v, c.Value)), nil // missing: v is nil, the empty value
	}
	n, ok := integer(v, found)
	if !ok {
		return false, abortf("txn: if[%d]: %s %s %d: stored value %s: %w", i, Quote(c.Key), c.Cmp, *c.Int, Quote(v), ErrNotInteger)
	}
	return c.Cmp.holds(cmp.Compare(n, *c.Int)), nil
}

// op runs o, the operation at position i of b; spans, when not nil, are
// the parts of a scan's range the piece reads (Piece.ThenSpans).
func (e *evaluator) op(b branch, i int, o *Op, spans []partition.Span) (OpResult, error) {
	res := OpResult{Index: i, Kind: o.Kind, Key: o.Key}
	readErr := func(err error) error {
		return fmt.Errorf("txn: %s[%d]: %s %s: %w", b, i, o.Kind, Quote(o.Key), err)
	}
	switch o.Kind {
	case OpGet:
		v, found, err := e.get(o.Key)
		if err != nil {
			return res, readErr(err)
		}
		res.Value, res.Found = v, found
	case OpPut:
		e.set(o.Key, o.Value, false)
	case OpDelete:
		e.set(o.Key, nil, true)
	case OpAdd:
		v, found, err := e.get(o.Key)
		if err != nil {
			return res, readErr(err)
		}
		n, ok := integer(v, found)
		if o.Wrap {
			// Go's signed addition wraps around: FoundationDB's atomic add.
			if !ok {
				n = 0
			}
			sum := n + o.Int
			e.set(o.Key, strconv.AppendInt(nil, sum, 10), false)
			res.Int = sum
			break
		}
		if !ok {
			return res, abortf("txn: %s[%d]: add to %s: stored value %s: %w", b, i, Quote(o.Key), Quote(v), ErrNotInteger)
		}
		sum := n + o.Int
		if (o.Int > 0 && sum < n) || (o.Int < 0 && sum > n) {
			return res, abortf("txn: %s[%d]: add %d to %s: %d: %w", b, i, o.Int, Quote(o.Key), n, ErrOverflow)
		}
		e.set(o.Key, strconv.AppendInt(nil, sum, 10), false)
		res.Int = sum
	case OpScan:
		if spans == nil {
			kvs, err := e.scan(o.Key, o.End, o.Limit)
			if err != nil {
				return res, readErr(err)
			}
			res.KVs = kvs
			break
		}
		// The parts in key order, each for what the limit leaves: the
		// first Limit keys of the parts, in key order.
		res.KVs = []KV{}
		for _, sp := range spans {
			if len(res.KVs) == o.Limit {
				break
			}
			kvs, err := e.scan(sp.Start, sp.End, o.Limit-len(res.KVs))
			if err != nil {
				return res, readErr(err)
			}
			res.KVs = append(res.KVs, kvs...)
		}
	default:
		panic(fmt.Sprintf("txn: invariant violated: evaluating op kind %d, which checkShape rejects", o.Kind))
	}
	return res, nil
}
