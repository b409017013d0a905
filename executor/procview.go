package executor

import (
	"bytes"
	"fmt"

	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// procView is the Reader and Writer a procedure's piece gets: reads see the
// piece's writes, which are held back until the piece completes, and every
// access is checked against what the group holds.
type procView struct {
	e    *txn.Overlay
	pm   *partition.PartitionMap
	self partition.GroupID
	// ioErr is the first error of the store: it fails Execute, whatever
	// the procedure made of it.
	ioErr error
	// denied is the first access the piece may not make: it aborts the
	// piece even if the procedure ignored the error.
	denied error
	// fp records what the piece touched, when track is set: the
	// footprint of a call that voted (conflict.go). A piece that runs
	// without a trial needs none, and skips the copies of its keys.
	fp    footprint
	track bool
}

func (v *procView) deny(format string, args ...any) error {
	err := txn.Abortf(format, args...)
	if v.denied == nil {
		v.denied = err
	}
	return err
}

func (v *procView) store(err error) error {
	if v.ioErr == nil {
		v.ioErr = err
	}
	return err
}

// owns reports whether the group owns key (replicated keys excluded).
func (v *procView) owns(key []byte) bool {
	g, replicated, err := v.pm.Owner(key)
	return err == nil && !replicated && g == v.self
}

// readable returns the partition of key if the group holds it: owns it or
// holds a copy.
func (v *procView) readable(key []byte) (partition.Partition, bool) {
	p, err := v.pm.Lookup(key)
	if err != nil || (!p.Replicated && p.Group != v.self) {
		return partition.Partition{}, false
	}
	return p, true
}

func (v *procView) Get(key []byte) ([]byte, bool, error) {
	if _, ok := v.readable(key); !ok {
		return nil, false, v.deny("txn: get %s: a key group %d does not hold", txn.Quote(key), v.self)
	}
	if v.track {
		v.fp.reads = append(v.fp.reads, string(key))
	}
	// The overlay's answers are the caller's to keep (a copy of what it
	// holds, or the batch's own copy).
	val, found, err := v.e.Get(key)
	if err != nil {
		return nil, false, v.store(err)
	}
	return val, found, nil
}

// Scan reads [start, end), which may span partitions, as long as the
// group holds every one of them (owns it or holds a copy): it reads them
// in key order, up to limit keys in all. A range that reaches a partition
// of another group aborts the piece, which could not read it whole.
func (v *procView) Scan(start, end []byte, limit int) ([]txn.KV, error) {
	if _, ok := v.readable(start); !ok {
		return nil, v.deny("txn: scan from %s: a key group %d does not hold", txn.Quote(start), v.self)
	}
	switch {
	case partition.CheckKey(end) != nil || bytes.Compare(start, end) >= 0:
		return nil, v.deny("txn: scan [%s, %s): end is not a key after start", txn.Quote(start), txn.Quote(end))
	case limit < 1 || limit > txn.ScanLimitMax:
		return nil, v.deny("txn: scan limit %d, want 1..ScanLimitMax (%d)", limit, txn.ScanLimitMax)
	}
	spans, err := v.pm.Spans(start, end)
	if err != nil {
		return nil, v.deny("txn: scan [%s, %s): %v", txn.Quote(start), txn.Quote(end), err)
	}
	for _, sp := range spans {
		if p := sp.Partition; !p.Replicated && p.Group != v.self {
			return nil, v.deny("txn: scan [%s, %s) reaches partition %s, which group %d does not hold", txn.Quote(start), txn.Quote(end), p, v.self)
		}
	}
	if v.track {
		v.fp.scans = append(v.fp.scans, span{start: string(start), end: string(end)})
	}
	var out []txn.KV
	for _, sp := range spans {
		if len(out) == limit {
			break
		}
		kvs, err := v.e.Scan(sp.Start, sp.End, limit-len(out))
		if err != nil {
			return nil, v.store(err)
		}
		if out == nil {
			out = kvs
			continue
		}
		out = append(out, kvs...)
	}
	return out, nil
}

func (v *procView) Put(key, value []byte) error { return v.put(key, value, false) }

// PutOwned implements txn.OwnedWriter: Put without the copies.
func (v *procView) PutOwned(key, value []byte) error { return v.put(key, value, true) }

var _ txn.OwnedWriter = (*procView)(nil)

func (v *procView) put(key, value []byte, owned bool) error {
	if err := v.writable(key); err != nil {
		return err
	}
	if len(value) > kv.ValueMax {
		return v.deny("txn: put %s: value of %d bytes, more than %d", txn.Quote(key), len(value), kv.ValueMax)
	}
	if v.track {
		v.fp.writes = append(v.fp.writes, string(key))
	}
	if !owned {
		key, value = bytes.Clone(key), bytes.Clone(value)
	}
	v.e.Put(key, value)
	return nil
}

func (v *procView) Delete(key []byte) error {
	if err := v.writable(key); err != nil {
		return err
	}
	if v.track {
		v.fp.writes = append(v.fp.writes, string(key))
	}
	v.e.Delete(bytes.Clone(key))
	return nil
}

// writable checks that the piece may write key: the group owns it, and it
// is one of the first ProcWritesMax keys the piece writes.
func (v *procView) writable(key []byte) error {
	if !v.owns(key) {
		return v.deny("txn: write %s: a key group %d does not own", txn.Quote(key), v.self)
	}
	if !v.e.Holds(key) && v.e.Len() >= txn.ProcWritesMax {
		return v.deny("txn: write %s: more than ProcWritesMax (%d) keys written", txn.Quote(key), txn.ProcWritesMax)
	}
	return nil
}

// runCall runs the procedure of job j at this group with the votes of the
// call's other destinations: the piece commits only if no destination's
// piece aborted; otherwise it aborts with the reason of the first
// destination in rank order whose piece aborted, so that every destination
// reports the same.
func (x *execution) runCall(j *job, votes []txn.Vote) (txn.PieceResult, error) {
	res, v := x.trialRes, x.trialView
	if x.trialJob != j {
		var err error
		if res, v, err = x.evalCall(j, x.tracksCall(j)); err != nil {
			return txn.PieceResult{}, err
		}
	}
	x.trialJob, x.trialView = nil, nil
	// The footprint of the run, for its release (release.go): the view's
	// slices stay with it, as the next view starts new ones.
	x.callFP = v.fp
	for _, g := range j.dst.Slice() {
		if g == j.self {
			if res.Aborted {
				x.e.spare(v)
				return res, nil
			}
			continue
		}
		for _, vote := range votes {
			if vote.Group == g && vote.Then.Aborted() {
				x.e.spare(v)
				return abortResult(vote.Then.Reason), nil
			}
		}
	}
	if err := v.e.Flush(x.rw); err != nil {
		return txn.PieceResult{}, err
	}
	x.e.spare(v)
	return res, nil
}

// spare keeps v, done with, for the next piece (newView), holding nothing
// of the piece that used it: not its writes, not the entry's batch.
func (e *Executor) spare(v *procView) {
	v.e.Reset(nil)
	e.spareView = v
}

// newView returns an empty view over r for a piece of this group: the
// spare one, whose overlay keeps its room for writes, when there is one.
// Its footprint is always new: a trial's is the queued call's (vote).
func (e *Executor) newView(r txn.Reader, pm *partition.PartitionMap, track bool) *procView {
	v := e.spareView
	e.spareView = nil
	if v == nil {
		return &procView{e: txn.NewOverlay(r), pm: pm, self: e.cfg.Self, track: track}
	}
	v.e.Reset(r)
	*v = procView{e: v.e, pm: pm, self: e.cfg.Self, track: track}
	return v
}

// evalCall runs the procedure of job j at this group over a view that
// holds its writes back, and returns its result and the view (flushed by
// runCall when the call commits), which records the footprint of the run
// if track is set (a trial run). A store error is the error; every other
// failure is an aborted result.
func (x *execution) evalCall(j *job, track bool) (txn.PieceResult, *procView, error) {
	v := x.e.newView(x.rw, j.pm, track)
	res, err := evalCallIn(j, v)
	if err != nil {
		return txn.PieceResult{}, nil, err
	}
	return res, v, nil
}

// evalCallIn runs the procedure of job j at group j.self over view v:
// evalCall's run, also the one of a read at the leader (read.go).
func evalCallIn(j *job, v *procView) (txn.PieceResult, error) {
	p := &txn.ProcPiece{
		ID: j.id, Group: j.self, Dst: j.dst, Args: j.call.Args,
		Reader: v, Writer: v, Owns: v.owns,
	}
	res, err := runProcedure(j.proc, p)
	var reason string
	switch {
	case v.ioErr != nil:
		return txn.PieceResult{}, v.ioErr
	case v.denied != nil:
		reason = v.denied.Error()
	case err != nil:
		reason = err.Error()
	case res.Aborted:
		reason = res.Reason
	case res.Truncated:
		reason = "bad result: truncated, which only the executor decides"
	default:
		err := res.Check()
		if err == nil {
			return res, nil
		}
		reason = "bad result: " + err.Error()
	}
	return abortResult(fmt.Sprintf("txn: procedure %q: %s", j.call.Name, reason)), nil
}

// runProcedure runs proc's Run, turning a panic into an error: a procedure
// that panics on some arguments would otherwise stop every replica of the
// group, and again at every restart, since the entry is replayed. The
// panic's value is deterministic (the same code on the same arguments and
// state), so every replica aborts the piece with the same reason.
func runProcedure(proc txn.Procedure, p *txn.ProcPiece) (res txn.PieceResult, err error) {
	defer func() {
		if v := recover(); v != nil {
			res, err = txn.PieceResult{}, fmt.Errorf("panicked: %v", v)
		}
	}()
	return proc.Run(p)
}
