package raftstore

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/flexkv/flexkv/internal/syncfs"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

// SnapshotStore is a raft.SnapshotStore on a vfs.FS: raft's snapshots kept
// on the same file system as the Store, so that a test that drops what was
// not synced (vfs.NewCrashableMem, CrashClone) crashes the snapshots with
// the log. A server on the operating system's file system uses raft's own
// FileSnapshotStore instead; this one keeps the same promises.
//
// Each snapshot is a directory <dir>/<id> holding meta.json (raft's
// SnapshotMeta and a CRC-32C of the state) and state. A sink writes
// <dir>/<id>.tmp, and Close syncs both files and the directory, renames it
// to <dir>/<id> and syncs <dir>: a snapshot listed has been synced whole,
// and a crash before the rename leaves a .tmp directory, which List ignores
// and the next Create removes. Close then keeps the newest retain snapshots
// and removes the others.
type SnapshotStore struct {
	fs     vfs.FS
	dir    string
	retain int

	mu     sync.Mutex
	next   uint64          // distinguishes ids of snapshots of one term and index
	active map[string]bool // the .tmp directories of open sinks
}

var _ raft.SnapshotStore = (*SnapshotStore)(nil)

const (
	snapMetaFile  = "meta.json"
	snapStateFile = "state"
	snapTmpSuffix = ".tmp"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// snapMeta is what meta.json holds.
type snapMeta struct {
	raft.SnapshotMeta
	CRC uint32 // CRC-32C of the state file
}

// NewSnapshotStore returns the snapshot store in dir on fs, creating dir if
// needed; it keeps the newest retain snapshots (at least 1).
func NewSnapshotStore(fs vfs.FS, dir string, retain int) (*SnapshotStore, error) {
	if fs == nil || dir == "" {
		return nil, errors.New("raftstore: snapshot store: no file system or directory")
	}
	if retain < 1 {
		return nil, fmt.Errorf("raftstore: snapshot store: retain %d, want at least 1", retain)
	}
	if err := syncfs.MkdirAll(fs, dir); err != nil {
		return nil, fmt.Errorf("raftstore: snapshot store: %w", err)
	}
	s := &SnapshotStore{fs: fs, dir: dir, retain: retain, active: map[string]bool{}}
	// Ids stay unique across restarts: raft may write a snapshot of the
	// same term and index again (a leader installing it once more).
	names, err := fs.List(dir)
	if err != nil {
		return nil, fmt.Errorf("raftstore: snapshot store: %w", err)
	}
	for _, n := range names {
		var term, index, seq uint64
		if _, err := fmt.Sscanf(strings.TrimSuffix(n, snapTmpSuffix), "%d-%d-%d", &term, &index, &seq); err == nil {
			s.next = max(s.next, seq)
		}
	}
	return s, nil
}

// Create starts a snapshot; raft writes it to the sink and closes it.
func (s *SnapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, _ raft.Transport) (raft.SnapshotSink, error) {
	if version != 1 {
		return nil, fmt.Errorf("raftstore: snapshot store: unsupported snapshot version %d", version)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.removeTmp(); err != nil {
		return nil, err
	}
	s.next++
	id := fmt.Sprintf("%020d-%020d-%d", term, index, s.next)
	tmp := s.fs.PathJoin(s.dir, id+snapTmpSuffix)
	if err := s.fs.MkdirAll(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("raftstore: snapshot %s: %w", id, err)
	}
	f, err := s.fs.Create(s.fs.PathJoin(tmp, snapStateFile), vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("raftstore: snapshot %s: %w", id, err), s.fs.RemoveAll(tmp))
	}
	s.active[id+snapTmpSuffix] = true
	crc := crc32.New(castagnoli)
	sink := &snapSink{store: s, id: id, tmp: tmp, file: f, crc: crc,
		meta: snapMeta{SnapshotMeta: raft.SnapshotMeta{Version: version, ID: id, Index: index, Term: term,
			Configuration: configuration, ConfigurationIndex: configurationIndex}}}
	// The checksum sees the bytes before the file does: a vfs.File may
	// scribble over what it was given once written (Pebble's in-memory
	// file system does, in race builds, to catch callers that keep it).
	sink.w = bufio.NewWriter(io.MultiWriter(crc, f))
	return sink, nil
}

// removeTmp removes what crashed sinks left (with s.mu held): raft may
// write two snapshots at once (its own, and one a leader installs), so the
// directories of open sinks stay.
func (s *SnapshotStore) removeTmp() error {
	names, err := s.fs.List(s.dir)
	if err != nil {
		return fmt.Errorf("raftstore: snapshot store: %w", err)
	}
	for _, n := range names {
		if strings.HasSuffix(n, snapTmpSuffix) && !s.active[n] {
			if err := s.fs.RemoveAll(s.fs.PathJoin(s.dir, n)); err != nil {
				return fmt.Errorf("raftstore: snapshot store: %w", err)
			}
		}
	}
	return nil
}

// List returns the snapshots, newest (highest term, then index) first.
func (s *SnapshotStore) List() ([]*raft.SnapshotMeta, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	metas, err := s.list()
	if err != nil {
		return nil, err
	}
	out := make([]*raft.SnapshotMeta, len(metas))
	for i := range metas {
		out[i] = &metas[i].SnapshotMeta
	}
	return out, nil
}

func (s *SnapshotStore) list() ([]snapMeta, error) {
	names, err := s.fs.List(s.dir)
	if err != nil {
		return nil, fmt.Errorf("raftstore: snapshot store: %w", err)
	}
	var metas []snapMeta
	for _, n := range names {
		if strings.HasSuffix(n, snapTmpSuffix) {
			continue
		}
		m, err := s.readMeta(n)
		if err != nil {
			return nil, err
		}
		metas = append(metas, m)
	}
	slices.SortFunc(metas, func(a, b snapMeta) int {
		if a.Term != b.Term {
			return cmpU64(b.Term, a.Term)
		}
		if a.Index != b.Index {
			return cmpU64(b.Index, a.Index)
		}
		return strings.Compare(b.ID, a.ID)
	})
	return metas, nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (s *SnapshotStore) readMeta(id string) (snapMeta, error) {
	f, err := s.fs.Open(s.fs.PathJoin(s.dir, id, snapMetaFile))
	if err != nil {
		return snapMeta{}, fmt.Errorf("raftstore: snapshot %s: %w", id, err)
	}
	defer f.Close()
	var m snapMeta
	dec := json.NewDecoder(io.LimitReader(f, 1<<26))
	if err := dec.Decode(&m); err != nil {
		return snapMeta{}, fmt.Errorf("raftstore: snapshot %s: meta: %w: %w", id, err, ErrCorrupt)
	}
	if m.ID != id {
		return snapMeta{}, fmt.Errorf("raftstore: snapshot %s: meta names %q: %w", id, m.ID, ErrCorrupt)
	}
	return m, nil
}

// Open returns a snapshot's meta and state. Reading the state to its end
// checks its CRC: a state whose bytes differ from those written ends in an
// error wrapping ErrCorrupt instead of io.EOF.
func (s *SnapshotStore) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	if id == "" || strings.ContainsAny(id, `/\`) || strings.HasSuffix(id, snapTmpSuffix) || id == "." || id == ".." {
		return nil, nil, fmt.Errorf("raftstore: snapshot store: bad id %q", id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.readMeta(id)
	if err != nil {
		return nil, nil, err
	}
	f, err := s.fs.Open(s.fs.PathJoin(s.dir, id, snapStateFile))
	if err != nil {
		return nil, nil, fmt.Errorf("raftstore: snapshot %s: %w", id, err)
	}
	return &m.SnapshotMeta, &checkedReader{r: bufio.NewReader(f), c: f, crc: crc32.New(castagnoli), want: m.CRC, left: m.Size, id: id}, nil
}

// checkedReader reads a snapshot's state and checks its size and CRC at
// the end.
type checkedReader struct {
	r    io.Reader
	c    io.Closer
	crc  hash.Hash32
	want uint32
	left int64
	id   string
}

func (c *checkedReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.crc.Write(p[:n])
	c.left -= int64(n)
	if errors.Is(err, io.EOF) {
		if c.left != 0 || c.crc.Sum32() != c.want {
			return n, fmt.Errorf("raftstore: snapshot %s: state of the wrong size or checksum (%d left, crc %x want %x): %w", c.id, c.left, c.crc.Sum32(), c.want, ErrCorrupt)
		}
	}
	return n, err
}

// Close closes the state file; a second Close does nothing (the state
// machine's Restore and raft both close).
func (c *checkedReader) Close() error {
	if c.c == nil {
		return nil
	}
	err := c.c.Close()
	c.c = nil
	return err
}

// snapSink writes one snapshot.
type snapSink struct {
	store *SnapshotStore
	id    string
	tmp   string
	file  vfs.File
	w     *bufio.Writer
	crc   hash.Hash32
	meta  snapMeta
	done  bool
}

func (k *snapSink) ID() string { return k.id }

func (k *snapSink) Write(p []byte) (int, error) {
	n, err := k.w.Write(p)
	k.meta.Size += int64(n)
	return n, err
}

// Close makes the snapshot durable and listed, then removes the snapshots
// beyond the store's retain count. A second Close does nothing: the state
// machine's Persist closes the sink and raft closes it again.
func (k *snapSink) Close() error {
	if k.done {
		return nil
	}
	k.done = true
	s := k.store
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.active, k.id+snapTmpSuffix)
	if err := k.finish(); err != nil {
		return errors.Join(fmt.Errorf("raftstore: snapshot %s: %w", k.id, err), s.fs.RemoveAll(k.tmp))
	}
	return s.reap()
}

func (k *snapSink) finish() error {
	fs := k.store.fs
	err := k.w.Flush()
	if err == nil {
		err = k.file.Sync()
	}
	err = errors.Join(err, k.file.Close())
	if err != nil {
		return err
	}
	k.meta.CRC = k.crc.Sum32()
	b, err := json.Marshal(k.meta)
	if err != nil {
		return err
	}
	mf, err := fs.Create(fs.PathJoin(k.tmp, snapMetaFile), vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	_, err = mf.Write(b)
	if err == nil {
		err = mf.Sync()
	}
	if err = errors.Join(err, mf.Close()); err != nil {
		return err
	}
	if err := syncfs.SyncDir(fs, k.tmp); err != nil {
		return err
	}
	if err := fs.Rename(k.tmp, fs.PathJoin(k.store.dir, k.id)); err != nil {
		return err
	}
	return syncfs.SyncDir(fs, k.store.dir)
}

// Cancel drops the snapshot.
func (k *snapSink) Cancel() error {
	if k.done {
		return nil
	}
	k.done = true
	s := k.store
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.active, k.id+snapTmpSuffix)
	return errors.Join(k.file.Close(), s.fs.RemoveAll(k.tmp))
}

// reap removes the snapshots beyond the newest retain (with s.mu held).
func (s *SnapshotStore) reap() error {
	metas, err := s.list()
	if err != nil {
		return err
	}
	if len(metas) <= s.retain {
		return nil
	}
	for _, m := range metas[s.retain:] {
		if err := s.fs.RemoveAll(s.fs.PathJoin(s.dir, m.ID)); err != nil {
			return fmt.Errorf("raftstore: snapshot store: reap %s: %w", m.ID, err)
		}
	}
	return syncfs.SyncDir(s.fs, s.dir)
}
