package executor

import (
	"errors"
	"fmt"

	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// Reads at the leader (DESIGN 6.5). A read-only transaction or call of one
// group runs on the state the executor committed last instead of through
// the log, once the caller has made that state current (the replica's read
// barrier). Two things make such a read the one a delivery at the end of
// the log would get:
//
//   - It reads one point in time: a Pebble snapshot (kv.View) taken between
//     two entries' commits, never a state half written, and evaluated
//     after that, so that the apply loop does not wait for it. When the
//     queue is empty (the common case) the read takes no lock at all:
//     Execute marks the batch of an entry that leaves the queue empty
//     settled, and the read takes a kv.SettledView, which the store gives
//     only of such a state, between two commits; otherwise it takes mu.
//   - It reads nothing a queued delivery that has not run may write. The
//     committed state is not always a prefix of the delivery order: a
//     delivery may run ahead of one that waits for a vote (conflict.go,
//     rule 2). The read is let through only when, like a job of rule 2, it
//     conflicts with no queued job: then the state holds, on every key it
//     reads, the values of a serial execution of every delivery so far in
//     delivery order, and the read is equivalent to a local delivery
//     appended at this point of the order. Otherwise it returns ErrReadWaits
//     and the caller tries again after the next entry (or sends the read
//     through the log).

// ErrReadWaits is the error of a read at the leader that a queued delivery
// holds up: it may write what the read reads, and has not run.
var ErrReadWaits = errors.New("executor: a queued delivery that has not run may write what the read reads")

// ErrNotOwned is the error of a read at the leader that touches a key this
// group does not own by the partition map the executor runs with: routed
// by another epoch's owners (a partition moved).
var ErrNotOwned = errors.New("executor: the read touches a key this group does not own now")

// ErrNotReadOnly is the error of a read at the leader of a call whose piece
// wrote: the call must go through the log.
var ErrNotReadOnly = errors.New("executor: the piece writes: it runs through the log")

// Read runs the read-only transaction t, whose only destination is this
// group, on the committed state, and returns its result (see above). An
// error is ErrReadWaits, a store error, or t's own: not read-only, or not
// this group's alone.
func (e *Executor) Read(t *txn.Txn) (txn.PieceResult, error) {
	if !t.ReadOnly() {
		return txn.PieceResult{}, fmt.Errorf("executor: read: %w: the transaction writes", txn.ErrInvalid)
	}
	self := partition.SetOf(e.cfg.Self)
	pm := e.partitions()
	p, err := t.PieceOf(pm, e.cfg.Topology, self, e.cfg.Self)
	if err != nil {
		return txn.PieceResult{}, fmt.Errorf("%w: %w", ErrNotOwned, err)
	}
	fp := footprintOf(&job{piece: p})
	// A point view first: most reads are a Get or a few, made before a
	// commit comes; one that a commit overtook runs again on a View.
	res, err := e.readPiece(p, pm, &fp, true)
	if errors.Is(err, kv.ErrViewMoved) {
		res, err = e.readPiece(p, pm, &fp, false)
	}
	return res, err
}

// readPiece is Read of piece p of footprint fp, checked against the
// partition map pm, on a point view if point.
func (e *Executor) readPiece(p *txn.Piece, pm *partition.PartitionMap, fp *footprint, point bool) (txn.PieceResult, error) {
	sn, _, err := e.readSnapshotOf(fp, true, point)
	if err != nil {
		return txn.PieceResult{}, err
	}
	defer sn.Release()
	if e.partitions() != pm {
		// The owners changed since the check (a partition moved away,
		// its range deleted): the snapshot may lack it. Again, with the
		// new owners.
		return txn.PieceResult{}, ErrReadWaits
	}
	holds, results, err := txn.Eval(viewReader{sn}, readOnlyWriter{}, p)
	switch {
	case errors.Is(err, txn.ErrAborted):
		return abortResult(err.Error()), nil
	case err != nil:
		return txn.PieceResult{}, err
	}
	return storable(txn.PieceResult{Succeeded: holds, Results: results}), nil
}

// ReadCall runs call id, of a read-only procedure (txn.ReadOnly) whose only
// destination is this group, on the committed state, as the call's
// delivery here would (see above). A call footprints everything
// (conflict.go), so it waits for an empty queue; with Config.Strict it is
// checked against the open jobs (release.go) for what it read, once it
// ran. A piece that writes is not answered: ErrNotReadOnly.
func (e *Executor) ReadCall(id multicast.MsgID, call txn.Call) (txn.PieceResult, error) {
	cfg := &e.cfg
	proc, ok := cfg.Procedures.Lookup(call.Name)
	switch {
	case !ok:
		return txn.PieceResult{}, fmt.Errorf("executor: read: %w: unknown procedure %q", txn.ErrInvalid, call.Name)
	case !txn.IsReadOnly(proc):
		return txn.PieceResult{}, fmt.Errorf("executor: read: %w: procedure %q is not read-only", txn.ErrInvalid, call.Name)
	}
	self := partition.SetOf(cfg.Self)
	pm := e.partitions()
	if err := cfg.Procedures.CheckCallDestinations(call, pm, cfg.Topology, self); err != nil {
		return txn.PieceResult{}, fmt.Errorf("%w: %w", ErrNotOwned, err)
	}
	// What the call reads is known once it ran: the open jobs (release.go)
	// are checked against it then, not against everything.
	sn, settled, err := e.readSnapshotOf(&footprint{all: true}, false, false)
	if err != nil {
		return txn.PieceResult{}, err
	}
	defer sn.Release()
	if e.partitions() != pm {
		return txn.PieceResult{}, ErrReadWaits // as in Read
	}
	// A view of its own, not the spare one: the apply loop may be using
	// that.
	v := &procView{e: txn.NewOverlay(viewReader{sn}), pm: pm, self: cfg.Self, track: cfg.Strict && !settled}
	j := &job{id: id, self: cfg.Self, dst: self, call: &call, proc: proc}
	res, err := evalCallIn(j, v)
	switch {
	case err != nil:
		return txn.PieceResult{}, err
	case v.e.Len() > 0:
		return txn.PieceResult{}, fmt.Errorf("%w: procedure %q wrote %d keys", ErrNotReadOnly, call.Name, v.e.Len())
	case v.track && e.openWrote(&v.fp):
		return txn.PieceResult{}, &ReadWaitsError{fp: v.fp}
	}
	return storable(res), nil
}

// ReadWaitsError is ReadCall's ErrReadWaits when an open job (release.go)
// wrote what the call read: it keeps what the call read, so that the
// caller runs the call again only once that is no longer the case
// (HeldUp), not after every entry.
type ReadWaitsError struct{ fp footprint }

func (*ReadWaitsError) Error() string { return ErrReadWaits.Error() }

// Is makes a *ReadWaitsError an ErrReadWaits for errors.Is.
func (*ReadWaitsError) Is(target error) bool { return target == ErrReadWaits }

// HeldUp reports whether a read that failed with err, a *ReadWaitsError,
// would be held up again by an open job that wrote what it read: a run now
// of a call that reads the same keys would be refused. It is false for any
// other error, and once those jobs completed. A call whose reads depend on
// the state may read other keys when it runs again, so HeldUp only spares
// runs that would fail for the reason the last one did; it is not a check
// of its own.
func (e *Executor) HeldUp(err error) bool {
	var w *ReadWaitsError
	return errors.As(err, &w) && e.openWrote(&w.fp)
}

// openWrote reports whether an open job (release.go) conflicts with a read
// of fp: one open when the read's view was taken and still open now wrote
// what it read (a job that ran after the view was taken holds it up too,
// which is only cautious). A read of a settled view has nothing to check:
// no job was open then.
func (e *Executor) openWrote(fp *footprint) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stale || e.rel.blocks(fp)
}

// storable returns res as a delivery would store it (run): truncated, its
// reads dropped, when its record would exceed kv.ValueMax, so that a read
// at the leader answers what the same read through the log does, and an
// answer stays within what a client receives.
func storable(res txn.PieceResult) txn.PieceResult {
	if len(appendResultRecord(nil, 0, &res)) > kv.ValueMax {
		return txn.PieceResult{Succeeded: res.Succeeded, Truncated: true}
	}
	return res
}

// readSnapshot returns a view of the committed state for a read of
// footprint fp, or ErrReadWaits when a queued job that has not run
// conflicts with it (rule 2 of conflict.go: for a read, a queued job that
// may write what it reads).
func (e *Executor) readSnapshot(fp *footprint) (*kv.View, error) {
	v, _, err := e.readSnapshotOf(fp, true, false)
	return v, err
}

// readSnapshotOf is readSnapshot, which checks the open jobs only with
// open, and returns a point view (kv.Store.PointView) if point; settled
// reports a view of a state that left the queue and the open jobs empty.
func (e *Executor) readSnapshotOf(fp *footprint, open, point bool) (v *kv.View, settled bool, err error) {
	st := e.cfg.Store
	settledView, view := st.SettledView, st.View
	if point {
		settledView, view = st.SettledPointView, st.PointView
	}
	if v, ok, err := settledView(); ok || err != nil {
		// The state of an entry that left the queue empty.
		return v, ok, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stale {
		// The queue in memory may not be the store's; the next Execute
		// reads it back.
		return nil, false, ErrReadWaits
	}
	if open && e.cfg.Strict && e.rel.blocks(fp) {
		// It would read a write whose transaction is not complete
		// (release.go): its answer would be one that may come before the
		// transaction in real time.
		return nil, false, ErrReadWaits
	}
	if len(e.queue) > 0 {
		set := newConflictSet()
		for _, q := range e.queue {
			set.add(q.footprint())
		}
		if set.blocksRun(fp) {
			return nil, false, ErrReadWaits
		}
	}
	// Every commit of the store is an Execute's, under mu.
	v, err = view()
	return v, false, err
}

// ScanView returns a view of the committed state in which no queued
// delivery may still write a key of [start, end): a point of the group's order for a scan of that range at the
// leader (DESIGN 6.5), as Read takes for a transaction. ErrReadWaits: a
// queued delivery may write there; the caller tries again once the next
// entry applied. The caller releases the view.
func (e *Executor) ScanView(start, end []byte) (*kv.View, error) {
	pm := e.partitions()
	spans, err := pm.Spans(start, end)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotOwned, err)
	}
	for _, sp := range spans {
		if p := sp.Partition; !p.Replicated && p.Group != e.cfg.Self {
			return nil, fmt.Errorf("%w: %s is group %d's", ErrNotOwned, p.Name, p.Group)
		}
	}
	v, err := e.readSnapshot(&footprint{scans: []span{{start: string(start), end: string(end)}}})
	if err != nil {
		return nil, err
	}
	if e.partitions() != pm {
		// As in Read: a move completed since the check.
		v.Release()
		return nil, ErrReadWaits
	}
	return v, nil
}

// viewReader reads user keys of a kv view.
type viewReader struct{ sn *kv.View }

func (r viewReader) Get(key []byte) ([]byte, bool, error) { return r.sn.Get(key) }

func (r viewReader) Scan(start, end []byte, limit int) ([]txn.KV, error) {
	return txnKVs(r.sn.Scan(start, end, limit))
}

// readOnlyWriter is the writer of a read-only piece, which Eval never
// calls: a call is a broken invariant.
type readOnlyWriter struct{}

func (readOnlyWriter) Put(key, _ []byte) error {
	return fmt.Errorf("executor: read: put %s in a read-only transaction", txn.Quote(key))
}

func (readOnlyWriter) Delete(key []byte) error {
	return fmt.Errorf("executor: read: delete %s in a read-only transaction", txn.Quote(key))
}
