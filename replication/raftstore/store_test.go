package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"
)

// openStore opens a store in dir and closes it when the test ends, unless
// the test closed it already.
func openStore(t testing.TB, dir string, noSync bool) *Store {
	t.Helper()
	s, err := Open(Options{Dir: dir, NoSync: noSync})
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// entry returns the entry tests store at index i in term term.
func entry(i, term uint64) *raft.Log {
	return &raft.Log{
		Index:      i,
		Term:       term,
		Type:       raft.LogCommand,
		Data:       fmt.Appendf(nil, "data-%d-%d", i, term),
		Extensions: fmt.Appendf(nil, "ext-%d", i),
		AppendedAt: time.Unix(1700000000, int64(i)),
	}
}

// entries returns entry(i, term) for i in [lo, hi].
func entries(lo, hi, term uint64) []*raft.Log {
	var ls []*raft.Log
	for i := lo; i <= hi; i++ {
		ls = append(ls, entry(i, term))
	}
	return ls
}

func mustStore(t testing.TB, s *Store, ls []*raft.Log) {
	t.Helper()
	if err := s.StoreLogs(ls); err != nil {
		t.Fatalf("StoreLogs: %v", err)
	}
}

func checkBounds(t testing.TB, s *Store, wantFirst, wantLast uint64) {
	t.Helper()
	first, err := s.FirstIndex()
	if err != nil {
		t.Fatalf("FirstIndex: %v", err)
	}
	last, err := s.LastIndex()
	if err != nil {
		t.Fatalf("LastIndex: %v", err)
	}
	if first != wantFirst || last != wantLast {
		t.Fatalf("bounds = [%d, %d], want [%d, %d]", first, last, wantFirst, wantLast)
	}
}

// checkEntry checks that the entry at want.Index is want.
func checkEntry(t testing.TB, s *Store, want *raft.Log) {
	t.Helper()
	var got raft.Log
	if err := s.GetLog(want.Index, &got); err != nil {
		t.Fatalf("GetLog(%d): %v", want.Index, err)
	}
	if diff := cmp.Diff(*want, got); diff != "" {
		t.Fatalf("GetLog(%d) (-want +got):\n%s", want.Index, diff)
	}
}

// checkMissing checks that there is no entry at index.
func checkMissing(t testing.TB, s *Store, index uint64) {
	t.Helper()
	var got raft.Log
	// raft compares with ==, so the error must not be wrapped.
	if err := s.GetLog(index, &got); err != raft.ErrLogNotFound { //nolint:errorlint // raft itself compares with ==
		t.Fatalf("GetLog(%d) = %v, want raft.ErrLogNotFound itself", index, err)
	}
}

func TestEmptyStore(t *testing.T) {
	s := openStore(t, t.TempDir(), true)
	checkBounds(t, s, 0, 0)
	checkMissing(t, s, 0)
	checkMissing(t, s, 1)
	checkMissing(t, s, math.MaxUint64)
}

func TestLogRoundTrip(t *testing.T) {
	s := openStore(t, t.TempDir(), true)
	ls := []*raft.Log{
		{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: []byte("conf")},
		{Index: 2, Term: 1, Type: raft.LogNoop, AppendedAt: time.Unix(5, 6)},
		{Index: 3, Term: 2, Type: raft.LogCommand, Data: bytes.Repeat([]byte("0123456789abcdef"), 4096), Extensions: []byte{1, 2, 3}},
		{Index: 4, Term: 2, Type: raft.LogBarrier},
	}
	mustStore(t, s, ls[:1])
	if err := s.StoreLog(ls[1]); err != nil {
		t.Fatalf("StoreLog: %v", err)
	}
	mustStore(t, s, ls[2:])
	checkBounds(t, s, 1, 4)
	for _, l := range ls {
		checkEntry(t, s, l)
	}
	checkMissing(t, s, 5)

	// GetLog overwrites every field of its argument.
	got := raft.Log{Index: 99, Data: []byte("stale"), Extensions: []byte("stale"), AppendedAt: time.Now()}
	if err := s.GetLog(4, &got); err != nil {
		t.Fatalf("GetLog(4): %v", err)
	}
	if diff := cmp.Diff(*ls[3], got); diff != "" {
		t.Fatalf("GetLog(4) into a used Log (-want +got):\n%s", diff)
	}
	// The caller owns what GetLog returns.
	got.Data = append(got.Data, 'x')
	checkEntry(t, s, ls[3])
}

func TestStoreLogsRejects(t *testing.T) {
	s := openStore(t, t.TempDir(), true)
	mustStore(t, s, entries(1, 3, 1))
	tests := []struct {
		name string
		ls   []*raft.Log
	}{
		{name: "nil entry", ls: []*raft.Log{entry(4, 1), nil}},
		{name: "index 0", ls: []*raft.Log{entry(4, 1), {Index: 0, Term: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.StoreLogs(tt.ls); err == nil {
				t.Fatal("StoreLogs succeeded, want an error")
			}
			// Nothing of a refused batch is stored.
			checkBounds(t, s, 1, 3)
			checkMissing(t, s, 4)
		})
	}
	if err := s.StoreLogs(nil); err != nil {
		t.Fatalf("StoreLogs(nil) = %v, want nil", err)
	}
	checkBounds(t, s, 1, 3)
}

func TestDeleteRange(t *testing.T) {
	tests := []struct {
		name      string
		lo, hi    uint64
		wantFirst uint64
		wantLast  uint64
	}{
		{name: "head (compaction)", lo: 1, hi: 40, wantFirst: 41, wantLast: 100},
		{name: "tail (truncation)", lo: 80, hi: 100, wantFirst: 1, wantLast: 79},
		{name: "middle leaves a gap", lo: 40, hi: 60, wantFirst: 1, wantLast: 100},
		{name: "all", lo: 1, hi: 100, wantFirst: 0, wantLast: 0},
		{name: "from 0, as RecoverCluster does", lo: 0, hi: 100, wantFirst: 0, wantLast: 0},
		{name: "beyond the log", lo: 101, hi: 500, wantFirst: 1, wantLast: 100},
		{name: "tail to max uint64", lo: 51, hi: math.MaxUint64, wantFirst: 1, wantLast: 50},
		{name: "overlapping the head", lo: 0, hi: 10, wantFirst: 11, wantLast: 100},
		{name: "one entry", lo: 100, hi: 100, wantFirst: 1, wantLast: 99},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t, t.TempDir(), true)
			mustStore(t, s, entries(1, 100, 1))
			if err := s.DeleteRange(tt.lo, tt.hi); err != nil {
				t.Fatalf("DeleteRange(%d, %d): %v", tt.lo, tt.hi, err)
			}
			checkBounds(t, s, tt.wantFirst, tt.wantLast)
			for i := uint64(1); i <= 100; i++ {
				if i >= tt.lo && i <= tt.hi {
					checkMissing(t, s, i)
				} else {
					checkEntry(t, s, entry(i, 1))
				}
			}
		})
	}
}

func TestDeleteRangeRejectsInvertedRange(t *testing.T) {
	s := openStore(t, t.TempDir(), true)
	mustStore(t, s, entries(1, 10, 1))
	if err := s.DeleteRange(6, 5); err == nil {
		t.Fatal("DeleteRange(6, 5) succeeded, want an error")
	}
	checkBounds(t, s, 1, 10)
}

// TestTruncateThenAppend follows raft's two log rewrites: compaction at the
// head after a snapshot, and a new leader's entries replacing a conflicting
// tail.
func TestTruncateThenAppend(t *testing.T) {
	s := openStore(t, t.TempDir(), true)
	mustStore(t, s, entries(1, 50, 1))

	// Compaction, then the log grows.
	if err := s.DeleteRange(1, 30); err != nil {
		t.Fatalf("DeleteRange(1, 30): %v", err)
	}
	mustStore(t, s, entries(51, 60, 1))
	checkBounds(t, s, 31, 60)

	// A leader of term 2 disagrees from 45 on: raft deletes 45..60 and
	// stores its own entries, fewer than were there.
	if err := s.DeleteRange(45, 60); err != nil {
		t.Fatalf("DeleteRange(45, 60): %v", err)
	}
	checkBounds(t, s, 31, 44)
	mustStore(t, s, entries(45, 52, 2))
	checkBounds(t, s, 31, 52)
	for i := uint64(31); i <= 44; i++ {
		checkEntry(t, s, entry(i, 1))
	}
	for i := uint64(45); i <= 52; i++ {
		checkEntry(t, s, entry(i, 2))
	}
	for i := uint64(53); i <= 60; i++ {
		checkMissing(t, s, i)
	}

	// Everything compacted away, then the log restarts past a gap, as after
	// installing a snapshot.
	if err := s.DeleteRange(31, 52); err != nil {
		t.Fatalf("DeleteRange(31, 52): %v", err)
	}
	checkBounds(t, s, 0, 0)
	mustStore(t, s, entries(1000, 1004, 3))
	checkBounds(t, s, 1000, 1004)
	checkEntry(t, s, entry(1000, 3))
}

func TestStoreLogsWithGap(t *testing.T) {
	s := openStore(t, t.TempDir(), true)
	mustStore(t, s, entries(1, 10, 1))
	mustStore(t, s, entries(20, 30, 2))
	checkBounds(t, s, 1, 30)
	checkMissing(t, s, 15)
	if err := s.DeleteRange(1, 10); err != nil {
		t.Fatalf("DeleteRange(1, 10): %v", err)
	}
	checkBounds(t, s, 20, 30)
	// An entry below the first, stored later, moves the first index down.
	mustStore(t, s, entries(5, 5, 2))
	checkBounds(t, s, 5, 30)
}

func TestStableStore(t *testing.T) {
	s := openStore(t, t.TempDir(), true)

	// What raft reads on a fresh replica (NewRaft; requestVote).
	_, err := s.Get([]byte("LastVoteCand"))
	if !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("Get(missing) = %v, want ErrKeyNotFound", err)
	}
	if err.Error() != "not found" {
		t.Fatalf("Get(missing) error text = %q, want exactly %q, which raft compares with", err.Error(), "not found")
	}
	if v, err := s.GetUint64([]byte("CurrentTerm")); v != 0 || err != nil {
		t.Fatalf("GetUint64(missing) = %d, %v, want 0, nil", v, err)
	}

	set := func(k, v string) {
		t.Helper()
		if err := s.Set([]byte(k), []byte(v)); err != nil {
			t.Fatalf("Set(%q): %v", k, err)
		}
	}
	get := func(k string) []byte {
		t.Helper()
		v, err := s.Get([]byte(k))
		if err != nil {
			t.Fatalf("Get(%q): %v", k, err)
		}
		return v
	}
	set("LastVoteCand", "node-1")
	set("LastVoteCand", "node-2")
	if got := string(get("LastVoteCand")); got != "node-2" {
		t.Fatalf("Get after overwrite = %q, want %q", got, "node-2")
	}
	set("empty", "")
	if got := get("empty"); got == nil || len(got) != 0 {
		t.Fatalf("Get(empty value) = %#v, want a non-nil empty slice", got)
	}

	if err := s.SetUint64([]byte("CurrentTerm"), math.MaxUint64-1); err != nil {
		t.Fatalf("SetUint64: %v", err)
	}
	if v, err := s.GetUint64([]byte("CurrentTerm")); v != math.MaxUint64-1 || err != nil {
		t.Fatalf("GetUint64 = %d, %v, want %d, nil", v, err, uint64(math.MaxUint64-1))
	}

	// A value that is not 8 bytes is not a uint64.
	set("short", "abc")
	if _, err := s.GetUint64([]byte("short")); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("GetUint64(3-byte value) = %v, want ErrCorrupt", err)
	}

	// A stable key that looks like a log key lives in its own space.
	if err := s.Set(logKey(7), []byte("not a log entry")); err != nil {
		t.Fatalf("Set: %v", err)
	}
	checkBounds(t, s, 0, 0)
	checkMissing(t, s, 7)
}

func TestHasExistingState(t *testing.T) {
	s := openStore(t, t.TempDir(), true)
	snaps := raft.NewInmemSnapshotStore()
	has, err := raft.HasExistingState(s, s, snaps)
	if err != nil || has {
		t.Fatalf("HasExistingState(fresh) = %v, %v, want false, nil", has, err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 1); err != nil {
		t.Fatalf("SetUint64: %v", err)
	}
	has, err = raft.HasExistingState(s, s, snaps)
	if err != nil || !has {
		t.Fatalf("HasExistingState(with a term) = %v, %v, want true, nil", has, err)
	}
}

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, false)
	mustStore(t, s, entries(1, 200, 1))
	if err := s.DeleteRange(1, 120); err != nil {
		t.Fatalf("DeleteRange: %v", err)
	}
	if err := s.DeleteRange(190, 200); err != nil {
		t.Fatalf("DeleteRange: %v", err)
	}
	mustStore(t, s, entries(190, 195, 2))
	if err := s.SetUint64([]byte("CurrentTerm"), 2); err != nil {
		t.Fatalf("SetUint64: %v", err)
	}
	if err := s.Set([]byte("LastVoteCand"), []byte("node-3")); err != nil {
		t.Fatalf("Set: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s = openStore(t, dir, false)
	checkBounds(t, s, 121, 195)
	checkMissing(t, s, 120)
	for i := uint64(121); i <= 189; i++ {
		checkEntry(t, s, entry(i, 1))
	}
	for i := uint64(190); i <= 195; i++ {
		checkEntry(t, s, entry(i, 2))
	}
	checkMissing(t, s, 196)
	if v, err := s.GetUint64([]byte("CurrentTerm")); v != 2 || err != nil {
		t.Fatalf("GetUint64(CurrentTerm) = %d, %v, want 2, nil", v, err)
	}
	if v, err := s.Get([]byte("LastVoteCand")); string(v) != "node-3" || err != nil {
		t.Fatalf("Get(LastVoteCand) = %q, %v, want node-3, nil", v, err)
	}
}

// copyDir copies the regular files of src into a new directory, the way a
// crash leaves them: whatever reached the files, with no close or flush.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			// Pebble deletes obsolete files in the background; one
			// listed and then gone is one a crash would not need.
			return nil
		}
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			return errors.Join(err, out.Close())
		}
		return out.Close()
	})
	if err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
	return dst
}

// TestCrashRecovery copies the directory of an open store, as a crash
// would leave it, after synced writes returned: Pebble's write-ahead log
// must bring every one of them back in the copy.
func TestCrashRecovery(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, false)
	var last uint64
	for round := uint64(1); round <= 3; round++ {
		mustStore(t, s, entries(last+1, last+64, round))
		last += 64
		if err := s.SetUint64([]byte("CurrentTerm"), round); err != nil {
			t.Fatalf("SetUint64: %v", err)
		}
		if round == 2 {
			if err := s.DeleteRange(1, 32); err != nil {
				t.Fatalf("DeleteRange: %v", err)
			}
		}

		crashed := copyDir(t, dir)
		c := openStore(t, crashed, false)
		wantFirst := uint64(1)
		if round >= 2 {
			wantFirst = 33
		}
		checkBounds(t, c, wantFirst, last)
		for i := wantFirst; i <= last; i++ {
			checkEntry(t, c, entry(i, (i-1)/64+1))
		}
		if v, err := c.GetUint64([]byte("CurrentTerm")); v != round || err != nil {
			t.Fatalf("round %d: GetUint64(CurrentTerm) in the copy = %d, %v, want %d, nil", round, v, err, round)
		}
		if err := c.Close(); err != nil {
			t.Fatalf("Close copy: %v", err)
		}
	}
}

func TestClosed(t *testing.T) {
	s := openStore(t, t.TempDir(), true)
	mustStore(t, s, entries(1, 3, 1))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	var l raft.Log
	calls := []struct {
		name string
		call func() error
	}{
		{"Close", s.Close},
		{"FirstIndex", func() error { _, err := s.FirstIndex(); return err }},
		{"LastIndex", func() error { _, err := s.LastIndex(); return err }},
		{"GetLog", func() error { return s.GetLog(1, &l) }},
		{"StoreLog", func() error { return s.StoreLog(entry(4, 1)) }},
		{"StoreLogs", func() error { return s.StoreLogs(entries(4, 5, 1)) }},
		{"DeleteRange", func() error { return s.DeleteRange(1, 2) }},
		{"Set", func() error { return s.Set([]byte("k"), []byte("v")) }},
		{"Get", func() error { _, err := s.Get([]byte("k")); return err }},
		{"SetUint64", func() error { return s.SetUint64([]byte("k"), 1) }},
		{"GetUint64", func() error { _, err := s.GetUint64([]byte("k")); return err }},
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", c.name, err)
		}
	}
}

func TestOpenRejects(t *testing.T) {
	tests := []struct {
		name string
		opts Options
	}{
		{name: "no directory", opts: Options{}},
		{name: "negative cache", opts: Options{Dir: t.TempDir(), CacheBytes: -1}},
		{name: "directory is a file", opts: Options{Dir: filepath.Join(fileIn(t), "sub")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(tt.opts)
			if err == nil {
				_ = s.Close()
				t.Fatal("Open succeeded, want an error")
			}
		})
	}
}

// fileIn returns the path of a new regular file.
func fileIn(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOpenInUse(t *testing.T) {
	dir := t.TempDir()
	openStore(t, dir, true)
	if s, err := Open(Options{Dir: dir}); err == nil {
		_ = s.Close()
		t.Fatal("second Open of a directory in use succeeded, want an error")
	}
}

func TestCacheBytes(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), NoSync: true, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	mustStore(t, s, entries(1, 10, 1))
	checkEntry(t, s, entry(10, 1))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestCorruptEntries(t *testing.T) {
	s := openStore(t, t.TempDir(), true)
	mustStore(t, s, entries(1, 3, 1))
	// Bytes that are not an entry, and an entry stored under another
	// index, written behind the store's back.
	if err := s.db.Set(logKey(2), []byte{9, 9, 9}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Set(logKey(3), appendLog(nil, entry(4, 1)), nil); err != nil {
		t.Fatal(err)
	}
	for _, i := range []uint64{2, 3} {
		var l raft.Log
		if err := s.GetLog(i, &l); !errors.Is(err, ErrCorrupt) {
			t.Errorf("GetLog(%d) = %v, want ErrCorrupt", i, err)
		}
	}
}

func TestOpenRejectsMalformedLogKey(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, true)
	if err := s.db.Set([]byte{prefixLog, 1, 2}, []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(Options{Dir: dir}); !errors.Is(err, ErrCorrupt) {
		if err == nil {
			_ = s.Close()
		}
		t.Fatalf("Open with a malformed log key = %v, want ErrCorrupt", err)
	}
}

// TestConcurrentUse runs raft's pattern of use under the race detector: one
// goroutine appends and compacts, as raft's main loop does, while others read
// the bounds and entries, as its replication goroutines do. Compaction never
// reaches the last entry, so the entry at LastIndex exists unless a later
// compaction removed it, and then FirstIndex says so.
func TestConcurrentUse(t *testing.T) {
	s := openStore(t, t.TempDir(), true)
	const (
		batches   = 100
		batchSize = 8
		trailing  = 16
		readers   = 4
	)
	mustStore(t, s, entries(1, 1, 1))

	done := make(chan struct{})
	errs := make(chan error, readers+1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		last := uint64(1)
		for range batches {
			if err := s.StoreLogs(entries(last+1, last+batchSize, 1)); err != nil {
				errs <- err
				return
			}
			last += batchSize
			first, err := s.FirstIndex()
			if err != nil {
				errs <- err
				return
			}
			if last-first > trailing {
				if err := s.DeleteRange(first, last-trailing); err != nil {
					errs <- err
					return
				}
			}
		}
	}()
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				last, err := s.LastIndex()
				if err != nil {
					errs <- err
					return
				}
				var l raft.Log
				err = s.GetLog(last, &l)
				if errors.Is(err, raft.ErrLogNotFound) {
					// Compacted since LastIndex returned: the bounds
					// must say so now.
					first, err := s.FirstIndex()
					if err != nil {
						errs <- err
						return
					}
					if first <= last {
						errs <- fmt.Errorf("GetLog(%d) found nothing, but FirstIndex() = %d after it", last, first)
						return
					}
					continue
				}
				if err != nil {
					errs <- fmt.Errorf("GetLog(LastIndex() = %d): %w", last, err)
					return
				}
				if l.Index != last {
					errs <- fmt.Errorf("GetLog(%d) returned index %d", last, l.Index)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Compaction keeps the last `trailing` entries.
	last := uint64(1 + batches*batchSize)
	checkBounds(t, s, last-trailing+1, last)
}

// TestCloseWaitsForCalls checks that Close, called while other goroutines
// use the store, neither races with them nor lets them reach a closed
// database: each call either completes or returns ErrClosed.
func TestCloseWaitsForCalls(t *testing.T) {
	s := openStore(t, t.TempDir(), true)
	mustStore(t, s, entries(1, 1, 1))
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(0); ; i++ {
				var err error
				if w%2 == 0 {
					err = s.StoreLogs(entries(2+i, 2+i, 1))
				} else {
					var l raft.Log
					err = s.GetLog(1, &l)
				}
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	// Let the goroutines get going: wait until writes have landed.
	deadline := time.Now().Add(10 * time.Second)
	for {
		last, err := s.LastIndex()
		if err != nil {
			t.Fatal(err)
		}
		if last >= 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("last index %d after 10s, want >= 20", last)
		}
		time.Sleep(time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
