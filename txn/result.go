package txn

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/flexkv/flexkv/internal/wire"
)

// ErrTruncated is wrapped by MergeResults' error when a destination left
// its results out because they were too large to keep (PieceResult.Truncated):
// the transaction ran, but its reads are lost.
var ErrTruncated = errors.New("txn: results too large to keep")

// ReasonEpochChanged starts the reason of the abort of a transaction that
// its destinations delivered after the epoch it was routed with had ended
// (DESIGN 14, the stop-sign): it ran nowhere, and its client resubmits it
// as a new transaction, routed with the new epoch.
const ReasonEpochChanged = "epoch changed"

// ErrEpochChanged is matched (with ErrAborted) by the error of a
// transaction aborted for ReasonEpochChanged.
var ErrEpochChanged = errors.New("txn: epoch changed")

// EpochChangedResult returns the result of a transaction aborted because its
// epoch ended before its delivery at a group at epoch.
func EpochChangedResult(epoch uint64) PieceResult {
	return PieceResult{Aborted: true, Reason: fmt.Sprintf("%s: the destinations are at epoch %d", ReasonEpochChanged, epoch)}
}

// PieceResult is what one destination group reports for its piece of a
// transaction: the executor stores it as the group's result, under the
// transaction id, for the client's call and its Await calls.
type PieceResult struct {
	// Succeeded: every compare held and Then ran; otherwise Else ran.
	Succeeded bool
	// Aborted: the transaction aborted and the group wrote nothing; Reason
	// is the abort error's text, the same at every destination.
	Aborted bool
	Reason  string
	// Results are the operations this group ran, each with its Index in
	// the branch, ascending.
	Results []OpResult
	// Truncated: the encoded results were larger than a stored result may
	// be, so they were left out; the piece's writes were applied.
	Truncated bool
}

// The binary form of a PieceResult, stored as a group's result:
//
//	result   = version:byte flags:byte [reason:bytes] count:uvarint opresult*
//	flags    = bit 0 succeeded, bit 1 aborted, bit 2 truncated; no other bit
//	opresult = index:uvarint kind:byte key:bytes field*
//	                         get: found:byte (0 or 1) [value:bytes when found]
//	                         add: int:zigzag
//	                         scan: count:uvarint (key:bytes value:bytes)*
//	                         put, delete: none
//
// reason is present exactly when the aborted flag is set.

const resultVersion = 1

const (
	resultSucceeded byte = 1 << iota
	resultAborted
	resultTruncated
	resultFlagsAll = resultSucceeded | resultAborted | resultTruncated
)

// Smallest encodings, which bound what a count may claim.
const (
	opResultSizeMin = 3 // index, kind, key length
	kvSizeMin       = 2 // key length, value length
)

// Check returns an error unless r is a result AppendPieceResult writes and
// DecodePieceResult reads back equal: an abort with a reason of
// 1..ReasonMax bytes and nothing else, or an outcome with no reason; results
// with valid kinds, indices ascending from 0 and below math.MaxInt32, and
// no field their kind does not take.
func (r *PieceResult) Check() error {
	switch {
	case r.Aborted && (r.Succeeded || r.Truncated || len(r.Results) > 0):
		return errors.New("txn: aborted piece result with an outcome or results")
	case r.Aborted && (r.Reason == "" || len(r.Reason) > ReasonMax):
		return fmt.Errorf("txn: abort reason of %d bytes, want 1..ReasonMax (%d)", len(r.Reason), ReasonMax)
	case !r.Aborted && r.Reason != "":
		return errors.New("txn: abort reason without an abort")
	case r.Truncated && len(r.Results) > 0:
		return errors.New("txn: truncated piece result with results")
	}
	prev := -1
	for i := range r.Results {
		o := &r.Results[i]
		if o.Index <= prev || o.Index >= math.MaxInt32 {
			return fmt.Errorf("txn: result %d: index %d, want ascending in 0..%d", i, o.Index, math.MaxInt32-1)
		}
		prev = o.Index
		var extra bool
		switch o.Kind {
		case OpGet:
			extra = o.Int != 0 || o.KVs != nil || (!o.Found && o.Value != nil)
		case OpAdd:
			extra = o.Found || o.Value != nil || o.KVs != nil
		case OpScan:
			extra = o.Found || o.Value != nil || o.Int != 0
		case OpPut, OpDelete:
			extra = o.Found || o.Value != nil || o.Int != 0 || o.KVs != nil
		default:
			return fmt.Errorf("txn: result %d: unknown op %s", i, o.Kind)
		}
		if extra {
			return fmt.Errorf("txn: result %d: fields that op %s does not take", i, o.Kind)
		}
	}
	return nil
}

// AppendPieceResult appends the binary form of r to b. r must be valid (as
// the executor's results are); an invalid one is written as it would be
// read back, which may differ.
func AppendPieceResult(b []byte, r *PieceResult) []byte {
	b = append(b, resultVersion)
	var flags byte
	if r.Succeeded {
		flags |= resultSucceeded
	}
	if r.Aborted {
		flags |= resultAborted
	}
	if r.Truncated {
		flags |= resultTruncated
	}
	b = append(b, flags)
	if r.Aborted {
		b = wire.AppendBytes(b, []byte(r.Reason))
	}
	b = wire.AppendUvarint(b, uint64(len(r.Results)))
	for _, o := range r.Results {
		b = wire.AppendUvarint(b, uint64(o.Index))
		b = append(b, byte(o.Kind))
		b = wire.AppendBytes(b, o.Key)
		switch o.Kind {
		case OpGet:
			if o.Found {
				b = append(b, 1)
				b = wire.AppendBytes(b, o.Value)
			} else {
				b = append(b, 0)
			}
		case OpAdd:
			b = wire.AppendUvarint(b, zigzag(o.Int))
		case OpScan:
			b = wire.AppendUvarint(b, uint64(len(o.KVs)))
			for _, kv := range o.KVs {
				b = wire.AppendBytes(b, kv.Key)
				b = wire.AppendBytes(b, kv.Value)
			}
		case OpPut, OpDelete:
		}
	}
	return b
}

// DecodePieceResult reads what AppendPieceResult wrote. It never panics, it
// allocates no more than b's length, and the result does not alias b. It
// rejects, with an error wrapping wire.ErrCorrupt, any other version,
// unknown flags, kinds or found bytes, trailing bytes, and a result that
// fails the checks AppendPieceResult's input must pass.
func DecodePieceResult(b []byte) (PieceResult, error) {
	d := wire.NewDecoder(bytes.Clone(b))
	if v := d.Byte(); d.Err() == nil && v != resultVersion {
		d.Fail("piece result version %d, want %d", v, resultVersion)
	}
	flags := d.Byte()
	if d.Err() == nil && flags&^resultFlagsAll != 0 {
		d.Fail("piece result flags %#x", flags)
	}
	r := PieceResult{
		Succeeded: flags&resultSucceeded != 0,
		Aborted:   flags&resultAborted != 0,
		Truncated: flags&resultTruncated != 0,
	}
	if r.Aborted {
		r.Reason = string(d.Bytes())
	}
	if n := d.Count(opResultSizeMin); n > 0 {
		r.Results = make([]OpResult, n)
	}
	for i := range r.Results {
		o := &r.Results[i]
		index := d.Uvarint()
		if d.Err() == nil && index >= math.MaxInt32 {
			d.Fail("result %d: index %d", i, index)
		}
		o.Index = int(index)
		o.Kind = OpKind(d.Byte())
		o.Key = d.Bytes()
		switch o.Kind {
		case OpGet:
			switch found := d.Byte(); found {
			case 0:
			case 1:
				o.Found = true
				o.Value = d.Bytes()
				if o.Value == nil {
					o.Value = []byte{}
				}
			default:
				d.Fail("result %d: found byte %d", i, found)
			}
		case OpAdd:
			o.Int = unzigzag(d.Uvarint())
		case OpScan:
			if n := d.Count(kvSizeMin); n > 0 {
				o.KVs = make([]KV, n)
			} else {
				o.KVs = []KV{}
			}
			for j := range o.KVs {
				o.KVs[j] = KV{Key: d.Bytes(), Value: d.Bytes()}
			}
		case OpPut, OpDelete:
		default:
			d.Fail("result %d: op kind %d", i, o.Kind)
		}
		if d.Err() != nil {
			break
		}
	}
	if err := d.Finish(); err != nil {
		return PieceResult{}, fmt.Errorf("txn: decode piece result: %w", err)
	}
	if err := r.Check(); err != nil {
		return PieceResult{}, fmt.Errorf("txn: decode piece result: %w: %w", wire.ErrCorrupt, err)
	}
	return r, nil
}

// MergeResults combines the piece results of every destination of
// transaction id into the client's Result: the outcome, which every piece
// must agree on, and the operation results of all pieces sorted by Index
// (a write to a replicated key, reported by every group, once; a scan that
// spans partitions of several groups, reported by each, once, with the keys
// of all in key order: Txn.MergeResults also keeps only its first Limit). An abort
// anywhere returns an error matching ErrAborted whose text is the abort's
// reason (the first aborted piece's, in the order given; the executors
// make them equal). A piece whose results were left out gives the merged
// Result of the others and an error wrapping ErrTruncated.
func MergeResults(id string, pieces []PieceResult) (Result, error) {
	if len(pieces) == 0 {
		return Result{}, fmt.Errorf("txn: result of %s: no piece results", id)
	}
	for i := range pieces {
		if pieces[i].Aborted {
			err := &classError{class: ErrAborted, err: errors.New(pieces[i].Reason)}
			if strings.HasPrefix(pieces[i].Reason, ReasonEpochChanged) {
				return Result{}, &classError{class: ErrEpochChanged, err: err}
			}
			return Result{}, err
		}
	}
	res := Result{ID: id, Succeeded: pieces[0].Succeeded}
	truncated := false
	for i := range pieces {
		p := &pieces[i]
		if p.Succeeded != res.Succeeded {
			return Result{}, fmt.Errorf("txn: result of %s: destinations disagree on the outcome", id)
		}
		truncated = truncated || p.Truncated
		res.Results = append(res.Results, p.Results...)
	}
	slices.SortStableFunc(res.Results, func(a, b OpResult) int { return a.Index - b.Index })
	if err := mergeScans(res.Results); err != nil {
		return Result{}, fmt.Errorf("txn: result of %s: %w", id, err)
	}
	res.Results = slices.CompactFunc(res.Results, func(a, b OpResult) bool { return a.Index == b.Index })
	// Compacting kept the first of each index; a second one that differs
	// in kind or key is not a replicated write seen twice.
	all := 0
	for i := range pieces {
		all += len(pieces[i].Results)
	}
	if all != len(res.Results) {
		if err := checkDuplicates(pieces, res.Results); err != nil {
			return Result{}, fmt.Errorf("txn: result of %s: %w", id, err)
		}
	}
	if truncated {
		return res, fmt.Errorf("txn: result of %s: %w", id, ErrTruncated)
	}
	return res, nil
}

// mergeScans gives the first of each run of scan results at one index
// (sorted by index: the parts of a scan that spans several groups) the keys
// of the whole run, in key order. The groups read disjoint parts: a key
// reported twice is an inconsistency.
func mergeScans(results []OpResult) error {
	for i := 0; i < len(results); {
		j := i + 1
		for j < len(results) && results[j].Index == results[i].Index {
			j++
		}
		if j-i > 1 && results[i].Kind == OpScan {
			var kvs []KV
			for k := i; k < j; k++ {
				if results[k].Kind != OpScan {
					return fmt.Errorf("txn: two destinations report index %d as %s and %s", results[i].Index, results[i].Kind, results[k].Kind)
				}
				kvs = append(kvs, results[k].KVs...)
			}
			slices.SortFunc(kvs, func(a, b KV) int { return bytes.Compare(a.Key, b.Key) })
			for k := 1; k < len(kvs); k++ {
				if bytes.Equal(kvs[k-1].Key, kvs[k].Key) {
					return fmt.Errorf("txn: two destinations report key %s of scan %d", Quote(kvs[k].Key), results[i].Index)
				}
			}
			if kvs == nil {
				kvs = []KV{}
			}
			results[i].KVs = kvs
		}
		i = j
	}
	return nil
}

// MergeResults is MergeResults for t, whose results they are: each scan
// keeps the first Limit keys of those its destinations reported (CutScans).
func (t *Txn) MergeResults(id string, pieces []PieceResult) (Result, error) {
	res, err := MergeResults(id, pieces)
	t.CutScans(&res)
	return res, err
}

// CutScans keeps, of each scan result of r, a result of t, the first Limit
// keys: each destination of a scan that spans several groups reports up to
// Limit keys of the parts it reads, so these are the first Limit of the
// whole range.
func (t *Txn) CutScans(r *Result) {
	branch := t.Then
	if !r.Succeeded {
		branch = t.Else
	}
	for i := range r.Results {
		o := &r.Results[i]
		if o.Kind != OpScan || o.Index >= len(branch) {
			continue
		}
		if limit := branch[o.Index].Limit; len(o.KVs) > limit {
			o.KVs = o.KVs[:limit:limit]
		}
	}
}

// checkDuplicates checks that every piece's result at an index the merged
// results hold is the same operation, on the same key.
func checkDuplicates(pieces []PieceResult, merged []OpResult) error {
	for i := range pieces {
		for _, o := range pieces[i].Results {
			j, ok := slices.BinarySearchFunc(merged, o.Index, func(m OpResult, index int) int { return m.Index - index })
			if !ok {
				return fmt.Errorf("txn: result index %d lost in the merge", o.Index)
			}
			if m := merged[j]; m.Kind != o.Kind || !bytes.Equal(m.Key, o.Key) {
				return fmt.Errorf("txn: two destinations report index %d as %s %s and %s %s", o.Index, m.Kind, Quote(m.Key), o.Kind, Quote(o.Key))
			}
		}
	}
	return nil
}
