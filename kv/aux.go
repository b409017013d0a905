package kv

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// The aux namespace holds the transaction executor's own durable state
// (queued deliveries, stored votes, the sends of recent entries), under
// keys the executor chooses. Aux writes go into the same Pebble batch as
// the user writes of an entry and are committed with its applied index, so
// the executor's state and the data it describes survive a crash together.
// Aux records are part of snapshots.

func auxKey(key []byte) []byte {
	k := make([]byte, 1+len(key))
	k[0] = prefixAux
	copy(k[1:], key)
	return k
}

// checkAuxKey returns an error wrapping ErrInvalid unless key is a valid
// aux key: 1..AuxKeyMax bytes, any bytes.
func checkAuxKey(key []byte) error {
	switch {
	case len(key) == 0:
		return fmt.Errorf("kv: %w: empty aux key", ErrInvalid)
	case len(key) > AuxKeyMax:
		return fmt.Errorf("kv: %w: aux key of %d bytes, more than AuxKeyMax (%d)", ErrInvalid, len(key), AuxKeyMax)
	}
	return nil
}

func checkAuxValue(v []byte) error {
	if len(v) > AuxValueMax {
		return fmt.Errorf("kv: %w: aux value of %d bytes, more than AuxValueMax (%d)", ErrInvalid, len(v), AuxValueMax)
	}
	return nil
}

// auxBounds checks an aux range [start, end) and returns its Pebble
// bounds. An empty start is the first aux key; an empty end is no bound.
func auxBounds(start, end []byte) (lower, upper []byte, err error) {
	lower, upper = auxStart, auxEnd
	if len(start) > 0 {
		if err := checkAuxKey(start); err != nil {
			return nil, nil, fmt.Errorf("kv: aux range start: %w", err)
		}
		lower = auxKey(start)
	}
	if len(end) > 0 {
		if err := checkAuxKey(end); err != nil {
			return nil, nil, fmt.Errorf("kv: aux range end: %w", err)
		}
		if bytes.Compare(start, end) > 0 {
			return nil, nil, fmt.Errorf("kv: %w: aux range start %x after end %x", ErrInvalid, start, end)
		}
		upper = auxKey(end)
	}
	return lower, upper, nil
}

func auxScanBounds(start, end []byte, limit int) (lower, upper []byte, err error) {
	if err := checkScanLimit(limit); err != nil {
		return nil, nil, err
	}
	return auxBounds(start, end)
}

// GetAux returns the value of aux key as the batch sees it.
func (b *Batch) GetAux(key []byte) ([]byte, bool, error) {
	if err := b.usable(); err != nil {
		return nil, false, err
	}
	if err := checkAuxKey(key); err != nil {
		return nil, false, err
	}
	b.key = append(append(b.key[:0], prefixAux), key...)
	return b.point(b.key)
}

// ScanAux returns up to limit aux entries with keys in [start, end) as the
// batch sees them, in key order. An empty start is the first aux key; an
// empty end is no bound.
func (b *Batch) ScanAux(start, end []byte, limit int) ([]KV, error) {
	if err := b.usable(); err != nil {
		return nil, err
	}
	lower, upper, err := auxScanBounds(start, end, limit)
	if err != nil {
		return nil, err
	}
	return scan(b.b, lower, upper, limit)
}

// PutAux sets aux key to value. The batch copies both.
func (b *Batch) PutAux(key, value []byte) error {
	if err := b.usable(); err != nil {
		return err
	}
	if err := checkAuxKey(key); err != nil {
		return err
	}
	if err := checkAuxValue(value); err != nil {
		return err
	}
	if err := b.b.Set(auxKey(key), value, nil); err != nil {
		return fmt.Errorf("kv: put aux: %w", err)
	}
	return nil
}

// DeleteAux deletes aux key; deleting a missing key is not an error.
func (b *Batch) DeleteAux(key []byte) error {
	if err := b.usable(); err != nil {
		return err
	}
	if err := checkAuxKey(key); err != nil {
		return err
	}
	if err := b.b.Delete(auxKey(key), nil); err != nil {
		return fmt.Errorf("kv: delete aux: %w", err)
	}
	return nil
}

// DeleteAuxRange deletes the aux keys in [start, end). An empty start is
// the first aux key; an empty end is no bound. The batch's own reads see
// the deletion at once.
func (b *Batch) DeleteAuxRange(start, end []byte) error {
	if err := b.usable(); err != nil {
		return err
	}
	lower, upper, err := auxBounds(start, end)
	if err != nil {
		return err
	}
	if err := b.b.DeleteRange(lower, upper, nil); err != nil {
		return fmt.Errorf("kv: delete aux range: %w", err)
	}
	return nil
}

// GetAux returns the committed value of aux key.
func (s *Store) GetAux(key []byte) (value []byte, found bool, err error) {
	if err := checkAuxKey(key); err != nil {
		return nil, false, err
	}
	err = s.read(func(db *pebble.DB) error {
		value, found, err = get(db, auxKey(key))
		return err
	})
	return value, found, err
}

// ScanAux returns up to limit committed aux entries with keys in [start,
// end), in key order. An empty start is the first aux key; an empty end is
// no bound.
func (s *Store) ScanAux(start, end []byte, limit int) (kvs []KV, err error) {
	lower, upper, err := auxScanBounds(start, end, limit)
	if err != nil {
		return nil, err
	}
	err = s.read(func(db *pebble.DB) error {
		kvs, err = scan(db, lower, upper, limit)
		return err
	})
	return kvs, err
}

// CommitAux writes b's aux writes and leaves the applied index as it is:
// for bookkeeping that belongs to no raft entry (dropping records the
// executor no longer needs). b must hold aux writes only: a batch with user
// writes or results is rejected with an error wrapping ErrInvalid, since
// those must be committed with their entry's index. It syncs unless
// Options.NoSync. As with Commit, once CommitAux gets past validation b
// accepts no more operations.
func (s *Store) CommitAux(b *Batch) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.RLock()
	err := s.usableLocked()
	h := s.h
	s.mu.RUnlock()
	switch {
	case err != nil:
		return err
	case b == nil || b.s != s:
		return fmt.Errorf("kv: commit aux: %w: batch of another store", ErrInvalid)
	case b.done:
		return fmt.Errorf("kv: commit aux: %w: batch already committed or closed", ErrInvalid)
	case b.h != h:
		return fmt.Errorf("kv: commit aux: %w: batch opened before a snapshot was restored", ErrInvalid)
	case b.data:
		return fmt.Errorf("kv: commit aux: %w: batch holds user writes or results", ErrInvalid)
	}
	b.done = true
	if err := b.b.Commit(s.writeOpts); err != nil {
		return fmt.Errorf("kv: commit aux: %w", err)
	}
	return nil
}
