package kv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/flexkv/flexkv/internal/syncfs"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/flexkv/flexkv/internal/invariants"
)

// Options configure a Store.
type Options struct {
	// Dir is the store's directory; Open creates it if needed.
	Dir string
	// ResultsMax is the number of transaction results kept; the oldest are
	// dropped first. Zero means ResultsMaxDefault. Every replica of a group
	// must use the same value, or their results differ.
	ResultsMax int
	// NoSync makes Commit skip the fsync: the raft log is the write-ahead
	// log (see the package comment). Replicas set it; tools that use the
	// store without a raft log do not.
	NoSync bool
	// NoWAL keeps no Pebble write-ahead log at all (it needs NoSync): a
	// commit reaches the disk when its memtable is flushed, Sync and Close
	// flush, and a crash leaves a prefix of the commits (see the package
	// comment). Replicas set it: their raft log holds every entry a crash
	// may take back.
	NoWAL bool
	// CacheBytes is the size of Pebble's block cache (0: CacheBytesDefault).
	CacheBytes int64
	// RowCacheSlots is the number of slots of the row cache, which serves
	// a batch's reads of rows read before from memory: a row of at most
	// 1 KiB of key and value a slot, each slot 192 bytes (a row of up to
	// 175 bytes in place), and the longer rows 256 bytes a slot on average
	// at most (0: RowCacheSlotsDefault; negative: no row cache).
	RowCacheSlots int
	// Logger receives Pebble's errors (a failed compaction, a corrupt
	// table); nil: slog.Default(). Pebble's informational lines are dropped.
	Logger *slog.Logger
	// MemTableBytes is the size of Pebble's memtable (0: Pebble's
	// default, 4 MiB). Each open store allocates one up front: a test that
	// opens hundreds of small stores sets it low.
	MemTableBytes uint64
	// FS is the file system the store lives on; nil: the operating
	// system's. vfs.NewMem keeps a store in memory (the whole-database
	// simulator), vfs.NewCrashableMem lets a test drop what was not synced.
	FS vfs.FS
}

// CacheBytesDefault is the block cache of a store whose Options say none.
const CacheBytesDefault = 32 << 20

// pebbleOptions returns the options of the store's Pebble directories.
// Bloom filters on every level: most point reads of the executor are of
// keys that are not there (a new transaction id's result, a first write),
// which without a filter probe every level's tables.
func pebbleOptions(opts Options, mustExist bool) *pebble.Options {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	po := &pebble.Options{Logger: pebbleLogger{logger}, ErrorIfNotExists: mustExist, CacheSize: opts.CacheBytes, FS: opts.FS}
	if po.CacheSize == 0 {
		po.CacheSize = CacheBytesDefault
	}
	po.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	po.MemTableSize = opts.MemTableBytes
	po.DisableWAL = opts.NoWAL
	return po
}

// KV is a user key and its value.
type KV struct {
	Key   []byte
	Value []byte
}

// Store is the Pebble store of one replica. Its methods are safe for
// concurrent use; Commit and RestoreSnapshot are serialized.
type Store struct {
	dir        string
	opts       Options
	resultsMax uint64
	writeOpts  *pebble.WriteOptions

	// commitMu serializes Commit, Snapshot, RestoreSnapshot and Close, and
	// guards the fields below it.
	commitMu sync.Mutex
	gen      uint64 // generation of the live Pebble directory
	resFirst uint64 // sequence of the oldest result kept
	resNext  uint64 // sequence the next result takes
	// restoreHook, when set (tests), is called at each step of
	// RestoreSnapshot; an error it returns is handled as a failure of that
	// step.
	restoreHook func(restoreStep) error
	// commitHook, when set (tests), is called between Pebble's commit of
	// a batch and the row cache's update.
	commitHook func()

	applied atomic.Uint64

	// viewGen is odd while a commit may change what a View sees, and
	// settled tells whether the batch last committed was marked settled
	// (Batch.MarkSettled): SettledView.
	viewGen atomic.Uint64
	settled atomic.Bool

	// mu guards the fields below; it is held for writing only to switch
	// them (Close, RestoreSnapshot), and for reading by every read.
	mu     sync.RWMutex
	h      *handle
	closed bool
	failed error // set when the store cannot know its own state
}

// handle is one open Pebble store. References are held by the Store while
// the handle is live and by every Batch and Snapshot opened on it; the last
// release closes it, and removes its directory if a restore retired it.
type handle struct {
	db      *pebble.DB
	fs      vfs.FS
	dir     string
	refs    atomic.Int64
	retired atomic.Bool

	// ids holds the id of every result the store keeps (committed and not
	// evicted), so that a read of a result that is not there, as the
	// executor makes for every new transaction id, costs no Pebble seek.
	// Commit holds idsMu for writing from before its Pebble commit until
	// ids matches it: a reader never finds an id missing that Pebble has.
	idsMu sync.RWMutex
	ids   map[string]struct{}

	// rows caches committed rows for batches (nil: no row cache). It
	// belongs to the handle: a restored store starts with an empty one.
	rows *rowCache
}

// loadResultIDs reads the ids of the results stored in h.
func (h *handle) loadResultIDs() error {
	ids := map[string]struct{}{}
	it, err := h.db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixResult}, UpperBound: []byte{prefixResult + 1}})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		ids[string(it.Key()[1:])] = struct{}{}
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	h.idsMu.Lock()
	h.ids = ids
	h.idsMu.Unlock()
	return nil
}

// mayHaveResult reports whether the store may keep a result of id: false
// means it keeps none.
func (h *handle) mayHaveResult(id string) bool {
	h.idsMu.RLock()
	defer h.idsMu.RUnlock()
	_, ok := h.ids[id]
	return ok
}

func (h *handle) acquire() { h.refs.Add(1) }

func (h *handle) release() error {
	n := h.refs.Add(-1)
	switch {
	case n > 0:
		return nil
	case n < 0:
		panic("kv: handle released more often than acquired")
	}
	err := h.db.Close()
	if h.retired.Load() {
		err = errors.Join(err, h.fs.RemoveAll(h.dir))
	}
	return err
}

const (
	markerName    = "ACTIVE"
	markerTmpName = "ACTIVE.tmp"
	genPrefix     = "db-"
)

func genName(gen uint64) string { return fmt.Sprintf("%s%06d", genPrefix, gen) }

// parseGen parses a generation directory's name; ok is false for any other
// name.
func parseGen(name string) (gen uint64, ok bool) {
	digits, found := strings.CutPrefix(name, genPrefix)
	if !found || len(digits) < 6 {
		return 0, false
	}
	gen, err := strconv.ParseUint(digits, 10, 64)
	if err != nil || gen == 0 || genName(gen) != name {
		return 0, false
	}
	return gen, true
}

// Open opens the store in opts.Dir, creating it if needed, and settles an
// interrupted RestoreSnapshot (see the package comment).
func Open(opts Options) (*Store, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("kv: open: %w: no directory", ErrInvalid)
	}
	if opts.ResultsMax < 0 {
		return nil, fmt.Errorf("kv: open: %w: ResultsMax %d is negative", ErrInvalid, opts.ResultsMax)
	}
	if opts.ResultsMax == 0 {
		opts.ResultsMax = ResultsMaxDefault
	}
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if opts.NoWAL && !opts.NoSync {
		return nil, fmt.Errorf("kv: open: %w: NoWAL without NoSync (a commit cannot be synced without a WAL)", ErrInvalid)
	}
	fs := opts.FS
	if err := syncfs.MkdirAll(fs, opts.Dir); err != nil {
		return nil, fmt.Errorf("kv: open: %w", err)
	}
	gen, fresh, err := readMarker(fs, opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("kv: open: %w", err)
	}
	// A fresh store keeps no generation directory: one left by a crash
	// before the first marker was written holds nothing committed.
	keep := gen
	if fresh {
		keep = 0
	}
	if err := removeLeftovers(fs, opts.Dir, keep); err != nil {
		return nil, fmt.Errorf("kv: open: %w", err)
	}
	s := &Store{dir: opts.Dir, resultsMax: uint64(opts.ResultsMax), writeOpts: pebble.Sync, gen: gen}
	if opts.NoSync {
		s.writeOpts = pebble.NoSync
	}
	// A fresh store's Pebble directory is created before the marker names
	// it: a crash in between leaves no marker, and the next Open starts
	// afresh.
	s.opts = opts
	h, err := openHandle(fs.PathJoin(opts.Dir, genName(gen)), pebbleOptions(opts, !fresh), opts.RowCacheSlots)
	if err != nil {
		return nil, fmt.Errorf("kv: open: %w", err)
	}
	if fresh {
		if _, err := writeMarker(fs, opts.Dir, gen, nil); err != nil {
			return nil, errors.Join(fmt.Errorf("kv: open: %w", err), h.release())
		}
	}
	applied, first, next, err := readMeta(h.db)
	if err == nil {
		err = h.loadResultIDs()
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("kv: open: %w", err), h.release())
	}
	s.h = h
	s.applied.Store(applied)
	s.resFirst, s.resNext = first, next
	return s, nil
}

// openHandle opens the Pebble store in dir with po.
func openHandle(dir string, po *pebble.Options, rowCacheSlots int) (*handle, error) {
	db, err := pebble.Open(dir, po)
	if err != nil {
		return nil, err
	}
	h := &handle{db: db, fs: po.FS, dir: dir, rows: newRowCache(rowCacheSlots)}
	h.acquire()
	return h, nil
}

// readMarker returns the live generation named by the marker, or
// generation 1 and fresh when there is no marker.
func readMarker(fs vfs.FS, dir string) (gen uint64, fresh bool, err error) {
	b, err := readAll(fs, fs.PathJoin(dir, markerName))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return 1, true, nil
	case err != nil:
		return 0, false, err
	}
	gen, ok := parseGen(strings.TrimSuffix(string(b), "\n"))
	if !ok {
		return 0, false, fmt.Errorf("%w: marker %s holds %q, not a generation", ErrCorrupt, markerName, b)
	}
	return gen, false, nil
}

// writeMarker makes the marker name gen, durably: a synced temporary file
// renamed over the marker, then the directory synced. hook, when not nil,
// runs after the temporary file is synced and after the rename is synced;
// its error is handled as a failure of that step.
func writeMarker(fs vfs.FS, dir string, gen uint64, hook func(restoreStep) error) (renamed bool, err error) {
	tmp := fs.PathJoin(dir, markerTmpName)
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return false, err
	}
	_, err = f.Write([]byte(genName(gen) + "\n"))
	if err == nil {
		err = f.Sync()
	}
	err = errors.Join(err, f.Close())
	if err == nil && hook != nil {
		err = hook(stepMarkerTemp)
	}
	if err != nil {
		return false, errors.Join(err, fs.Remove(tmp))
	}
	if err := fs.Rename(tmp, fs.PathJoin(dir, markerName)); err != nil {
		return false, errors.Join(err, fs.Remove(tmp))
	}
	err = syncfs.SyncDir(fs, dir)
	if err == nil && hook != nil {
		err = hook(stepSwitched)
	}
	return true, err
}

// removeLeftovers removes the generation directories other than gen and a
// temporary marker: what an interrupted restore or creation left behind.
// Other entries are left alone.
func removeLeftovers(fs vfs.FS, dir string, gen uint64) error {
	names, err := fs.List(dir)
	if err != nil {
		return err
	}
	slices.Sort(names)
	removed := false
	for _, name := range names {
		g, ok := parseGen(name)
		if (ok && g != gen) || name == markerTmpName {
			if err := fs.RemoveAll(fs.PathJoin(dir, name)); err != nil {
				return err
			}
			removed = true
		}
	}
	if removed {
		return syncfs.SyncDir(fs, dir)
	}
	return nil
}

// readAll returns the contents of the file name of fs.
func readAll(fs vfs.FS, name string) ([]byte, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(f)
	return b, errors.Join(err, f.Close())
}

// readMeta reads the applied index and the result sequences.
func readMeta(r reader) (applied, first, next uint64, err error) {
	v, ok, err := get(r, keyApplied)
	switch {
	case err != nil:
		return 0, 0, 0, err
	case ok && len(v) != 8:
		return 0, 0, 0, fmt.Errorf("%w: applied index of %d bytes", ErrCorrupt, len(v))
	case ok:
		applied = binary.BigEndian.Uint64(v)
	}
	v, ok, err = get(r, keyResults)
	switch {
	case err != nil:
		return 0, 0, 0, err
	case ok && len(v) != 16:
		return 0, 0, 0, fmt.Errorf("%w: result sequences of %d bytes", ErrCorrupt, len(v))
	case ok:
		first, next = binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:])
		if first > next {
			return 0, 0, 0, fmt.Errorf("%w: oldest result sequence %d after the next %d", ErrCorrupt, first, next)
		}
	}
	return applied, first, next, nil
}

// Close closes the store. Its files stay open until every Batch is closed
// and every Snapshot released.
func (s *Store) Close() error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("kv: close: %w", ErrClosed)
	}
	s.closed = true
	// Without a WAL the memtable is flushed first, or a restart would find
	// the store as of its last flush (right, but replayed from raft's log).
	var err error
	if s.opts.NoWAL && s.failed == nil {
		err = s.h.db.Flush()
	}
	if err = errors.Join(err, s.h.release()); err != nil {
		return fmt.Errorf("kv: close: %w", err)
	}
	return nil
}

// usableLocked returns an error unless the store may be used; mu is held.
func (s *Store) usableLocked() error {
	switch {
	case s.closed:
		return fmt.Errorf("kv: %w", ErrClosed)
	case s.failed != nil:
		return fmt.Errorf("kv: store failed, reopen it: %w", s.failed)
	}
	return nil
}

// read runs fn on the live Pebble store.
func (s *Store) read(fn func(db *pebble.DB) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usableLocked(); err != nil {
		return err
	}
	return fn(s.h.db)
}

// AppliedIndex returns the raft index of the last committed entry, or 0.
func (s *Store) AppliedIndex() uint64 { return s.applied.Load() }

// Get returns the committed value of key.
func (s *Store) Get(key []byte) (value []byte, found bool, err error) {
	if err := checkKey(key); err != nil {
		return nil, false, err
	}
	err = s.read(func(db *pebble.DB) error {
		value, found, err = get(db, dataKey(key))
		return err
	})
	return value, found, err
}

// Scan returns up to limit committed entries with keys in [start, end), in
// key order. An empty start is the first key; an empty end is no bound.
func (s *Store) Scan(start, end []byte, limit int) (kvs []KV, err error) {
	lower, upper, err := scanBounds(start, end, limit)
	if err != nil {
		return nil, err
	}
	err = s.read(func(db *pebble.DB) error {
		kvs, err = scan(db, lower, upper, limit)
		return err
	})
	return kvs, err
}

// ScanBytes is Scan bounded in bytes too: it stops before the entry that
// would take the keys and values returned past bytesMax (> 0), but always
// returns the first entry, however large. next is then the key of the first
// entry left out, from which the scan goes on; nil when the scan stopped at
// limit or at the end of the range. The bound keeps one answer within what
// a client can receive; reading stops there, so the entries past it are
// never loaded.
func (s *Store) ScanBytes(start, end []byte, limit, bytesMax int) (kvs []KV, next []byte, err error) {
	lower, upper, err := scanBytesBounds(start, end, limit, bytesMax)
	if err != nil {
		return nil, nil, err
	}
	err = s.read(func(db *pebble.DB) error {
		kvs, next, err = scanBounded(db, lower, upper, limit, bytesMax)
		return err
	})
	return kvs, next, err
}

// ScanChunk is ScanBytes for a copy in chunks (a partition's move): next
// is the key the copy goes on from whenever the scan stopped before end,
// at limit as at bytesMax; nil only at the end of the range.
func (s *Store) ScanChunk(start, end []byte, limit, bytesMax int) (kvs []KV, next []byte, err error) {
	lower, upper, err := scanBytesBounds(start, end, limit, bytesMax)
	if err != nil {
		return nil, nil, err
	}
	err = s.read(func(db *pebble.DB) error {
		kvs, next, err = scanBounded(db, lower, upper, limit+1, bytesMax)
		return err
	})
	if err == nil && len(kvs) > limit {
		next, kvs = kvs[limit].Key, kvs[:limit]
	}
	return kvs, next, err
}

// scanBytesBounds checks a scan bounded in bytes too and returns its
// Pebble bounds (scanBounds).
func scanBytesBounds(start, end []byte, limit, bytesMax int) (lower, upper []byte, err error) {
	if bytesMax <= 0 {
		return nil, nil, fmt.Errorf("kv: %w: scan bytes bound %d, want > 0", ErrInvalid, bytesMax)
	}
	return scanBounds(start, end, limit)
}

// Result returns the committed result of transaction id, if it is still
// kept.
func (s *Store) Result(id string) (result []byte, found bool, err error) {
	if err := checkResultID(id); err != nil {
		return nil, false, err
	}
	err = s.read(func(db *pebble.DB) error {
		result, found, err = get(db, resultKey(id))
		return err
	})
	return result, found, err
}

// Sync makes every commit durable: it syncs the WAL, or without one
// (Options.NoWAL) flushes the memtable and waits for the flush.
func (s *Store) Sync() error {
	return s.read(func(db *pebble.DB) error {
		var err error
		if s.opts.NoWAL {
			err = db.Flush()
		} else {
			err = db.LogData(nil, pebble.Sync)
		}
		if err != nil {
			return fmt.Errorf("kv: sync: %w", err)
		}
		return nil
	})
}

// commitDurably commits b to db and makes it durable with every commit
// before it.
func commitDurably(db *pebble.DB, b *pebble.Batch, noWAL bool) error {
	if !noWAL {
		return b.Commit(pebble.Sync)
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return err
	}
	return db.Flush()
}

// Metrics are figures of the live Pebble store, for monitoring. Counters
// start again from zero when RestoreSnapshot switches to a new Pebble store.
type Metrics struct {
	DiskBytes           uint64 // on disk: tables, WAL, obsolete and zombie files
	MemtableBytes       uint64 // allocated by memtables, flushing ones included
	Tables              int64  // sstables in the LSM
	ReadAmp             int    // sublevels of L0 plus non-empty levels: files a read may visit
	Flushes             int64  // memtable flushes
	Compactions         int64  // compactions of every kind
	CompactionDebtBytes uint64 // estimated bytes compactions must rewrite to settle the LSM
	BlockCacheBytes     int64
	BlockCacheHits      int64
	BlockCacheMisses    int64
	RowCacheHits        int64 // batch reads the row cache served
	RowCacheMisses      int64 // batch reads it did not (0 and 0 without a row cache)
	RowCacheViewHits    int64 // View.Get reads the row cache served
	RowCacheViewMisses  int64 // View.Get reads it did not (read from Pebble)
}

// Metrics returns the figures of the live Pebble store.
func (s *Store) Metrics() (Metrics, error) {
	var m Metrics
	err := s.read(func(db *pebble.DB) error {
		pm := db.Metrics()
		m = Metrics{
			DiskBytes:           pm.DiskSpaceUsage(),
			MemtableBytes:       pm.MemTable.Size,
			Tables:              pm.Total().TablesCount,
			ReadAmp:             pm.ReadAmp(),
			Flushes:             pm.Flush.Count,
			Compactions:         pm.Compact.Count,
			CompactionDebtBytes: pm.Compact.EstimatedDebt,
			BlockCacheBytes:     pm.BlockCache.Size,
			BlockCacheHits:      pm.BlockCache.Hits,
			BlockCacheMisses:    pm.BlockCache.Misses,
		}
		if rows := s.h.rows; rows != nil {
			m.RowCacheHits, m.RowCacheMisses, m.RowCacheViewHits, m.RowCacheViewMisses = rows.stats()
		}
		return nil
	})
	if err != nil {
		return Metrics{}, fmt.Errorf("kv: metrics: %w", err)
	}
	return m, nil
}

// Commit writes b's effects and results and sets the applied index to
// index, atomically; index must be above AppliedIndex. It syncs unless
// Options.NoSync. An invalid call returns an error wrapping ErrInvalid and
// leaves b as it was; once Commit gets past validation, successful or not,
// b accepts no more operations (close it).
func (s *Store) Commit(b *Batch, index uint64) error { return s.commit(b, index, false) }

// CommitMore is Commit of a further batch of the entry at index, the
// applied index: an entry whose effects the executor commits in parts (a
// backup marker's barrier, which checkpoints the store between the parts).
// Every part is atomic; the applied index stays index.
func (s *Store) CommitMore(b *Batch, index uint64) error { return s.commit(b, index, true) }

func (s *Store) commit(b *Batch, index uint64, more bool) error {
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
		return fmt.Errorf("kv: commit: %w: batch of another store", ErrInvalid)
	case b.done:
		return fmt.Errorf("kv: commit: %w: batch already committed or closed", ErrInvalid)
	case b.h != h:
		return fmt.Errorf("kv: commit: %w: batch opened before a snapshot was restored", ErrInvalid)
	case more && index != s.applied.Load():
		return fmt.Errorf("kv: commit more: %w: index %d is not the applied index %d", ErrInvalid, index, s.applied.Load())
	case !more && index <= s.applied.Load():
		return fmt.Errorf("kv: commit: %w: index %d not after the applied index %d", ErrInvalid, index, s.applied.Load())
	}
	if invariants.Enabled {
		invariants.Hold(b.check())
	}
	prev := s.applied.Load()
	b.done = true
	b.closeIter()
	first, next, evicted, err := s.sequenceResults(b, s.resFirst, s.resNext)
	if err != nil {
		return fmt.Errorf("kv: commit %d: %w", index, err)
	}
	if err := b.b.Set(keyApplied, binary.BigEndian.AppendUint64(nil, index), nil); err != nil {
		return fmt.Errorf("kv: commit %d: %w", index, err)
	}
	if len(b.results) > 0 || len(evicted) > 0 {
		h.idsMu.Lock()
		defer h.idsMu.Unlock()
	}
	// The row cache changes inside the odd window too: a View that saw
	// the generation even and unchanged around taking its snapshot holds
	// the cache's epoch of that snapshot's state (View).
	s.viewGen.Add(1)
	b.rowsCommitting()
	if err := b.b.Commit(s.writeOpts); err != nil {
		s.settled.Store(false)
		b.rowsCommitted(true)
		s.viewGen.Add(1)
		return fmt.Errorf("kv: commit %d: %w", index, err)
	}
	s.settled.Store(b.settled)
	if s.commitHook != nil {
		s.commitHook()
	}
	b.rowsCommitted(false)
	s.viewGen.Add(1)
	// The batch's results first: a batch of more than ResultsMax results
	// evicts some of its own, which must leave the index too.
	for _, id := range b.results {
		h.ids[id] = struct{}{}
	}
	for _, id := range evicted {
		delete(h.ids, id)
	}
	s.resFirst, s.resNext = first, next
	s.applied.Store(index)
	if invariants.Enabled {
		if index < prev || (index == prev && !more) {
			invariants.Violated("kv: applied index %d after %d", index, prev)
		}
		invariants.Hold(s.checkCommitted(h))
	}
	return nil
}

// checkCommitted returns the first broken invariant of the committed state
// of h, the live handle, nil if none: the applied index and the result
// sequences stored are those in memory, which the next Open or restore
// reads back; at most ResultsMax results are kept past a commit; and the
// index of result ids holds one id per result kept. commitMu is held.
func (s *Store) checkCommitted(h *handle) error {
	applied, first, next, err := readMeta(h.db)
	switch {
	case err != nil:
		return fmt.Errorf("kv: committed state does not read back: %w", err)
	case applied != s.applied.Load():
		return fmt.Errorf("kv: applied index %d stored, %d in memory", applied, s.applied.Load())
	case first != s.resFirst || next != s.resNext:
		return fmt.Errorf("kv: result sequences [%d, %d) stored, [%d, %d) in memory", first, next, s.resFirst, s.resNext)
	case next-first > s.resultsMax:
		return fmt.Errorf("kv: %d results kept, more than ResultsMax (%d)", next-first, s.resultsMax)
	}
	// Only a commit writes h.ids, under commitMu: reading it here needs no
	// idsMu, which Commit may hold still.
	if uint64(len(h.ids)) != next-first {
		return fmt.Errorf("kv: %d result ids indexed, %d results kept", len(h.ids), next-first)
	}
	return nil
}

// sequenceResults gives b's results the next sequences and, in b, deletes
// the oldest results beyond ResultsMax; it returns the new oldest and next
// sequences, and the ids of the results it deleted.
func (s *Store) sequenceResults(b *Batch, first, next uint64) (uint64, uint64, []string, error) {
	if len(b.results) == 0 && next-first <= s.resultsMax {
		return first, next, nil, nil
	}
	for _, id := range b.results {
		if err := b.b.Set(resultSeqKey(next), []byte(id), nil); err != nil {
			return 0, 0, nil, err
		}
		next++
	}
	var evicted []string
	// At most the results of b plus any excess left by a larger ResultsMax
	// before a restart.
	for next-first > s.resultsMax {
		k := resultSeqKey(first)
		id, ok, err := get(b.b, k)
		switch {
		case err != nil:
			return 0, 0, nil, err
		case !ok:
			return 0, 0, nil, fmt.Errorf("%w: result sequence %d missing", ErrCorrupt, first)
		}
		if err := b.b.Delete(resultKey(string(id)), nil); err != nil {
			return 0, 0, nil, err
		}
		if err := b.b.Delete(k, nil); err != nil {
			return 0, 0, nil, err
		}
		evicted = append(evicted, string(id))
		first++
	}
	v := binary.BigEndian.AppendUint64(nil, first)
	v = binary.BigEndian.AppendUint64(v, next)
	if err := b.b.Set(keyResults, v, nil); err != nil {
		return 0, 0, nil, err
	}
	return first, next, evicted, nil
}

// reader is what Pebble's DB, indexed Batch and Snapshot share.
type reader interface {
	Get(key []byte) ([]byte, io.Closer, error)
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}

// get returns a copy of the value of the Pebble key k.
func get(r reader, k []byte) ([]byte, bool, error) {
	v, closer, err := r.Get(k)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("kv: %w", err)
	}
	out := append([]byte{}, v...)
	if err := closer.Close(); err != nil {
		return nil, false, fmt.Errorf("kv: %w", err)
	}
	return out, true, nil
}

// scan returns up to limit entries in the Pebble range [lower, upper),
// which lies within one kind of keys (user data or aux), with their kind
// prefix stripped.
func scan(r reader, lower, upper []byte, limit int) ([]KV, error) {
	out, _, err := scanBounded(r, lower, upper, limit, 0)
	return out, err
}

// scanBounded is scan that also stops before the entry that would take the
// keys and values returned past bytesMax (0: no bound), except the first;
// next is then the key, prefix stripped, of the entry left out.
//
// The keys and values are copied into a few chunks of memory, each twice
// the last, not one allocation apiece (two per entry were most of what the
// executor's scans allocated); a chunk is never grown, so nothing copied is
// copied again, and each key and value is capped at its own end, so that an
// append to one cannot reach the next.
func scanBounded(r reader, lower, upper []byte, limit, bytesMax int) (out []KV, next []byte, err error) {
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, nil, fmt.Errorf("kv: scan: %w", err)
	}
	var chunk []byte
	keep := func(b []byte) []byte {
		if cap(chunk)-len(chunk) < len(b) {
			chunk = make([]byte, 0, max(2*cap(chunk), len(b), scanChunkMin))
		}
		from := len(chunk)
		chunk = append(chunk, b...)
		return chunk[from:len(chunk):len(chunk)]
	}
	size := 0
	for ok := it.First(); ok && len(out) < limit; ok = it.Next() {
		k := it.Key()[1:]
		lv := it.LazyValue() // its length, without fetching a value left out
		if bytesMax > 0 && len(out) > 0 && size+len(k)+lv.Len() > bytesMax {
			next = append([]byte{}, k...)
			break
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, nil, errors.Join(fmt.Errorf("kv: scan: %w", err), it.Close())
		}
		size += len(k) + len(v)
		out = append(out, KV{Key: keep(k), Value: keep(v)})
	}
	if err := it.Close(); err != nil {
		return nil, nil, fmt.Errorf("kv: scan: %w", err)
	}
	return out, next, nil
}

// scanChunkMin is the first chunk of a scan's keys and values: a few of
// gTPC-C's rows.
const scanChunkMin = 512

// pebbleLogger hands Pebble's errors to a slog.Logger and drops its
// informational lines (one per flush and compaction).
type pebbleLogger struct{ l *slog.Logger }

func (pebbleLogger) Infof(string, ...any) {}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble: " + fmt.Sprintf(format, args...))
}

// Fatalf logs and panics: Pebble calls it where it cannot go on.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf("kv: pebble: "+format, args...)
	p.l.Error(msg)
	panic(msg)
}
