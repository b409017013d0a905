package kv

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// View is a read-only, point-in-time view of a store's user data, for the
// reads a leader serves on its applied state (DESIGN 6.5). Unlike a
// Snapshot it reads no meta record and does not wait for a commit in
// progress: it sees the last commit that Pebble published, whole (a batch
// commits atomically). It stays valid across later commits, a
// RestoreSnapshot and the store's Close, until Release; a point view
// (PointView) only until the next commit.
type View struct {
	h  *handle
	ps *pebble.Snapshot // nil: a point view that has not needed one yet
	// rows is the row cache when the view may read through it, and epoch
	// the cache's epoch of the view's state: the cache serves the view
	// while it is still at that epoch (no commit since).
	rows  *rowCache
	epoch uint64
	// A point view's store and the commit generation of its state (even).
	s        *Store
	gen      uint64
	released atomic.Bool
}

// ErrViewMoved is the error of a read of a point view (Store.PointView)
// after a commit came: the view's state is no longer Pebble's, and it has
// no snapshot of it. The caller takes another view.
var ErrViewMoved = errors.New("kv: view moved: a commit came since the point view was taken")

// View returns a view of the committed state.
func (s *Store) View() (*View, error) { return s.view(false) }

// PointView returns a view of the committed state for point reads made at
// once, by one goroutine: it takes no Pebble snapshot (whose release, with
// many readers, costs more than a read the row cache serves), so its reads
// are of its state only while no commit comes. After one, a read the row
// cache serves at the view's epoch (no commit that changed rows came) is
// still of the view's state, and a read that needs Pebble fails with
// ErrViewMoved, unless a Scan took the view's snapshot before the commit (a
// Scan needs one). Taken while a commit runs, it is a View.
func (s *Store) PointView() (*View, error) { return s.view(true) }

// view returns a View, a point view if point. It reads through the row
// cache if it took its state where no commit ran: with the commit
// generation even and unchanged around the cache's epoch and the snapshot,
// no commit began or ended in between, and a commit changes the cache
// before it ends (commit), so the cache at that epoch holds rows of the
// snapshot's state. A point view's reads check the generation the same
// way.
func (s *Store) view(point bool) (*View, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usableLocked(); err != nil {
		return nil, err
	}
	h := s.h
	h.acquire()
	gen := s.viewGen.Load()
	var epoch uint64
	if h.rows != nil {
		epoch = h.rows.currentEpoch()
	}
	v := &View{h: h}
	if !point || gen%2 == 1 || s.viewGen.Load() != gen {
		v.ps = h.db.NewSnapshot()
	} else {
		v.s, v.gen = s, gen
	}
	if h.rows != nil && gen%2 == 0 && s.viewGen.Load() == gen {
		v.rows, v.epoch = h.rows, epoch
	}
	return v, nil
}

// snapshot returns the view's snapshot, taking a point view's now if it
// has none and its state is still Pebble's.
func (v *View) snapshot() (*pebble.Snapshot, error) {
	if v.ps != nil {
		return v.ps, nil
	}
	ps := v.h.db.NewSnapshot()
	if v.s.viewGen.Load() != v.gen {
		_ = ps.Close()
		return nil, ErrViewMoved
	}
	v.ps = ps
	return ps, nil
}

// MarkSettled marks the state this batch commits as settled: its committer
// (the executor) knows that no write it has put off may still change a
// read of it, so that SettledView may serve it without asking. A state
// that is not marked, or one a RestoreSnapshot installed, is not settled.
func (b *Batch) MarkSettled() { b.settled = true }

// SettledView returns a view of the committed state if the last commit
// was of a batch marked settled, and false otherwise: then the caller
// must learn otherwise whether the state may be read (DESIGN 6.5). It takes
// no lock a commit holds: it reads a generation that every commit makes
// odd while Pebble commits, before and after taking the view, and keeps
// the view only if the generation was even, the state settled, and no
// commit began meanwhile.
func (s *Store) SettledView() (*View, bool, error) { return s.settledView(false) }

// SettledPointView is SettledView's point view (PointView).
func (s *Store) SettledPointView() (*View, bool, error) { return s.settledView(true) }

func (s *Store) settledView(point bool) (*View, bool, error) {
	gen := s.viewGen.Load()
	if gen%2 == 1 || !s.settled.Load() {
		return nil, false, nil
	}
	v, err := s.view(point)
	if err != nil {
		return nil, false, err
	}
	if s.viewGen.Load() != gen {
		v.Release()
		return nil, false, nil
	}
	return v, true, nil
}

// Release releases the view; a second Release does nothing.
func (v *View) Release() {
	if v.released.Swap(true) {
		return
	}
	// As Snapshot.Release: no one to report either error to.
	if v.ps != nil {
		_ = v.ps.Close()
	}
	_ = v.h.release()
}

// Get returns the value of key in the view.
func (v *View) Get(key []byte) (value []byte, found bool, err error) {
	if err := checkKey(key); err != nil {
		return nil, false, err
	}
	if v.released.Load() {
		return nil, false, fmt.Errorf("kv: view: %w: released", ErrInvalid)
	}
	if v.rows != nil {
		if value, found, ok := v.rows.viewGet(v.epoch, key); ok {
			return value, found, nil
		}
	}
	if v.ps != nil {
		value, found, err = get(v.ps, dataKey(key))
	} else {
		// A point view without a snapshot reads Pebble's latest state,
		// its own if no commit began since it was taken.
		value, found, err = get(v.h.db, dataKey(key))
		if err == nil && v.s.viewGen.Load() != v.gen {
			return nil, false, ErrViewMoved
		}
	}
	if err == nil && v.rows != nil {
		v.rows.fill(v.epoch, key, value, found)
	}
	return value, found, err
}

// Scan returns up to limit entries of the view with keys in [start, end),
// in key order, as Store.Scan does.
func (v *View) Scan(start, end []byte, limit int) ([]KV, error) {
	lower, upper, err := scanBounds(start, end, limit)
	if err != nil {
		return nil, err
	}
	if v.released.Load() {
		return nil, fmt.Errorf("kv: view: %w: released", ErrInvalid)
	}
	ps, err := v.snapshot()
	if err != nil {
		return nil, err
	}
	return scan(ps, lower, upper, limit)
}

// ScanBytes is Scan bounded in bytes too, as Store.ScanBytes is.
func (v *View) ScanBytes(start, end []byte, limit, bytesMax int) (kvs []KV, next []byte, err error) {
	lower, upper, err := scanBytesBounds(start, end, limit, bytesMax)
	if err != nil {
		return nil, nil, err
	}
	if v.released.Load() {
		return nil, nil, fmt.Errorf("kv: view: %w: released", ErrInvalid)
	}
	ps, err := v.snapshot()
	if err != nil {
		return nil, nil, err
	}
	return scanBounded(ps, lower, upper, limit, bytesMax)
}
