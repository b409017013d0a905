// Package txn is FlexKV's one-shot transaction model (DESIGN 6, 7): a
// transaction is a list of compares (If) and two lists of operations (Then,
// Else), all known when it is submitted, in the style of etcd's Txn.
//
// The package holds what every layer agrees on about a transaction, what a
// client needs and nothing that touches storage (the executor, which runs
// deliveries on Pebble, is package executor):
//   - the model (Txn, Compare, Op) and its bounds (OpsMax, ValueMax,
//     ScanLimitMax, BytesMax), checked by Validate;
//   - the JSON form of DESIGN 7 (ParseJSON, Txn.MarshalJSON) and of results
//     (Result, OpResult);
//   - routing: the destination groups of a transaction (Txn.Destinations)
//     and the piece each of them executes (Txn.Pieces);
//   - the deterministic binary form carried as the multicast payload
//     (AppendTxn, DecodeTxn), and the payload that tells a transaction from
//     a stored-procedure call (AppendTxnPayload, AppendCallPayload,
//     DecodePayload);
//   - the evaluation of one group's piece against a Reader, with the
//     writes handed to a Writer (Eval, EvalVote), and the votes groups
//     exchange so that a transaction commits or aborts at every
//     destination alike (Vote, AppendVote, DecodeVote);
//   - stored procedures (Procedure, Registry);
//   - what a group reports for its piece (PieceResult) and how a client
//     merges the reports (MergeResults).
//
// # Integers
//
// Integer values are stored as decimal strings (DESIGN 7), so that a get
// shows them plainly. A stored value is an integer when strconv.ParseInt(v,
// 10, 64) accepts it: an optional sign and decimal digits, nothing else (no
// spaces, no empty string). add writes the canonical form (no '+', no
// leading zeros).
//
//   - add on a missing key starts from 0;
//   - a compare with Int on a missing key compares 0 (so a balance that was
//     never written is 0, consistent with add);
//   - a compare with Value on a missing key compares the empty value (so
//     "missing" and "put of an empty value" compare alike; a get tells them
//     apart with its found flag);
//   - add, or a compare with Int, on a stored value that is not an integer,
//     and an add whose result overflows int64, abort the transaction: Eval
//     returns an error wrapping ErrAborted (and ErrNotInteger or
//     ErrOverflow) and writes nothing. The outcome depends only on the
//     stored data, so every replica aborts alike, and votes carry it to
//     the other destinations, which abort too (see Piece).
package txn

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/flexkv/flexkv/partition"
)

// Bounds of a transaction. They keep a single request from carrying an
// unbounded amount of work or data through the multicast, the raft logs and
// the executors of every destination (STYLE 4).
const (
	// OpsMax is the largest number of compares and operations of one
	// transaction, If, Then and Else together. A gTPC-C new-order has at
	// most 15 order lines of a few operations each.
	OpsMax = 64
	// ValueMax is the longest value, in bytes, of a put or a compare.
	ValueMax = 64 << 10
	// ScanLimitMax is the largest Limit of a scan: it bounds the size of a
	// result (ScanLimitMax * (partition.KeyMax + stored value)).
	ScanLimitMax = 1024
	// BytesMax bounds the keys, scan ends and values of one transaction
	// together, in bytes: without it OpsMax values of ValueMax bytes would
	// make a 4 MiB request. With the encoding's overhead (at most 14 bytes
	// for each of OpsMax compares and operations) a transaction's payload
	// stays within PayloadMax.
	BytesMax = 448 << 10
)

var (
	// ErrInvalid is matched (errors.Is) by every error of ParseJSON,
	// Validate, DecodeTxn's checks, Destinations and Pieces that is about
	// the transaction itself: bad input, InvalidArgument on the wire
	// (DESIGN 7). Key errors also match partition.ErrInvalidKey or
	// partition.ErrNoPartition.
	ErrInvalid = errors.New("txn: invalid transaction")
	// ErrAborted is matched by the error of a transaction that failed
	// deterministically while it executed; see ErrNotInteger, ErrOverflow.
	ErrAborted = errors.New("txn: aborted")
	// ErrNotInteger is wrapped by the abort of an add, or of a compare with
	// Int, on a stored value that is not a decimal int64.
	ErrNotInteger = errors.New("not an integer")
	// ErrOverflow is wrapped by the abort of an add whose result does not
	// fit in an int64.
	ErrOverflow = errors.New("integer overflow")
)

// classError gives an error a class (ErrInvalid, ErrAborted) that errors.Is
// matches without the class's text in the message, which names the problem
// alone: `txn: then[1]: unknown op "ad"`.
type classError struct {
	class error
	err   error
}

func (e *classError) Error() string        { return e.err.Error() }
func (e *classError) Unwrap() error        { return e.err }
func (e *classError) Is(target error) bool { return target == e.class }

// invalidf returns an error matching ErrInvalid; %w verbs wrap as usual.
func invalidf(format string, args ...any) error {
	return &classError{class: ErrInvalid, err: fmt.Errorf(format, args...)}
}

// Abortf returns an error matching ErrAborted; %w verbs wrap as usual.
func Abortf(format string, args ...any) error { return abortf(format, args...) }

// abortf returns an error matching ErrAborted.
func abortf(format string, args ...any) error {
	return &classError{class: ErrAborted, err: fmt.Errorf(format, args...)}
}

// OpKind is the kind of an operation. The zero value is no kind: an Op
// without a Kind is invalid.
type OpKind uint8

// The operations of DESIGN 6. Their JSON names are "get", "put", "delete",
// "add" and "scan". The numbers are part of the binary encoding: append new
// kinds, never renumber.
const (
	OpGet    OpKind = 1 // read one key
	OpPut    OpKind = 2 // write Value at Key
	OpDelete OpKind = 3 // remove Key
	OpAdd    OpKind = 4 // add Int to the integer at Key
	OpScan   OpKind = 5 // read up to Limit keys of [Key, End), in key order
)

var opNames = [...]string{OpGet: "get", OpPut: "put", OpDelete: "delete", OpAdd: "add", OpScan: "scan"}

// Valid reports whether k is one of the kinds above.
func (k OpKind) Valid() bool { return k >= OpGet && k <= OpScan }

// String returns k's JSON name, or OpKind(n) for an invalid kind.
func (k OpKind) String() string {
	if !k.Valid() {
		return "OpKind(" + strconv.Itoa(int(k)) + ")"
	}
	return opNames[k]
}

// Writes reports whether an operation of kind k writes its key.
func (k OpKind) Writes() bool { return k == OpPut || k == OpDelete || k == OpAdd }

// parseOpKind returns the kind whose JSON name is s.
func parseOpKind(s string) (OpKind, bool) {
	for k := OpGet; k <= OpScan; k++ {
		if opNames[k] == s {
			return k, true
		}
	}
	return 0, false
}

// Cmp is the relation of a compare: stored <relation> operand. The zero
// value is no relation: a Compare without a Cmp is invalid.
type Cmp uint8

// The relations, with their JSON names. The numbers are part of the binary
// encoding.
const (
	CmpEqual        Cmp = 1 // "="
	CmpNotEqual     Cmp = 2 // "!="
	CmpLess         Cmp = 3 // "<"
	CmpLessEqual    Cmp = 4 // "<="
	CmpGreater      Cmp = 5 // ">"
	CmpGreaterEqual Cmp = 6 // ">="
)

var cmpNames = [...]string{
	CmpEqual: "=", CmpNotEqual: "!=", CmpLess: "<", CmpLessEqual: "<=", CmpGreater: ">", CmpGreaterEqual: ">=",
}

// Valid reports whether c is one of the relations above.
func (c Cmp) Valid() bool { return c >= CmpEqual && c <= CmpGreaterEqual }

// String returns c's JSON name, or Cmp(n) for an invalid relation.
func (c Cmp) String() string {
	if !c.Valid() {
		return "Cmp(" + strconv.Itoa(int(c)) + ")"
	}
	return cmpNames[c]
}

// parseCmp returns the relation whose JSON name is s.
func parseCmp(s string) (Cmp, bool) {
	for c := CmpEqual; c <= CmpGreaterEqual; c++ {
		if cmpNames[c] == s {
			return c, true
		}
	}
	return 0, false
}

// holds reports whether the relation holds for a three-way comparison
// order (negative, zero, positive) of the stored value with the operand.
func (c Cmp) holds(order int) bool {
	switch c {
	case CmpEqual:
		return order == 0
	case CmpNotEqual:
		return order != 0
	case CmpLess:
		return order < 0
	case CmpLessEqual:
		return order <= 0
	case CmpGreater:
		return order > 0
	case CmpGreaterEqual:
		return order >= 0
	}
	panic(fmt.Sprintf("txn: invariant violated: evaluating invalid relation %d", c))
}

// Compare is one condition of a transaction's If: the value stored at Key,
// compared with exactly one operand, Int (the stored value read as an
// integer) or Value (bytewise). A nil Value is no operand; an empty non-nil
// Value is the empty value.
type Compare struct {
	Key   []byte
	Cmp   Cmp
	Int   *int64
	Value []byte
}

// Op is one operation of a transaction's Then or Else. Each kind uses some
// fields and requires the others to be zero:
//
//	get     Key
//	put     Key, Value
//	delete  Key
//	add     Key, Int (may be negative; 0 is allowed)
//	scan    Key, End, Limit: up to Limit keys of [Key, End), which may
//	        span partitions of several groups (each reads its own parts)
type Op struct {
	Kind  OpKind
	Key   []byte
	Value []byte
	Int   int64
	End   []byte
	Limit int
	// Wrap makes an add one that cannot abort, as FoundationDB's atomic
	// add: the sum wraps around int64 (two's complement), and a stored
	// value that is not an integer counts as 0, as a missing key does (the
	// add replaces it). Such an add needs no vote, so the other
	// destinations of a transaction do not wait for its group. Add only.
	Wrap bool
}

// canAbort reports whether o can abort its transaction for what it finds
// stored: an add that does not wrap.
func (o *Op) canAbort() bool { return o.Kind == OpAdd && !o.Wrap }

// Txn is a one-shot transaction: if every compare of If holds, Then runs,
// else Else runs. Operations see the writes of the operations before them.
type Txn struct {
	If   []Compare
	Then []Op
	Else []Op
}

// branch names one of the operation lists in positions: then[2].
type branch int

const (
	thenBranch branch = 0
	elseBranch branch = 1
)

func (b branch) String() string {
	if b == thenBranch {
		return "then"
	}
	return "else"
}

// ops returns the list of b.
func (t *Txn) ops(b branch) []Op {
	if b == thenBranch {
		return t.Then
	}
	return t.Else
}

// checkShape checks everything Validate checks that needs no partition
// map: counts, kinds, fields, keys and sizes. ParseJSON and DecodeTxn
// return only transactions that pass it.
func (t *Txn) checkShape() error {
	if t == nil {
		return invalidf("txn: nil transaction")
	}
	n := len(t.If) + len(t.Then) + len(t.Else)
	if n == 0 {
		return invalidf("txn: empty: no compare and no operation")
	}
	if n > OpsMax {
		return invalidf("txn: %d compares and operations, more than OpsMax (%d)", n, OpsMax)
	}
	size := 0
	for i := range t.If {
		c := &t.If[i]
		if err := c.check(i); err != nil {
			return err
		}
		size += len(c.Key) + len(c.Value)
	}
	for _, b := range []branch{thenBranch, elseBranch} {
		for i := range t.ops(b) {
			o := &t.ops(b)[i]
			if err := o.check(b, i); err != nil {
				return err
			}
			size += len(o.Key) + len(o.Value) + len(o.End)
		}
	}
	if size > BytesMax {
		return invalidf("txn: %d bytes of keys and values, more than BytesMax (%d)", size, BytesMax)
	}
	return nil
}

func (c *Compare) check(i int) error {
	if err := partition.CheckKey(c.Key); err != nil {
		return invalidf("txn: if[%d].key: %w", i, err)
	}
	if !c.Cmp.Valid() {
		return invalidf("txn: if[%d]: unknown cmp %s", i, c.Cmp)
	}
	switch {
	case c.Int != nil && c.Value != nil:
		return invalidf("txn: if[%d]: both int and value given, want one", i)
	case c.Int == nil && c.Value == nil:
		return invalidf("txn: if[%d]: neither int nor value given, want one", i)
	case len(c.Value) > ValueMax:
		return invalidf("txn: if[%d].value: %d bytes, more than ValueMax (%d)", i, len(c.Value), ValueMax)
	}
	return nil
}

func (o *Op) check(b branch, i int) error {
	if !o.Kind.Valid() {
		return invalidf("txn: %s[%d]: unknown op %s", b, i, o.Kind)
	}
	if err := partition.CheckKey(o.Key); err != nil {
		return invalidf("txn: %s[%d].key: %w", b, i, err)
	}
	// Fields the kind does not take must be zero: the encodings leave them
	// out, and a field silently dropped would be a surprise.
	var extra string
	switch {
	case len(o.Value) > 0 && o.Kind != OpPut:
		extra = "value"
	case o.Int != 0 && o.Kind != OpAdd:
		extra = "int"
	case len(o.End) > 0 && o.Kind != OpScan:
		extra = "end"
	case o.Limit != 0 && o.Kind != OpScan:
		extra = "limit"
	case o.Wrap && o.Kind != OpAdd:
		extra = "wrap"
	}
	if extra != "" {
		return invalidf("txn: %s[%d]: field %s does not apply to op %s", b, i, extra, o.Kind)
	}
	switch o.Kind {
	case OpPut:
		if len(o.Value) > ValueMax {
			return invalidf("txn: %s[%d].value: %d bytes, more than ValueMax (%d)", b, i, len(o.Value), ValueMax)
		}
	case OpScan:
		if len(o.End) == 0 {
			return invalidf("txn: %s[%d]: scan without end", b, i)
		}
		if err := partition.CheckKey(o.End); err != nil {
			return invalidf("txn: %s[%d].end: %w", b, i, err)
		}
		if bytes.Compare(o.Key, o.End) >= 0 {
			return invalidf("txn: %s[%d]: scan end %s is not after key %s", b, i, Quote(o.End), Quote(o.Key))
		}
		if o.Limit < 1 || o.Limit > ScanLimitMax {
			return invalidf("txn: %s[%d].limit: %d, want 1..ScanLimitMax (%d)", b, i, o.Limit, ScanLimitMax)
		}
	case OpGet, OpDelete, OpAdd:
	}
	return nil
}

// place is where a key lives: its owner group, or every group. A scan
// whose range lies in more than one partition has spans instead: the parts
// of its range, one per partition (partition.PartitionMap.Spans).
type place struct {
	group      partition.GroupID // NoGroup when replicated
	replicated bool
	spans      []partition.Span
}

// owners returns the groups that own a part of what p reads or writes:
// none for a replicated key.
func (p *place) owners() partition.GroupSet {
	if p.spans == nil {
		if p.replicated {
			return 0
		}
		return partition.SetOf(p.group)
	}
	var s partition.GroupSet
	for _, sp := range p.spans {
		if !sp.Partition.Replicated {
			s = s.Add(sp.Partition.Group)
		}
	}
	return s
}

// spansAt returns the spans of p that group g reads, lca being the
// lowest-ranked destination, which reads the replicated ones (see Piece).
func (p *place) spansAt(g, lca partition.GroupID) []partition.Span {
	var out []partition.Span
	for _, sp := range p.spans {
		if sp.Partition.Replicated && g == lca || !sp.Partition.Replicated && sp.Partition.Group == g {
			out = append(out, sp)
		}
	}
	return out
}

// placement is the place of every key of a transaction, by position.
type placement struct {
	ifs []place
	ops [2][]place // by branch
}

// Validate checks t against the bounds of this package and the partition
// map: every key valid (partition.CheckKey) and in a partition (errors
// wrapping partition.ErrNoPartition otherwise); every compare with one
// operand; every op with the fields of its kind and no other; every scan
// with an End after its Key, a range that overlaps at least one partition
// (it may span several, of several groups), and a Limit in 1..ScanLimitMax;
// at most OpsMax compares and operations, and BytesMax bytes. The error
// names the first problem by position (`txn: then[1].key: ...`) and matches
// ErrInvalid. Validate does not modify t.
func (t *Txn) Validate(pm *partition.PartitionMap) error {
	_, err := t.place(pm)
	return err
}

// place validates t and locates its keys.
func (t *Txn) place(pm *partition.PartitionMap) (placement, error) {
	if pm == nil {
		return placement{}, errors.New("txn: validate without a partition map")
	}
	if err := t.checkShape(); err != nil {
		return placement{}, err
	}
	pl := placement{ifs: make([]place, len(t.If))}
	for i, c := range t.If {
		p, err := pm.Lookup(c.Key)
		if err != nil {
			return placement{}, invalidf("txn: if[%d].key: %w", i, err)
		}
		pl.ifs[i] = place{group: p.Group, replicated: p.Replicated}
	}
	for _, b := range []branch{thenBranch, elseBranch} {
		ops := t.ops(b)
		pl.ops[b] = make([]place, len(ops))
		for i, o := range ops {
			if o.Kind == OpScan {
				pc, err := placeScan(pm, &o)
				if err != nil {
					return placement{}, invalidf("txn: %s[%d]: scan: %w", b, i, err)
				}
				pl.ops[b][i] = pc
				continue
			}
			p, err := pm.Lookup(o.Key)
			if err != nil {
				return placement{}, invalidf("txn: %s[%d].key: %w", b, i, err)
			}
			pl.ops[b][i] = place{group: p.Group, replicated: p.Replicated}
		}
	}
	return pl, nil
}

// placeScan places the scan o: in its partition when its range lies in one
// (End is exclusive: a scan may end exactly where its partition ends), else
// at the spans of every partition the range overlaps. A range that no
// partition overlaps is an error.
func placeScan(pm *partition.PartitionMap, o *Op) (place, error) {
	if p, err := pm.Lookup(o.Key); err == nil && (len(p.End) == 0 || bytes.Compare(o.End, p.End) <= 0) {
		return place{group: p.Group, replicated: p.Replicated}, nil
	}
	spans, err := pm.Spans(o.Key, o.End)
	if err != nil {
		return place{}, err
	}
	if len(spans) == 1 {
		// Starts in a gap and ends inside a partition.
		return place{group: spans[0].Partition.Group, replicated: spans[0].Partition.Replicated, spans: spans}, nil
	}
	return place{spans: spans}, nil
}

// quoteMax is how many bytes of a key or value an error message shows.
const quoteMax = 64

// Quote formats a key or value for an error message: Go-quoted, so that any
// byte shows, and cut after quoteMax bytes.
func Quote(b []byte) string {
	if len(b) <= quoteMax {
		return strconv.Quote(string(b))
	}
	return strconv.Quote(string(b[:quoteMax])) + "..."
}

// ReadOnly reports whether t writes nothing in either branch: its
// operations are gets and scans only (compares read too). A read-only
// transaction of one group may run at its leader on the applied state
// instead of through the log (DESIGN 6.5).
func (t *Txn) ReadOnly() bool {
	for _, ops := range [][]Op{t.Then, t.Else} {
		for _, o := range ops {
			if o.Kind != OpGet && o.Kind != OpScan {
				return false
			}
		}
	}
	return true
}
