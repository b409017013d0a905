package kv

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// checkResults asserts, through a batch, that s keeps the results of
// ids[len(ids)-kept:] and none of the others: Result finds exactly those,
// SetResult refuses exactly those, and the ids held in memory are exactly
// those.
func checkResults(t *testing.T, when string, s *Store, ids []string, kept int) {
	t.Helper()
	b := s.NewBatch()
	defer b.Close()
	for i, id := range ids {
		want := i >= len(ids)-kept
		v, found, err := b.Result(id)
		if err != nil {
			t.Fatal(err)
		}
		if found != want || (found && string(v) != "res "+id) {
			t.Errorf("%s: Result(%s): %q, %v; want found %v", when, id, v, found, want)
		}
		err = b.SetResult(id, []byte("again"))
		if refused := errors.Is(err, ErrInvalid); refused != want {
			t.Errorf("%s: SetResult(%s) again: %v; want refused %v", when, id, err, want)
		}
	}
	s.mu.RLock()
	h := s.h
	s.mu.RUnlock()
	if n := len(h.ids); n != kept {
		t.Errorf("%s: %d result ids in memory, want %d", when, n, kept)
	}
}

// The ids of the results kept, which let a read of a missing result skip
// Pebble, follow every way the results change: commits that add and evict,
// a reopen, a restore from a snapshot.
func TestResultIDsFollowTheStore(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, NoSync: true, ResultsMax: 3})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 5 {
		b := s.NewBatch()
		id := fmt.Sprintf("t%d", i)
		ids = append(ids, id)
		if err := b.SetResult(id, []byte("res "+id)); err != nil {
			t.Fatal(err)
		}
		// Set twice in one batch: refused before Pebble is asked.
		if err := b.SetResult(id, []byte("res "+id)); !errors.Is(err, ErrInvalid) {
			t.Errorf("second SetResult(%s) in one batch: %v, want %v", id, err, ErrInvalid)
		}
		if _, found, err := b.Result(id); err != nil || !found {
			t.Errorf("Result(%s) in the batch that set it: %v, %v", id, found, err)
		}
		if err := s.Commit(b, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
	checkResults(t, "after 5 commits", s, ids, 3)
	buf := bytes.NewBuffer(stream(t, s))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(Options{Dir: dir, NoSync: true, ResultsMax: 3})
	if err != nil {
		t.Fatal(err)
	}
	checkResults(t, "after a reopen", s, ids, 3)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	other := openStore(t, Options{NoSync: true, ResultsMax: 3})
	b := other.NewBatch()
	if err := b.SetResult("t0", []byte("other")); err != nil {
		t.Fatal(err)
	}
	if err := other.Commit(b, 1); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if err := other.RestoreSnapshot(buf, 5); err != nil {
		t.Fatal(err)
	}
	checkResults(t, "after a restore", other, ids, 3)
}

// A batch that sets more results than ResultsMax evicts some of its own:
// they leave the ids held in memory with the older ones, rather than stay
// there for good with no result behind them.
func TestResultIDsOfABatchPastTheBound(t *testing.T) {
	s := openStore(t, Options{NoSync: true, ResultsMax: 3})
	ids := []string{"t0", "t1", "t2", "t3", "t4"}
	b := s.NewBatch()
	defer b.Close()
	if err := b.SetResult(ids[0], []byte("res "+ids[0])); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(b, 1); err != nil {
		t.Fatal(err)
	}
	b = s.NewBatch()
	defer b.Close()
	for _, id := range ids[1:] {
		if err := b.SetResult(id, []byte("res "+id)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Commit(b, 2); err != nil {
		t.Fatal(err)
	}
	checkResults(t, "after a batch of 4 results", s, ids, 3)
}
