package kv

import (
	"fmt"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
)

// View is a read-only, point-in-time view of a store's user data, for the
// reads a leader serves on its applied state (DESIGN 6.5). Unlike a
// Snapshot it reads no meta record and does not wait for a commit in
// progress: it sees the last commit that Pebble published, whole (a batch
// commits atomically). It stays valid across later commits, a
// RestoreSnapshot and the store's Close, until Release.
type View struct {
	h        *handle
	ps       *pebble.Snapshot
	released atomic.Bool
}

// View returns a view of the committed state.
func (s *Store) View() (*View, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usableLocked(); err != nil {
		return nil, err
	}
	s.h.acquire()
	return &View{h: s.h, ps: s.h.db.NewSnapshot()}, nil
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
func (s *Store) SettledView() (*View, bool, error) {
	gen := s.viewGen.Load()
	if gen%2 == 1 || !s.settled.Load() {
		return nil, false, nil
	}
	v, err := s.View()
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
	_ = v.ps.Close()
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
	return get(v.ps, dataKey(key))
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
	return scan(v.ps, lower, upper, limit)
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
	return scanBounded(v.ps, lower, upper, limit, bytesMax)
}
