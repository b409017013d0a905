package kv

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync/atomic"

	"github.com/flexkv/flexkv/internal/syncfs"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/flexkv/flexkv/internal/invariants"
)

// Snapshot stream (all integers big endian unless uvarint):
//
//	magic        8 bytes, snapshotMagic (the last byte is the version)
//	index        uint64, the applied index
//	resultFirst  uint64, sequence of the oldest result
//	resultNext   uint64, sequence the next result takes
//	data         records {uvarint key length (1..KeyMax), key,
//	             uvarint value length (0..ValueMax), value}, keys strictly
//	             increasing, then a uvarint 0
//	results      resultNext-resultFirst records {uvarint id length
//	             (1..ResultIDMax), id, uvarint result length (0..ValueMax),
//	             result}, by sequence, ids distinct
//	aux          records {uvarint key length (1..AuxKeyMax), key, uvarint
//	             value length (0..AuxValueMax), value}, keys strictly
//	             increasing, then a uvarint 0
//	checksum     uint32, CRC-32C of every byte before it
//
// The stream is a function of the state alone: replicas at the same index
// write the same bytes. Version 2 added the aux section; a version 1 stream
// is refused.
var snapshotMagic = [8]byte{'F', 'K', 'V', 'S', 'N', 'A', 'P', 2}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// restoreChunkBytes is the size at which RestoreSnapshot commits the batch
// it fills, so that a large snapshot does not build one huge batch.
const restoreChunkBytes = 4 << 20

// Snapshot is a consistent point-in-time copy of a store's state, for raft
// snapshots. It stays valid across later commits, a RestoreSnapshot and the
// store's Close, until Release.
type Snapshot struct {
	h        *handle
	ps       *pebble.Snapshot
	index    uint64
	resFirst uint64
	resNext  uint64
	released atomic.Bool
}

// Snapshot captures the state at the current applied index.
func (s *Store) Snapshot() (*Snapshot, error) {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usableLocked(); err != nil {
		return nil, err
	}
	ps := s.h.db.NewSnapshot()
	// The meta keys are read from the snapshot itself, so they match its
	// contents whatever else runs.
	applied, first, next, err := readMeta(ps)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("kv: snapshot: %w", err), ps.Close())
	}
	s.h.acquire()
	return &Snapshot{h: s.h, ps: ps, index: applied, resFirst: first, resNext: next}, nil
}

// Index returns the applied index the snapshot captured.
func (sn *Snapshot) Index() uint64 { return sn.index }

// Release releases the snapshot; a second Release does nothing.
func (sn *Snapshot) Release() {
	if sn.released.Swap(true) {
		return
	}
	// Neither error has anyone to report to: closing a Pebble snapshot
	// fails only on a second close, and an error closing a retired store's
	// files leaves only files that the next Open removes.
	_ = sn.ps.Close()
	_ = sn.h.release()
}

// WriteTo writes the snapshot as a stream that RestoreSnapshot reads.
func (sn *Snapshot) WriteTo(w io.Writer) (int64, error) {
	if sn.released.Load() {
		return 0, fmt.Errorf("kv: snapshot: %w: released", ErrInvalid)
	}
	sw := &streamWriter{cw: countWriter{w: w}}
	sw.bw = bufio.NewWriter(&sw.cw)
	err := sn.write(sw)
	if err == nil {
		err = sw.bw.Flush()
	}
	if err != nil {
		return sw.cw.n, fmt.Errorf("kv: snapshot: %w", err)
	}
	return sw.cw.n, nil
}

func (sn *Snapshot) write(sw *streamWriter) error {
	head := append([]byte{}, snapshotMagic[:]...)
	head = binary.BigEndian.AppendUint64(head, sn.index)
	head = binary.BigEndian.AppendUint64(head, sn.resFirst)
	head = binary.BigEndian.AppendUint64(head, sn.resNext)
	if err := sw.write(head); err != nil {
		return err
	}
	if err := sn.writeSection(sw, []byte{prefixData}, dataEnd); err != nil {
		return err
	}
	it, err := sn.ps.NewIter(&pebble.IterOptions{LowerBound: resultSeqStart, UpperBound: resultSeqEnd})
	if err != nil {
		return err
	}
	seq := sn.resFirst
	for ok := it.First(); ok; ok = it.Next() {
		if err := sn.writeResult(sw, it, seq); err != nil {
			return errors.Join(err, it.Close())
		}
		seq++
	}
	if err := it.Close(); err != nil {
		return err
	}
	if seq != sn.resNext {
		return fmt.Errorf("%w: %d results stored, sequences say %d", ErrCorrupt, seq-sn.resFirst, sn.resNext-sn.resFirst)
	}
	if err := sn.writeSection(sw, auxStart, auxEnd); err != nil {
		return err
	}
	return sw.write(binary.BigEndian.AppendUint32(nil, sw.crc))
}

// writeSection writes the keys of [lower, upper), without their one-byte
// kind prefix, with their values, then the zero that ends a section.
func (sn *Snapshot) writeSection(sw *streamWriter, lower, upper []byte) error {
	it, err := sn.ps.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err == nil {
			err = sw.record(it.Key()[1:], v)
		}
		if err != nil {
			return errors.Join(err, it.Close())
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	return sw.write([]byte{0})
}

// writeResult writes the result whose sequence entry it is at, which must
// be seq.
func (sn *Snapshot) writeResult(sw *streamWriter, it *pebble.Iterator, seq uint64) error {
	if k := it.Key(); !bytes.Equal(k, resultSeqKey(seq)) {
		return fmt.Errorf("%w: result sequence key %x, want sequence %d", ErrCorrupt, k, seq)
	}
	id, err := it.ValueAndErr()
	if err != nil {
		return err
	}
	res, ok, err := get(sn.ps, resultKey(string(id)))
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("%w: result %q of sequence %d missing", ErrCorrupt, id, seq)
	}
	return sw.record(id, res)
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// streamWriter writes a stream and computes its checksum.
type streamWriter struct {
	cw      countWriter
	bw      *bufio.Writer
	crc     uint32
	scratch []byte
}

func (sw *streamWriter) write(p []byte) error {
	sw.crc = crc32.Update(sw.crc, castagnoli, p)
	_, err := sw.bw.Write(p)
	return err
}

// record writes a length-prefixed key (or id) and value.
func (sw *streamWriter) record(k, v []byte) error {
	sw.scratch = binary.AppendUvarint(sw.scratch[:0], uint64(len(k)))
	if err := sw.write(sw.scratch); err != nil {
		return err
	}
	if err := sw.write(k); err != nil {
		return err
	}
	sw.scratch = binary.AppendUvarint(sw.scratch[:0], uint64(len(v)))
	if err := sw.write(sw.scratch); err != nil {
		return err
	}
	return sw.write(v)
}

// restoreStep names a step of RestoreSnapshot, for the test hook.
type restoreStep int

const (
	// stepDirCreated: the new generation's empty Pebble store exists.
	stepDirCreated restoreStep = iota
	// stepLoaded: the stream is loaded into it and synced.
	stepLoaded
	// stepMarkerTemp: ACTIVE.tmp names the new generation and is synced.
	stepMarkerTemp
	// stepSwitched: ACTIVE names the new generation, synced (the commit
	// point).
	stepSwitched
)

func (st restoreStep) String() string {
	switch st {
	case stepDirCreated:
		return "dir-created"
	case stepLoaded:
		return "loaded"
	case stepMarkerTemp:
		return "marker-temp"
	case stepSwitched:
		return "switched"
	default:
		return fmt.Sprintf("step(%d)", int(st))
	}
}

// RestoreSnapshot replaces the whole state with a stream written by
// Snapshot.WriteTo at index, atomically: a crash leaves the old state or
// the new one (see the package comment). A stream that is not a valid
// snapshot at index is rejected with an error wrapping ErrCorrupt, and the
// state is left as it was. RestoreSnapshot reads r up to the end of the
// stream, and possibly beyond unless r is an io.ByteReader. Batches opened
// before it can no longer be committed.
func (s *Store) RestoreSnapshot(r io.Reader, index uint64) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.RLock()
	err := s.usableLocked()
	s.mu.RUnlock()
	if err != nil {
		return err
	}
	// Whatever the outcome, the state may change: no SettledView until
	// the next settled commit.
	s.settled.Store(false)
	s.viewGen.Add(2)
	gen := s.gen + 1
	fs := s.opts.FS
	dir := fs.PathJoin(s.dir, genName(gen))
	h, err := createGen(fs, s.dir, dir, pebbleOptions(s.opts, false), s.opts.RowCacheSlots)
	if err != nil {
		return fmt.Errorf("kv: restore: %w", err)
	}
	abort := func(err error) error {
		err = fmt.Errorf("kv: restore: %w", err)
		if rerr := h.release(); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return errors.Join(err, fs.RemoveAll(dir))
	}
	if err := s.hook(stepDirCreated); err != nil {
		return abort(err)
	}
	first, next, err := load(r, index, h.db, s.opts.NoWAL)
	if err == nil {
		err = h.loadResultIDs()
	}
	if err != nil {
		return abort(err)
	}
	if err := s.hook(stepLoaded); err != nil {
		return abort(err)
	}
	renamed, err := writeMarker(fs, s.dir, gen, s.restoreHook)
	switch {
	case err != nil && !renamed:
		return abort(err)
	case err != nil:
		// The marker names the new generation, but it is unknown whether a
		// crash would keep it: both directories stay for Open to settle.
		s.mu.Lock()
		s.failed = fmt.Errorf("restore at index %d interrupted after the marker switched: %w", index, err)
		s.mu.Unlock()
		return errors.Join(fmt.Errorf("kv: restore: %w", err), h.release())
	}
	s.mu.Lock()
	old := s.h
	s.h = h
	s.mu.Unlock()
	s.gen = gen
	s.resFirst, s.resNext = first, next
	s.applied.Store(index)
	if invariants.Enabled {
		invariants.Hold(s.checkCommitted(h))
	}
	old.retired.Store(true)
	// The old generation is closed and removed now, or by the release of
	// its last Batch or Snapshot. The new state is in place whatever
	// happens to it: a directory left behind is removed by the next Open.
	_ = old.release()
	return nil
}

func (s *Store) hook(step restoreStep) error {
	if s.restoreHook == nil {
		return nil
	}
	return s.restoreHook(step)
}

// createGen creates an empty Pebble store in dir, a new entry of parent,
// replacing whatever an earlier failure left there.
func createGen(fs vfs.FS, parent, dir string, po *pebble.Options, rowCacheSlots int) (*handle, error) {
	if err := fs.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := syncfs.SyncDir(fs, parent); err != nil {
		return nil, errors.Join(err, fs.RemoveAll(dir))
	}
	h, err := openHandle(dir, po, rowCacheSlots)
	if err != nil {
		return nil, errors.Join(err, fs.RemoveAll(dir))
	}
	return h, nil
}

type byteReader interface {
	io.Reader
	io.ByteReader
}

// streamReader reads a stream and computes its checksum.
type streamReader struct {
	r   byteReader
	crc uint32
	one [1]byte
	buf []byte
}

func (sr *streamReader) ReadByte() (byte, error) {
	c, err := sr.r.ReadByte()
	if err != nil {
		return 0, truncated(err)
	}
	sr.one[0] = c
	sr.crc = crc32.Update(sr.crc, castagnoli, sr.one[:])
	return c, nil
}

// next reads n bytes into a buffer valid until the next call.
func (sr *streamReader) next(n int) ([]byte, error) {
	if cap(sr.buf) < n {
		sr.buf = make([]byte, n)
	}
	b := sr.buf[:n]
	if _, err := io.ReadFull(sr.r, b); err != nil {
		return nil, truncated(err)
	}
	sr.crc = crc32.Update(sr.crc, castagnoli, b)
	return b, nil
}

func (sr *streamReader) uint64() (uint64, error) {
	b, err := sr.next(8)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(b), nil
}

// length reads a uvarint length at most limit.
func (sr *streamReader) length(what string, limit int) (int, error) {
	n, err := binary.ReadUvarint(sr)
	switch {
	case errors.Is(err, ErrCorrupt):
		return 0, err
	case err != nil:
		return 0, fmt.Errorf("%w: %s length: %w", ErrCorrupt, what, err)
	case n > uint64(limit):
		return 0, fmt.Errorf("%w: %s of %d bytes, more than %d", ErrCorrupt, what, n, limit)
	}
	return int(n), nil
}

func truncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: truncated stream", ErrCorrupt)
	}
	return err
}

// load reads a snapshot stream taken at index into the empty db and makes
// it durable (noWAL: db has no WAL); it returns the result sequences.
func load(r io.Reader, index uint64, db *pebble.DB, noWAL bool) (first, next uint64, err error) {
	br, ok := r.(byteReader)
	if !ok {
		br = bufio.NewReader(r)
	}
	sr := &streamReader{r: br}
	l := &loader{db: db, b: db.NewBatch(), noWAL: noWAL}
	defer func() { _ = l.b.Close() }()

	magic, err := sr.next(len(snapshotMagic))
	if err != nil {
		return 0, 0, err
	}
	if !bytes.Equal(magic, snapshotMagic[:]) {
		return 0, 0, fmt.Errorf("%w: not a snapshot: starts with %x", ErrCorrupt, magic)
	}
	var head [3]uint64
	for i := range head {
		if head[i], err = sr.uint64(); err != nil {
			return 0, 0, err
		}
	}
	first, next = head[1], head[2]
	switch {
	case head[0] != index:
		return 0, 0, fmt.Errorf("%w: snapshot of index %d, restored as index %d", ErrCorrupt, head[0], index)
	case first > next:
		return 0, 0, fmt.Errorf("%w: oldest result sequence %d after the next %d", ErrCorrupt, first, next)
	}
	if err := loadSection(sr, l, "", prefixData, KeyMax, ValueMax); err != nil {
		return 0, 0, err
	}
	if err := loadResults(sr, l, first, next); err != nil {
		return 0, 0, err
	}
	if err := loadSection(sr, l, "aux ", prefixAux, AuxKeyMax, AuxValueMax); err != nil {
		return 0, 0, err
	}
	want := sr.crc
	sum, err := sr.next(4)
	if err != nil {
		return 0, 0, err
	}
	if got := binary.BigEndian.Uint32(sum); got != want {
		return 0, 0, fmt.Errorf("%w: checksum %08x, computed %08x", ErrCorrupt, got, want)
	}
	meta := binary.BigEndian.AppendUint64(nil, first)
	meta = binary.BigEndian.AppendUint64(meta, next)
	if err := l.set(keyResults, meta); err != nil {
		return 0, 0, err
	}
	if err := l.set(keyApplied, binary.BigEndian.AppendUint64(nil, index)); err != nil {
		return 0, 0, err
	}
	// The last commit syncs the WAL, and with it every earlier commit (or,
	// without a WAL, flushes them all).
	if err := commitDurably(l.db, l.b, l.noWAL); err != nil {
		return 0, 0, err
	}
	return first, next, nil
}

// loadSection reads a section that writeSection wrote: records of keys
// (1..keyMax bytes, strictly increasing) and values (0..valueMax bytes),
// stored under prefix, up to the zero that ends it. kind ("" or "aux ")
// names them in errors.
func loadSection(sr *streamReader, l *loader, kind string, prefix byte, keyMax, valueMax int) error {
	var prev []byte
	for {
		n, err := sr.length(kind+"key", keyMax)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		key, err := sr.next(n)
		if err != nil {
			return err
		}
		if prev != nil && bytes.Compare(prev, key) >= 0 {
			return fmt.Errorf("%w: %skey %s not after %s", ErrCorrupt, kind, quote(key), quote(prev))
		}
		prev = append(prev[:0], key...)
		k := append([]byte{prefix}, key...)
		if n, err = sr.length(kind+"value", valueMax); err != nil {
			return err
		}
		v, err := sr.next(n)
		if err != nil {
			return err
		}
		if err := l.set(k, v); err != nil {
			return err
		}
	}
}

func loadResults(sr *streamReader, l *loader, first, next uint64) error {
	// ids is bounded by the stream's length: one entry per record read.
	ids := make(map[string]struct{})
	for seq := first; seq < next; seq++ {
		n, err := sr.length("result id", ResultIDMax)
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("%w: empty result id", ErrCorrupt)
		}
		b, err := sr.next(n)
		if err != nil {
			return err
		}
		id := string(b)
		if _, dup := ids[id]; dup {
			return fmt.Errorf("%w: result %q listed twice", ErrCorrupt, id)
		}
		ids[id] = struct{}{}
		if n, err = sr.length("result", ValueMax); err != nil {
			return err
		}
		v, err := sr.next(n)
		if err != nil {
			return err
		}
		if err := l.set(resultKey(id), v); err != nil {
			return err
		}
		if err := l.set(resultSeqKey(seq), []byte(id)); err != nil {
			return err
		}
	}
	return nil
}

// loader fills a Pebble store in batches of restoreChunkBytes.
type loader struct {
	db    *pebble.DB
	b     *pebble.Batch
	noWAL bool
}

func (l *loader) set(k, v []byte) error {
	if err := l.b.Set(k, v, nil); err != nil {
		return err
	}
	if l.b.Len() < restoreChunkBytes {
		return nil
	}
	if err := l.b.Commit(pebble.NoSync); err != nil {
		return err
	}
	if err := l.b.Close(); err != nil {
		return err
	}
	l.b = l.db.NewBatch()
	return nil
}
