package kv

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestNoWALCrashKeepsAPrefix: without a WAL, a crash at any moment leaves
// the store as of some commit at or after the last Sync, whole: every key
// of the entries up to AppliedIndex, none after it (memtables are flushed
// in order, each batch in one memtable). Small memtables make Pebble flush
// on its own between the crash points.
func TestNoWALCrashKeepsAPrefix(t *testing.T) {
	fs := vfs.NewCrashableMem()
	opts := Options{Dir: "/r", NoSync: true, NoWAL: true, FS: fs, MemTableBytes: 256 << 10, RowCacheSlots: -1}
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(7, 7))
	value := make([]byte, 3000)
	var synced uint64
	lost, flushed := 0, 0
	for index := uint64(1); index <= 1200; index++ {
		b := s.NewBatch()
		for k := range 1 + rng.IntN(4) {
			if err := b.Put(entryKey(index, k), value[:100+rng.IntN(len(value)-100)]); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Commit(b, index); err != nil {
			t.Fatal(err)
		}
		b.Close()
		if rng.IntN(300) == 0 {
			if err := s.Sync(); err != nil {
				t.Fatal(err)
			}
			synced = index
		}
		if rng.IntN(60) != 0 {
			continue
		}
		got := checkCrashImage(t, fs, opts, synced, index)
		if got < index {
			lost++
		}
		if got > synced {
			flushed++
		}
	}
	// Crashes took commits back (the WAL is off), and kept commits after
	// the last Sync (Pebble flushed full memtables), or the test proves
	// nothing.
	if lost == 0 || flushed == 0 {
		t.Errorf("crash images: %d lost commits, %d kept some after the last sync; want both", lost, flushed)
	}
}

func entryKey(index uint64, k int) []byte { return fmt.Appendf(nil, "e%06d/%d", index, k) }

// checkCrashImage opens what a crash now would leave and checks that it
// holds exactly the entries up to its applied index, which is at least
// synced and at most last; it returns that index.
func checkCrashImage(t *testing.T, fs *vfs.MemFS, opts Options, synced, last uint64) uint64 {
	t.Helper()
	opts.FS = fs.CrashClone(vfs.CrashCloneCfg{})
	r, err := Open(opts)
	if err != nil {
		t.Fatalf("reopen after a crash at %d: %v", last, err)
	}
	defer r.Close()
	applied := r.AppliedIndex()
	if applied < synced || applied > last {
		t.Fatalf("crash at %d: applied index %d, want %d..%d (synced..last)", last, applied, synced, last)
	}
	var maxIndex uint64
	seen := map[uint64]bool{}
	for _, kv := range scanAll(t, r) {
		var index uint64
		var k int
		if _, err := fmt.Sscanf(string(kv.Key), "e%06d/%d", &index, &k); err != nil {
			t.Fatalf("key %q: %v", kv.Key, err)
		}
		seen[index] = true
		maxIndex = max(maxIndex, index)
	}
	if maxIndex != applied {
		t.Fatalf("crash at %d: applied index %d but entries up to %d survived", last, applied, maxIndex)
	}
	for index := uint64(1); index <= applied; index++ {
		if !seen[index] {
			t.Fatalf("crash at %d: entry %d of %d lost (not a prefix)", last, index, applied)
		}
	}
	return applied
}

// scanAll returns every user key and value of s.
func scanAll(t *testing.T, s *Store) []KV {
	t.Helper()
	var all []KV
	var start []byte
	for {
		kvs, err := s.Scan(start, nil, ScanLimitMax)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, kvs...)
		if len(kvs) < ScanLimitMax {
			return all
		}
		start = append(bytes.Clone(kvs[len(kvs)-1].Key), 0)
	}
}

// TestNoWALDurablePoints: without a WAL, what Close, Checkpoint, and
// RestoreSnapshot leave is durable by itself, and a store that must sync
// every commit cannot go without one.
func TestNoWALDurablePoints(t *testing.T) {
	if _, err := Open(Options{Dir: t.TempDir(), NoWAL: true}); !errors.Is(err, ErrInvalid) {
		t.Errorf("NoWAL without NoSync: %v, want ErrInvalid", err)
	}
	fs := vfs.NewCrashableMem()
	opts := Options{Dir: "/r", NoSync: true, NoWAL: true, FS: fs}
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	put := func(s *Store, index uint64) {
		t.Helper()
		b := s.NewBatch()
		defer b.Close()
		if err := b.Put(entryKey(index, 0), []byte("v")); err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(b, index); err != nil {
			t.Fatal(err)
		}
	}
	put(s, 1)
	put(s, 2)
	info, _, err := s.Checkpoint("c1")
	if err != nil {
		t.Fatal(err)
	}
	if info.AppliedIndex != 2 {
		t.Errorf("checkpoint at applied index %d, want 2", info.AppliedIndex)
	}
	ck, err := pebble.Open(s.CheckpointDir("c1"), &pebble.Options{FS: fs, ReadOnly: true, Logger: pebbleLogger{slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := get(ck, append([]byte{prefixData}, entryKey(2, 0)...)); err != nil || !ok {
		t.Errorf("the checkpoint lacks the last commit before it (%v, %v)", ok, err)
	}
	if err := ck.Close(); err != nil {
		t.Fatal(err)
	}
	if got := checkCrashImage(t, fs, opts, 2, 2); got != 2 {
		t.Errorf("after a checkpoint, a crash keeps applied index %d, want 2", got)
	}
	put(s, 3)
	snap := stream(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := checkCrashImage(t, fs, opts, 3, 3); got != 3 {
		t.Errorf("after Close, a crash keeps applied index %d, want 3", got)
	}

	opts2 := Options{Dir: "/r2", NoSync: true, NoWAL: true, FS: fs}
	r, err := Open(opts2)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.RestoreSnapshot(bytes.NewReader(snap), 3); err != nil {
		t.Fatal(err)
	}
	if got := checkCrashImage(t, fs, opts2, 3, 3); got != 3 {
		t.Errorf("after a restore, a crash keeps applied index %d, want 3", got)
	}
}

// TestNoWALOpensAStoreWithAWAL: a store written with a WAL (a replica of an
// earlier version, whose Sync synced the WAL and flushed nothing) opened
// without one keeps what its WAL held, durably: Pebble replays the WAL and
// flushes it as it opens, so a crash right after loses nothing of it.
func TestNoWALOpensAStoreWithAWAL(t *testing.T) {
	fs := vfs.NewCrashableMem()
	old, err := Open(Options{Dir: "/r", NoSync: true, FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	for index := uint64(1); index <= 50; index++ {
		b := old.NewBatch()
		if err := b.Put(entryKey(index, 0), []byte("v")); err != nil {
			t.Fatal(err)
		}
		if err := old.Commit(b, index); err != nil {
			t.Fatal(err)
		}
		b.Close()
	}
	if err := old.Sync(); err != nil {
		t.Fatal(err)
	}
	// The old version's process dies: its store is what the WAL synced.
	opts := Options{Dir: "/r", NoSync: true, NoWAL: true, FS: fs.CrashClone(vfs.CrashCloneCfg{})}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.AppliedIndex(); got != 50 {
		t.Fatalf("opened without a WAL: applied index %d, want 50", got)
	}
	if got := checkCrashImage(t, opts.FS.(*vfs.MemFS), opts, 50, 50); got != 50 {
		t.Fatalf("a crash right after the open keeps applied index %d, want 50", got)
	}
}
