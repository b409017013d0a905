package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/flexkv/flexkv/internal/syncfs"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Checkpoints (DESIGN 14, Backup): a checkpoint is a Pebble checkpoint of
// the live store (hard links to its tables, a copy of its manifest and of
// its WAL, if it keeps one: a store without flushes first) in its own
// directory, CheckpointsDir/NAME, with a file, CheckpointInfoFile, that
// records its name and the applied index it holds. The executor takes one
// at a backup marker; the server streams its files to `flexkv backup
// create` and drops it after.
//
// A checkpoint is a side effect beside the replicated state, never part of
// it: a replica that takes a checkpoint again (it replays the marker's
// entry after a crash lost its store's tail) finds the one it took and
// keeps it when it holds the same index; a dropped checkpoint leaves a
// tombstone, NAME.dropped, so that a replay does not bring it back.

// checkpointsDir is the directory of the checkpoints, in the store's.
const checkpointsDir = "checkpoints"

// CheckpointInfoFile is the file of a checkpoint that describes it.
const CheckpointInfoFile = "checkpoint.json"

// droppedSuffix names a dropped checkpoint's tombstone.
const droppedSuffix = ".dropped"

// CheckpointNameMax is the length of the longest checkpoint name.
const CheckpointNameMax = 64

// ErrNoCheckpoint is wrapped by the errors about a checkpoint the store
// does not have.
var ErrNoCheckpoint = errors.New("no such checkpoint")

// CheckpointInfo describes a checkpoint.
type CheckpointInfo struct {
	Name string `json:"name"`
	// AppliedIndex is the store's applied index in the checkpoint: the
	// raft entry whose effects it holds last.
	AppliedIndex uint64 `json:"applied_index"`
}

// CheckpointFile is a file of a checkpoint: its path relative to the
// checkpoint's directory, with '/' between names, and its size.
type CheckpointFile struct {
	Path string
	Size int64
}

// CheckCheckpointName returns an error wrapping ErrInvalid unless name is
// 1..CheckpointNameMax bytes of [a-z0-9.-], not starting with a dot.
func CheckCheckpointName(name string) error {
	if name == "" || len(name) > CheckpointNameMax || name[0] == '.' {
		return fmt.Errorf("kv: checkpoint name %q: %w: want 1..%d bytes of [a-z0-9.-], not starting with '.'", name, ErrInvalid, CheckpointNameMax)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '.' && c != '-' {
			return fmt.Errorf("kv: checkpoint name %q: %w: byte %q not in [a-z0-9.-]", name, ErrInvalid, c)
		}
	}
	if strings.HasSuffix(name, droppedSuffix) || strings.HasSuffix(name, ".tmp") {
		return fmt.Errorf("kv: checkpoint name %q: %w: ends in a reserved suffix", name, ErrInvalid)
	}
	return nil
}

// CheckpointDir returns the directory of checkpoint name.
func (s *Store) CheckpointDir(name string) string {
	fs := s.opts.FS
	return fs.PathJoin(s.dir, checkpointsDir, name)
}

// Checkpoint takes checkpoint name of the store as it is committed now,
// unless the store has it already at the same applied index (kept), or it
// was dropped (nothing is taken: dropped reports it). A checkpoint of the
// same name at another index is replaced.
func (s *Store) Checkpoint(name string) (info CheckpointInfo, dropped bool, err error) {
	if err := CheckCheckpointName(name); err != nil {
		return CheckpointInfo{}, false, err
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usableLocked(); err != nil {
		return CheckpointInfo{}, false, err
	}
	fs := s.opts.FS
	parent := fs.PathJoin(s.dir, checkpointsDir)
	if _, err := fs.Stat(fs.PathJoin(parent, name+droppedSuffix)); err == nil {
		return CheckpointInfo{}, true, nil
	}
	info = CheckpointInfo{Name: name, AppliedIndex: s.applied.Load()}
	dir := fs.PathJoin(parent, name)
	if was, err := readCheckpointInfo(fs, dir); err == nil && was == info {
		return info, false, nil
	}
	if err := syncfs.MkdirAll(fs, parent); err != nil {
		return CheckpointInfo{}, false, fmt.Errorf("kv: checkpoint %s: %w", name, err)
	}
	tmp := dir + ".tmp"
	if err := errors.Join(fs.RemoveAll(tmp), fs.RemoveAll(dir)); err != nil {
		return CheckpointInfo{}, false, fmt.Errorf("kv: checkpoint %s: %w", name, err)
	}
	// The WAL flushed first (or, without a WAL, the memtable): the entries
	// committed without a sync are in the checkpoint too.
	if s.opts.NoWAL {
		if err := s.h.db.Flush(); err != nil {
			return CheckpointInfo{}, false, fmt.Errorf("kv: checkpoint %s: %w", name, err)
		}
	}
	if err := s.h.db.Checkpoint(tmp, pebble.WithFlushedWAL()); err != nil {
		return CheckpointInfo{}, false, fmt.Errorf("kv: checkpoint %s: %w", name, err)
	}
	if err := writeCheckpointInfo(fs, tmp, info); err != nil {
		return CheckpointInfo{}, false, fmt.Errorf("kv: checkpoint %s: %w", name, err)
	}
	if err := fs.Rename(tmp, dir); err != nil {
		return CheckpointInfo{}, false, fmt.Errorf("kv: checkpoint %s: %w", name, err)
	}
	if err := syncfs.SyncDir(fs, parent); err != nil {
		return CheckpointInfo{}, false, fmt.Errorf("kv: checkpoint %s: %w", name, err)
	}
	return info, false, nil
}

func writeCheckpointInfo(fs vfs.FS, dir string, info CheckpointInfo) error {
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	f, err := fs.Create(fs.PathJoin(dir, CheckpointInfoFile), vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close(), syncfs.SyncDir(fs, dir))
}

func readCheckpointInfo(fs vfs.FS, dir string) (CheckpointInfo, error) {
	b, err := readAll(fs, fs.PathJoin(dir, CheckpointInfoFile))
	if err != nil {
		return CheckpointInfo{}, err
	}
	var info CheckpointInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return CheckpointInfo{}, fmt.Errorf("%w: %s: %w", ErrCorrupt, CheckpointInfoFile, err)
	}
	return info, nil
}

// CheckpointFiles returns checkpoint name's description and its files,
// sorted by path, CheckpointInfoFile among them. An unknown (or dropped)
// checkpoint is an error wrapping ErrNoCheckpoint.
func (s *Store) CheckpointFiles(name string) (CheckpointInfo, []CheckpointFile, error) {
	if err := CheckCheckpointName(name); err != nil {
		return CheckpointInfo{}, nil, err
	}
	fs := s.opts.FS
	dir := s.CheckpointDir(name)
	info, err := readCheckpointInfo(fs, dir)
	if errors.Is(err, os.ErrNotExist) {
		return CheckpointInfo{}, nil, fmt.Errorf("kv: checkpoint %s: %w", name, ErrNoCheckpoint)
	}
	if err != nil {
		return CheckpointInfo{}, nil, fmt.Errorf("kv: checkpoint %s: %w", name, err)
	}
	var files []CheckpointFile
	var walk func(rel string) error
	walk = func(rel string) error {
		names, err := fs.List(fs.PathJoin(dir, rel))
		if err != nil {
			return err
		}
		for _, n := range names {
			p := n
			if rel != "" {
				p = rel + "/" + n
			}
			st, err := fs.Stat(fs.PathJoin(dir, p))
			if err != nil {
				return err
			}
			if st.IsDir() {
				if err := walk(p); err != nil {
					return err
				}
				continue
			}
			files = append(files, CheckpointFile{Path: p, Size: st.Size()})
		}
		return nil
	}
	if err := walk(""); err != nil {
		return CheckpointInfo{}, nil, fmt.Errorf("kv: checkpoint %s: %w", name, err)
	}
	slices.SortFunc(files, func(a, b CheckpointFile) int { return strings.Compare(a.Path, b.Path) })
	return info, files, nil
}

// OpenCheckpointFile opens file path (CheckpointFiles) of checkpoint name
// for reading.
func (s *Store) OpenCheckpointFile(name, path string) (io.ReadCloser, error) {
	if err := CheckCheckpointName(name); err != nil {
		return nil, err
	}
	if path == "" || strings.HasPrefix(path, "/") || slices.Contains(strings.Split(path, "/"), "..") {
		return nil, fmt.Errorf("kv: checkpoint %s: %w: file %q", name, ErrInvalid, path)
	}
	fs := s.opts.FS
	f, err := fs.Open(fs.PathJoin(s.CheckpointDir(name), path))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("kv: checkpoint %s: file %s: %w", name, path, ErrNoCheckpoint)
	}
	if err != nil {
		return nil, fmt.Errorf("kv: checkpoint %s: %w", name, err)
	}
	return f, nil
}

// DropCheckpoint removes checkpoint name, leaving a tombstone so that a
// replay of its marker does not take it again. Dropping a checkpoint the
// store does not have leaves the tombstone alone.
func (s *Store) DropCheckpoint(name string) error {
	if err := CheckCheckpointName(name); err != nil {
		return err
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	fs := s.opts.FS
	parent := fs.PathJoin(s.dir, checkpointsDir)
	if err := syncfs.MkdirAll(fs, parent); err != nil {
		return fmt.Errorf("kv: drop checkpoint %s: %w", name, err)
	}
	f, err := fs.Create(fs.PathJoin(parent, name+droppedSuffix), vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("kv: drop checkpoint %s: %w", name, err)
	}
	if err := errors.Join(f.Sync(), f.Close(), fs.RemoveAll(fs.PathJoin(parent, name)), fs.RemoveAll(fs.PathJoin(parent, name+".tmp")), syncfs.SyncDir(fs, parent)); err != nil {
		return fmt.Errorf("kv: drop checkpoint %s: %w", name, err)
	}
	return nil
}

// Checkpoints returns the checkpoints the store holds, by name.
func (s *Store) Checkpoints() ([]CheckpointInfo, error) {
	fs := s.opts.FS
	parent := fs.PathJoin(s.dir, checkpointsDir)
	names, err := fs.List(parent)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kv: checkpoints: %w", err)
	}
	slices.Sort(names)
	var out []CheckpointInfo
	for _, n := range names {
		if CheckCheckpointName(n) != nil {
			continue
		}
		if info, err := readCheckpointInfo(fs, fs.PathJoin(parent, n)); err == nil {
			out = append(out, info)
		}
	}
	return out, nil
}

// KeepUserDataOnly deletes everything but the user keys and values: the
// applied index (0 afterwards), the results, and the executor's aux state.
// It seeds a new cluster's store from a backup (DESIGN 14: fresh protocol
// state, sessions and channels), before any raft entry is applied.
func (s *Store) KeepUserDataOnly() error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usableLocked(); err != nil {
		return err
	}
	db := s.h.db
	b := db.NewBatch()
	defer b.Close()
	err := errors.Join(
		b.DeleteRange([]byte{0}, []byte{prefixData}, nil),
		b.DeleteRange(dataEnd, []byte{0xff}, nil),
		b.Delete([]byte{0xff}, nil))
	if err == nil {
		err = commitDurably(db, b, s.opts.NoWAL)
	}
	if err != nil {
		return fmt.Errorf("kv: keep user data only: %w", err)
	}
	if err := db.Compact(context.Background(), []byte{0}, []byte{0xff, 0xff}, true); err != nil {
		return fmt.Errorf("kv: keep user data only: compact: %w", err)
	}
	clear(s.h.ids)
	s.applied.Store(0)
	s.resFirst, s.resNext = 0, 0
	return nil
}

// SeedFromCheckpoint makes dir, which must not exist or be empty, a store
// whose state is the checkpoint in checkpointDir (its files copied, not
// linked: the copy is the new store's own), for Open. Call
// KeepUserDataOnly on the opened store to drop all but the user data.
func SeedFromCheckpoint(checkpointDir, dir string) error {
	if names, err := os.ReadDir(dir); err == nil && len(names) > 0 {
		return fmt.Errorf("kv: seed %s: %w: not empty", dir, ErrInvalid)
	}
	gen := filepath.Join(dir, genName(1))
	err := filepath.WalkDir(checkpointDir, func(path string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(checkpointDir, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(gen, rel), 0o755)
		}
		if rel == CheckpointInfoFile {
			return nil
		}
		return copyFileSync(path, filepath.Join(gen, rel))
	})
	if err != nil {
		return fmt.Errorf("kv: seed %s: %w", dir, err)
	}
	if _, err := writeMarker(vfs.Default, dir, 1, nil); err != nil {
		return fmt.Errorf("kv: seed %s: %w", dir, err)
	}
	return nil
}

func copyFileSync(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	return errors.Join(err, out.Close())
}

// ScanCheckpoint calls f with every user key and value of checkpoint name,
// in key order (f must not keep them), and returns the checkpoint's
// description and the applied index stored in it.
func (s *Store) ScanCheckpoint(name string, f func(KV) error) (CheckpointInfo, uint64, error) {
	info, _, err := s.CheckpointFiles(name)
	if err != nil {
		return CheckpointInfo{}, 0, err
	}
	po := pebbleOptions(s.opts, true)
	po.ReadOnly = true
	db, err := pebble.Open(s.CheckpointDir(name), po)
	if err != nil {
		return CheckpointInfo{}, 0, fmt.Errorf("kv: checkpoint %s: %w", name, err)
	}
	defer db.Close()
	applied, _, _, err := readMeta(db)
	if err != nil {
		return CheckpointInfo{}, 0, fmt.Errorf("kv: checkpoint %s: %w", name, err)
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixData}, UpperBound: dataEnd})
	if err != nil {
		return CheckpointInfo{}, 0, fmt.Errorf("kv: checkpoint %s: %w", name, err)
	}
	for it.First(); it.Valid(); it.Next() {
		if err = f(KV{Key: it.Key()[1:], Value: it.Value()}); err != nil {
			break
		}
	}
	if err = errors.Join(err, it.Close()); err != nil {
		return CheckpointInfo{}, 0, fmt.Errorf("kv: checkpoint %s: %w", name, err)
	}
	return info, applied, nil
}
