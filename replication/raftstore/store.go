// Package raftstore keeps a hashicorp/raft replica's log and stable store in
// one Pebble database.
//
// A Store is a raft.LogStore and a raft.StableStore. Log entries live under
// one key prefix, keyed by their index in big-endian order; stable-store
// keys live under another. Writes are synced before they return (unless
// Options.NoSync, for tests), so what a call reported stored survives a
// crash of the process or the machine: Pebble's write-ahead log replays it
// on the next Open.
//
// The first and last log indexes are kept in memory, read from the database
// on Open and updated after each successful write, so that FirstIndex and
// LastIndex, which raft calls often, do not touch the disk.
//
// Log indexes may have gaps: raft leaves one after a follower installs a
// snapshot, and the store does not implement raft.MonotonicLogStore.
//
// Every method may be called from several goroutines at once, as raft does,
// and after Close every method returns ErrClosed rather than reach a closed
// database: raft's leader starts a goroutine that reads the log (the oldest
// entry's age, for metrics) and that may still run when Shutdown returns.
package raftstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/flexkv/flexkv/internal/syncfs"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

var (
	// ErrKeyNotFound is returned by Get for a key that was never set.
	//
	// Its text is exactly "not found", without the package prefix other
	// errors carry, because hashicorp/raft recognises a missing key by
	// comparing err.Error() with that string (raft.go, requestVote, on
	// Get(LastVoteCand); api.go, NewRaft and HasExistingState, on
	// GetUint64): with any other text a replica that has never voted
	// rejects every vote request it receives.
	ErrKeyNotFound = errors.New("not found")

	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("raftstore: store closed")

	// ErrCorrupt is wrapped by every error that reports stored bytes the
	// store cannot read back: a malformed key, a bad log encoding, a stable
	// value of the wrong size.
	ErrCorrupt = errors.New("raftstore: corrupt data")
)

// diskSlowThreshold is how long a disk operation may take before Pebble's
// disk health checks report it (Pebble's own default).
const diskSlowThreshold = 5 * time.Second

// Compile-time checks that Store is what raft needs.
var (
	_ raft.LogStore    = (*Store)(nil)
	_ raft.StableStore = (*Store)(nil)
)

// Options configures Open.
type Options struct {
	// Dir is the directory of the Pebble database, created if missing. It
	// must not be shared with another store or database.
	Dir string
	// NoSync makes writes return before they reach stable storage. A crash
	// may then lose acknowledged writes, which breaks raft's safety: for
	// tests only.
	NoSync bool
	// CacheBytes is the size of Pebble's block cache; zero leaves Pebble's
	// default.
	CacheBytes int64
	// FS is the file system of the database; nil means the operating
	// system's, watched by Pebble's disk health checks. Tests give
	// vfs.NewCrashableMem to crash the store: what was not synced is lost.
	FS vfs.FS
	// Logger receives Pebble's messages: its routine notes (write-ahead
	// log replay on open) at debug level, its errors at error level. Nil
	// means slog.Default().
	Logger *slog.Logger
}

// Store is a raft.LogStore and raft.StableStore on Pebble. Create it with
// Open; it is safe for concurrent use.
type Store struct {
	db        *pebble.DB
	fsCloser  io.Closer // stops the disk health checks, after db.Close
	writeOpts *pebble.WriteOptions

	// life is held for reading by every method for its whole duration and
	// for writing by Close, so that Close waits for calls in flight and no
	// call reaches a closed database.
	life   sync.RWMutex
	closed bool // guarded by life

	// writeMu serialises writes, so that the cached bounds change in the
	// order the writes commit. Lock order: life, writeMu, boundsMu.
	writeMu sync.Mutex

	boundsMu sync.RWMutex
	first    uint64 // 0 when the log is empty; guarded by boundsMu
	last     uint64 // 0 when the log is empty; guarded by boundsMu
}

// Open opens the store in opts.Dir, creating it if needed, and reads the
// bounds of the log stored there.
func Open(opts Options) (*Store, error) {
	if opts.Dir == "" {
		return nil, errors.New("raftstore: open: empty directory")
	}
	if opts.CacheBytes < 0 {
		return nil, fmt.Errorf("raftstore: open: negative cache size %d", opts.CacheBytes)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	// The disk-health-checking file system is made here rather than left
	// to Pebble, which would start its goroutine and not stop it when Open
	// fails; the store stops it on every path.
	fs, fsCloser := opts.FS, io.Closer(nopCloser{})
	if fs == nil {
		fs, fsCloser = vfs.WithDiskHealthChecks(vfs.Default, diskSlowThreshold, nil, func(info vfs.DiskSlowInfo) {
			logger.Warn("raftstore: slow disk operation", "component", "pebble",
				"path", info.Path, "op", info.OpType.String(), "duration", info.Duration)
		})
	}
	if err := syncfs.MkdirAll(fs, opts.Dir); err != nil {
		return nil, errors.Join(fmt.Errorf("raftstore: open %s: %w", opts.Dir, err), fsCloser.Close())
	}
	popts := &pebble.Options{FS: fs, CacheSize: opts.CacheBytes, Logger: pebbleLogger{logger}}
	db, err := pebble.Open(opts.Dir, popts)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("raftstore: open %s: %w", opts.Dir, err), fsCloser.Close())
	}
	s := &Store{db: db, fsCloser: fsCloser, writeOpts: pebble.Sync}
	if opts.NoSync {
		s.writeOpts = pebble.NoSync
	}
	first, last, err := s.readBounds()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("raftstore: open %s: %w", opts.Dir, err), db.Close(), fsCloser.Close())
	}
	s.first, s.last = first, last
	return s, nil
}

// Close closes the database, after the calls in flight return. Later calls
// return ErrClosed, and so does a second Close.
func (s *Store) Close() error {
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.closed = true
	if err := errors.Join(s.db.Close(), s.fsCloser.Close()); err != nil {
		return fmt.Errorf("raftstore: close: %w", err)
	}
	return nil
}

// WALBytesWritten returns the bytes written to the log's write-ahead log
// since the store opened, framing included (0 after Close).
func (s *Store) WALBytesWritten() uint64 {
	if err := s.enter(); err != nil {
		return 0
	}
	defer s.life.RUnlock()
	return s.db.Metrics().WAL.BytesWritten
}

// enter starts a call: it returns ErrClosed after Close, else the caller
// must call s.life.RUnlock when done.
func (s *Store) enter() error {
	s.life.RLock()
	if s.closed {
		s.life.RUnlock()
		return ErrClosed
	}
	return nil
}

// FirstIndex returns the index of the first stored entry, or 0 if the log
// is empty.
func (s *Store) FirstIndex() (uint64, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.life.RUnlock()
	s.boundsMu.RLock()
	defer s.boundsMu.RUnlock()
	return s.first, nil
}

// LastIndex returns the index of the last stored entry, or 0 if the log is
// empty.
func (s *Store) LastIndex() (uint64, error) {
	if err := s.enter(); err != nil {
		return 0, err
	}
	defer s.life.RUnlock()
	s.boundsMu.RLock()
	defer s.boundsMu.RUnlock()
	return s.last, nil
}

// GetLog reads the entry at index into log. It returns raft.ErrLogNotFound
// itself, not wrapped, if there is none: raft compares with ==.
func (s *Store) GetLog(index uint64, log *raft.Log) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	v, closer, err := s.db.Get(logKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return fmt.Errorf("raftstore: get log %d: %w", index, err)
	}
	// The value is Pebble's until closer.Close; one copy, which Data and
	// Extensions then share.
	buf := make([]byte, len(v))
	copy(buf, v)
	if err := closer.Close(); err != nil {
		return fmt.Errorf("raftstore: get log %d: %w", index, err)
	}
	var l raft.Log
	if err := decodeLog(buf, &l); err != nil {
		return fmt.Errorf("raftstore: get log %d: %w", index, err)
	}
	if l.Index != index {
		return fmt.Errorf("raftstore: get log %d: entry holds index %d: %w", index, l.Index, ErrCorrupt)
	}
	*log = l
	return nil
}

// StoreLog stores one entry.
func (s *Store) StoreLog(log *raft.Log) error {
	return s.StoreLogs([]*raft.Log{log})
}

// StoreLogs stores entries in one atomic, synced batch: after a crash
// either all of them are there or none. An entry at an index already stored
// replaces it. Indexes need not follow the last stored one: raft leaves a gap
// after installing a snapshot. Index 0, which raft never uses and which the
// bounds use to mean "empty", is refused.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	if len(logs) == 0 {
		return nil
	}
	lo, hi := uint64(math.MaxUint64), uint64(0)
	for i, l := range logs {
		if l == nil {
			return fmt.Errorf("raftstore: store logs: entry %d is nil", i)
		}
		if l.Index == 0 {
			return fmt.Errorf("raftstore: store logs: entry %d has index 0", i)
		}
		lo, hi = min(lo, l.Index), max(hi, l.Index)
	}

	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	var val []byte
	for _, l := range logs {
		val = appendLog(val[:0], l)
		// Set copies key and value into the batch, so val is reused.
		if err := b.Set(logKey(l.Index), val, nil); err != nil {
			return fmt.Errorf("raftstore: store logs: %w", err)
		}
	}
	if err := b.Commit(s.writeOpts); err != nil {
		return fmt.Errorf("raftstore: store logs %d..%d: %w", lo, hi, err)
	}

	s.boundsMu.Lock()
	defer s.boundsMu.Unlock()
	if s.first == 0 || lo < s.first {
		s.first = lo
	}
	s.last = max(s.last, hi)
	return nil
}

// DeleteRange deletes the entries with indexes in [lo, hi], inclusive, with
// one range deletion in one synced batch. Raft calls it at the head of the
// log after a snapshot (compaction) and at the tail when a new leader's
// entries conflict with ours (truncation). Indexes with no entry are fine;
// lo > hi is an error.
func (s *Store) DeleteRange(lo, hi uint64) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	if lo > hi {
		return fmt.Errorf("raftstore: delete range: min %d > max %d", lo, hi)
	}
	end := logUpperBound
	if hi < math.MaxUint64 {
		end = logKey(hi + 1)
	}

	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	// The bounds stay locked from before the commit until they are
	// updated, so that a reader that finds an entry gone and then asks for
	// the bounds is told it is gone: the bounds never name a deleted entry
	// as present to a reader that has seen it deleted. Readers of the
	// bounds wait for one synced write; deletes are rare (compaction,
	// conflicts).
	s.boundsMu.Lock()
	defer s.boundsMu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(logKey(lo), end, nil); err != nil {
		return fmt.Errorf("raftstore: delete range %d..%d: %w", lo, hi, err)
	}
	if err := b.Commit(s.writeOpts); err != nil {
		return fmt.Errorf("raftstore: delete range %d..%d: %w", lo, hi, err)
	}
	if s.first == 0 || hi < s.first || lo > s.last {
		return nil // nothing stored was in the range
	}
	// Indexes may have gaps, so the new bounds are read, not computed. No
	// other write runs (writeMu), so they match the database.
	first, last, err := s.readBounds()
	if err != nil {
		// The entries are gone but the new bounds are unknown. Leave an
		// empty log rather than name deleted entries; the next Open reads
		// the bounds again.
		s.first, s.last = 0, 0
		return fmt.Errorf("raftstore: delete range %d..%d: bounds after delete: %w", lo, hi, err)
	}
	s.first, s.last = first, last
	return nil
}

// readBounds reads the first and last log indexes from the database; 0, 0
// if the log is empty.
func (s *Store) readBounds() (first, last uint64, err error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: logLowerBound, UpperBound: logUpperBound})
	if err != nil {
		return 0, 0, fmt.Errorf("read log bounds: %w", err)
	}
	if it.First() {
		if first, err = logKeyIndex(it.Key()); err == nil && it.Last() {
			last, err = logKeyIndex(it.Key())
		}
	}
	err = errors.Join(err, it.Error(), it.Close())
	if err != nil {
		return 0, 0, fmt.Errorf("read log bounds: %w", err)
	}
	if (first == 0) != (last == 0) || first > last {
		return 0, 0, fmt.Errorf("read log bounds: first %d, last %d: %w", first, last, ErrCorrupt)
	}
	return first, last, nil
}

// Set stores val under key, synced.
func (s *Store) Set(key, val []byte) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.life.RUnlock()
	if err := s.db.Set(stableKey(key), val, s.writeOpts); err != nil {
		return fmt.Errorf("raftstore: set %q: %w", key, err)
	}
	return nil
}

// Get returns the value stored under key, or ErrKeyNotFound. A value set
// empty comes back as an empty, non-nil slice, so that it is told apart from
// a missing one.
func (s *Store) Get(key []byte) ([]byte, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.life.RUnlock()
	v, closer, err := s.db.Get(stableKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("raftstore: get %q: %w", key, err)
	}
	val := make([]byte, len(v))
	copy(val, v)
	if err := closer.Close(); err != nil {
		return nil, fmt.Errorf("raftstore: get %q: %w", key, err)
	}
	return val, nil
}

// SetUint64 stores val under key, as 8 bytes big-endian, synced.
func (s *Store) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 returns the value SetUint64 stored under key, or 0 and no error
// for a key never set, as raft.StableStore documents and as raft needs on a
// fresh replica (NewRaft reads the current term).
func (s *Store) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if errors.Is(err, ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("raftstore: get uint64 %q: %d bytes, want 8: %w", key, len(v), ErrCorrupt)
	}
	return binary.BigEndian.Uint64(v), nil
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// pebbleLogger passes Pebble's messages to a slog.Logger.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf is called by Pebble on an error it cannot continue from, and must
// not return. It panics rather than exit, so that the process's owner
// decides.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "component", "pebble", "fatal", true)
	panic("raftstore: pebble: " + msg)
}
