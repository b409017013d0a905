package kv

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// Batch collects the writes and results of one raft entry. It is an
// indexed Pebble batch: its reads see its own writes over the committed
// state as of the read (commits are serialized by the replica's apply
// loop, so no other commit lands while a batch is built). A Batch is used by one goroutine; Commit applies it, Close
// releases it (always call Close, also after Commit).
//
// A Batch opened before RestoreSnapshot keeps reading the state it was
// opened on, and Commit rejects it.
type Batch struct {
	s       *Store
	h       *handle
	b       *pebble.Batch
	results []string // ids given to SetResult, in call order
	data    bool     // holds user writes or results (CommitAux refuses it)
	done    bool     // committed (or a commit was attempted) or closed
	settled bool     // MarkSettled
	ranged  bool     // holds a DeleteRange: the row cache is purged at commit
	closed  bool

	// it serves the batch's point reads (Get, Result): Pebble's Batch.Get
	// makes an iterator a call, and an entry's execution reads many keys.
	// It sees the batch as of itCount mutations, and is refreshed when the
	// batch has more. key is scratch for the Pebble key of a read.
	it      *pebble.Iterator
	itCount uint32
	key     []byte

	// The row cache (rowcache.go): rowToken is the batch's token, 0 if it
	// goes without the cache; itEpoch the cache's epoch when its iterator
	// was made, which a fill from it must match; rows what it keeps for
	// the cache.
	rowToken uint64
	itEpoch  uint64
	rows     rowScratch
}

// NewBatch returns an empty batch on the store's current state. After
// Close, or if the store failed, it returns a batch whose every operation
// fails with the store's error.
func (s *Store) NewBatch() *Batch {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.usableLocked() != nil {
		return &Batch{s: s, done: true}
	}
	s.h.acquire()
	b := &Batch{s: s, h: s.h, b: s.h.db.NewIndexedBatch()}
	if s.h.rows != nil {
		b.rowToken, b.rows = s.h.rows.begin()
	}
	return b
}

// usable returns an error unless the batch accepts operations.
func (b *Batch) usable() error {
	switch {
	case b.h == nil:
		return fmt.Errorf("kv: batch: %w", ErrClosed)
	case b.done:
		return fmt.Errorf("kv: batch: %w: already committed or closed", ErrInvalid)
	}
	return nil
}

// Get returns the value of key as the batch sees it.
func (b *Batch) Get(key []byte) ([]byte, bool, error) {
	if err := b.usable(); err != nil {
		return nil, false, err
	}
	if err := checkKey(key); err != nil {
		return nil, false, err
	}
	var rows *rowCache // nil: the batch goes without the row cache
	// A batch that deleted a range reads through its iterator alone: its
	// slots are not marked for the keys of the range, and a fill would
	// store its own deletion as committed.
	if b.rowToken != 0 && !b.ranged {
		rows = b.h.rows
		v, found, ok, mine := rows.get(b.rowToken, key, b.it != nil, b.itEpoch)
		switch {
		case mine > 0:
			// The batch's own last write of key, if it kept its value;
			// else the batch's view below (the slot is pending: no fill).
			if w := &b.rows.writes[mine-1]; w.fits && bytes.Equal(w.key, key) {
				if !w.found {
					return nil, false, nil
				}
				return append(make([]byte, 0, len(w.value)), w.value...), true, nil
			}
		case ok:
			return v, found, nil
		}
	}
	b.key = append(append(b.key[:0], prefixData), key...)
	v, found, err := b.point(b.key)
	if err == nil && rows != nil {
		rows.fill(b.itEpoch, key, v, found)
	}
	return v, found, err
}

// point returns a copy of the value of the Pebble key k as the batch sees
// it, its own writes included.
func (b *Batch) point(k []byte) ([]byte, bool, error) {
	switch {
	case b.it == nil:
		if b.rowToken != 0 {
			// Read before the iterator is made: a commit in between makes
			// the cache refuse fills that were safe, never the reverse.
			b.itEpoch = b.h.rows.currentEpoch()
		}
		it, err := b.b.NewIter(nil)
		if err != nil {
			return nil, false, fmt.Errorf("kv: %w", err)
		}
		b.it, b.itCount = it, b.b.Count()
	case b.itCount != b.b.Count():
		// An iterator sees the batch as it was when made or last given
		// options: the same options again refresh its view.
		b.it.SetOptions(&pebble.IterOptions{})
		b.itCount = b.b.Count()
	}
	// SeekPrefixGE finds k itself or nothing (the comparer's prefix of a
	// key is the whole key), and lets the tables' bloom filters skip.
	if !b.it.SeekPrefixGE(k) || !bytes.Equal(b.it.Key(), k) {
		if err := b.it.Error(); err != nil {
			return nil, false, fmt.Errorf("kv: %w", err)
		}
		return nil, false, nil
	}
	v, err := b.it.ValueAndErr()
	if err != nil {
		return nil, false, fmt.Errorf("kv: %w", err)
	}
	return append([]byte{}, v...), true, nil
}

// closeIter closes the batch's read iterator, if it has one.
func (b *Batch) closeIter() {
	if b.it != nil {
		// An iterator fails its Close only with an error a read already
		// returned.
		_ = b.it.Close()
		b.it = nil
	}
}

// Scan returns up to limit entries with keys in [start, end) as the batch
// sees them, in key order. An empty start is the first key; an empty end is
// no bound.
func (b *Batch) Scan(start, end []byte, limit int) ([]KV, error) {
	if err := b.usable(); err != nil {
		return nil, err
	}
	lower, upper, err := scanBounds(start, end, limit)
	if err != nil {
		return nil, err
	}
	return scan(b.b, lower, upper, limit)
}

// Put sets key to value. The batch copies both.
func (b *Batch) Put(key, value []byte) error {
	if err := b.usable(); err != nil {
		return err
	}
	if err := checkKey(key); err != nil {
		return err
	}
	if err := checkValue("value", value); err != nil {
		return err
	}
	if err := b.b.Set(dataKey(key), value, nil); err != nil {
		return fmt.Errorf("kv: put: %w", err)
	}
	b.data = true
	b.wrote(key, value, true)
	return nil
}

// Delete deletes key; deleting a missing key is not an error.
func (b *Batch) Delete(key []byte) error {
	if err := b.usable(); err != nil {
		return err
	}
	if err := checkKey(key); err != nil {
		return err
	}
	if err := b.b.Delete(dataKey(key), nil); err != nil {
		return fmt.Errorf("kv: delete: %w", err)
	}
	b.data = true
	b.wrote(key, nil, false)
	return nil
}

// DeleteRange deletes every key in [start, end); an empty end has no
// upper bound. The row cache forgets every row at the commit.
func (b *Batch) DeleteRange(start, end []byte) error {
	if err := b.usable(); err != nil {
		return err
	}
	if err := checkKey(start); err != nil {
		return err
	}
	upper := dataEnd
	if len(end) > 0 {
		if err := checkKey(end); err != nil {
			return err
		}
		if bytes.Compare(start, end) >= 0 {
			return fmt.Errorf("kv: delete range: %w: end %q is not after start %q", ErrInvalid, end, start)
		}
		upper = dataKey(end)
	}
	if err := b.b.DeleteRange(dataKey(start), upper, nil); err != nil {
		return fmt.Errorf("kv: delete range: %w", err)
	}
	b.data, b.ranged = true, true
	return nil
}

// wrote tells the row cache that the batch wrote key (value, or deleted it
// if found is false), and keeps the write for the commit when the cache
// needs it: every write of a batch without the cache; otherwise the writes
// of rows the cache holds (and all writes to a slot another batch's commit
// emptied: rowCache.wrote).
func (b *Batch) wrote(key, value []byte, found bool) {
	rows := b.h.rows
	if rows == nil {
		return
	}
	w := rowWrite{found: found, fits: len(key)+len(value) <= rowCacheEntryMax}
	if b.rowToken != 0 {
		slot, keep := rows.wrote(b.rowToken, key, len(b.rows.writes))
		b.rows.slots = append(b.rows.slots, slot)
		if !keep {
			return
		}
	} else {
		w.fits = false // only the key is needed
	}
	sc := &b.rows
	n := len(sc.buf)
	sc.buf = append(sc.buf, key...)
	w.key = sc.buf[n:len(sc.buf):len(sc.buf)]
	if w.fits {
		n = len(sc.buf)
		sc.buf = append(sc.buf, value...)
		w.value = sc.buf[n:len(sc.buf):len(sc.buf)]
	}
	sc.writes = append(sc.writes, w)
}

// rowsCommitting advances the row cache's epoch before the batch's
// commit, if the commit may change a row: an iterator made while Pebble
// commits, whose fills the epoch tells, may already see the new rows, and
// a View taken before the commit must not read them.
func (b *Batch) rowsCommitting() {
	if rows := b.h.rows; rows != nil && (b.ranged || b.rows.wroteRows()) {
		rows.advance()
	}
}

// rowsCommitted updates the row cache after the batch's commit: failed
// tells that Pebble refused it.
func (b *Batch) rowsCommitted(failed bool) {
	rows := b.h.rows
	switch {
	case rows == nil:
		return
	case failed || b.ranged:
		rows.purge()
		rows.release(b.rowToken, b.rows)
	case b.rows.wroteRows():
		rows.committed(b.rowToken, b.rows)
	default:
		rows.release(b.rowToken, b.rows)
	}
	b.rowToken, b.rows = 0, rowScratch{}
}

// Result returns the result of transaction id as the batch sees it.
func (b *Batch) Result(id string) ([]byte, bool, error) {
	if err := b.usable(); err != nil {
		return nil, false, err
	}
	if err := checkResultID(id); err != nil {
		return nil, false, err
	}
	if !b.h.mayHaveResult(id) && !slices.Contains(b.results, id) {
		return nil, false, nil
	}
	return b.point(resultKey(id))
}

// SetResult stores the result of transaction id with the batch. A result
// is set once: setting one the batch already sees (committed and not yet
// evicted, or set earlier in the batch) is an error wrapping ErrInvalid, as
// a re-submitted transaction must get its first result.
func (b *Batch) SetResult(id string, result []byte) error {
	if err := b.usable(); err != nil {
		return err
	}
	if err := checkResultID(id); err != nil {
		return err
	}
	if err := checkValue("result", result); err != nil {
		return err
	}
	k := resultKey(id)
	found := slices.Contains(b.results, id)
	var err error
	if !found && b.h.mayHaveResult(id) {
		_, found, err = b.point(k)
	}
	switch {
	case err != nil:
		return err
	case found:
		return fmt.Errorf("kv: %w: result of %q already set", ErrInvalid, id)
	}
	if err := b.b.Set(k, result, nil); err != nil {
		return fmt.Errorf("kv: set result: %w", err)
	}
	b.results = append(b.results, id)
	b.data = true
	return nil
}

// Close releases the batch; a second Close does nothing.
func (b *Batch) Close() {
	if b.closed || b.h == nil {
		b.closed = true
		return
	}
	b.closed, b.done = true, true
	b.closeIter()
	if b.h.rows != nil && b.rowToken != 0 {
		b.h.rows.release(b.rowToken, b.rows)
		b.rowToken, b.rows = 0, rowScratch{}
	}
	// Pebble's batch Close fails only on a second close, which cannot
	// happen here. Closing the files, when this is the last reference after
	// the store's Close or a restore, has no caller to report to.
	_ = b.b.Close()
	_ = b.h.release()
}

// check returns the first broken invariant of a batch about to be
// committed, nil if none: each result set once (SetResult refuses a
// second), a batch with results counted as holding data (so that
// CommitAux refuses it), and its read iterator no newer than the batch.
func (b *Batch) check() error {
	ids := slices.Clone(b.results)
	slices.Sort(ids)
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			return fmt.Errorf("kv: batch sets the result of %q twice", ids[i])
		}
	}
	switch {
	case len(b.results) > 0 && !b.data:
		return fmt.Errorf("kv: batch of %d results holds no data", len(b.results))
	case b.it != nil && b.itCount > b.b.Count():
		return fmt.Errorf("kv: batch read iterator at %d mutations, the batch has %d", b.itCount, b.b.Count())
	}
	return nil
}
