// Package crashfs crashes a machine's disk at a chosen point, for the power
// loss tests (DESIGN 12): an FS keeps everything a replica stores (raft
// log, stable store, snapshots, data) on one crashable in-memory file
// system (Pebble's vfs.NewCrashableMem) and counts the syncs made on it.
// Armed with a number n, it takes the crash image, the file system as a
// power loss would leave it (what was synced, nothing else), just before
// the n-th sync from then takes effect, and holds that sync and every later
// one until Release: nothing the replica does after the crash point becomes
// durable or is acknowledged on the strength of a sync, until the test has
// cut the replica off and lets it run on into the discarded file system. The
// test then stops the replica and starts it again on the image.
package crashfs

import (
	"errors"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// FS is a vfs.FS over a crashable MemFS that can crash at a sync. Its
// methods may be called from many goroutines.
type FS struct {
	vfs.FS
	mem *vfs.MemFS

	mu      sync.Mutex
	syncs   uint64        // syncs started
	under   string        // with at: count only the syncs of paths under this one
	counted uint64        // syncs counted towards at
	at      uint64        // the sync that crashes the disk; 0: not armed
	image   *vfs.MemFS    // the crash image, once taken
	atName  string        // the file or directory whose sync crashed the disk
	crashed chan struct{} // closed when the image is taken
	release chan struct{} // closed by Release
}

// New returns an FS over mem, which must come from vfs.NewCrashableMem
// (or a CrashClone of one).
func New(mem *vfs.MemFS) *FS {
	return &FS{FS: mem, mem: mem, crashed: make(chan struct{}), release: make(chan struct{})}
}

// Syncs returns how many syncs were started on the file system.
func (f *FS) Syncs() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.syncs
}

// Arm makes the n-th sync from now (n >= 1) the crash point. Arming twice,
// or after the crash, is an error.
func (f *FS) Arm(n uint64) error { return f.ArmUnder(n, "") }

// ArmUnder makes the n-th sync from now of a file or directory whose path
// starts with under the crash point ("": any).
func (f *FS) ArmUnder(n uint64, under string) error {
	if n == 0 {
		return errors.New("crashfs: arm at sync 0: want 1 or more")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.at != 0 || f.image != nil {
		return errors.New("crashfs: armed already")
	}
	f.at, f.under, f.counted = n, under, 0
	return nil
}

// CrashNow crashes the disk at once, between two syncs, unless it crashed
// already. Either way the image is then taken and syncs are held.
func (f *FS) CrashNow() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.crashLocked()
}

func (f *FS) crashLocked() {
	if f.image != nil {
		return
	}
	f.image = f.mem.CrashClone(vfs.CrashCloneCfg{})
	close(f.crashed)
}

// Crashed is closed when the crash image is taken.
func (f *FS) Crashed() <-chan struct{} { return f.crashed }

// Image returns the crash image: a crashable MemFS holding what was synced
// before the crash point. Nil before the crash.
func (f *FS) Image() *vfs.MemFS {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.image
}

// CrashedAt returns the path of the file or directory whose sync was the
// crash point: "" before the crash or after CrashNow.
func (f *FS) CrashedAt() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.atName
}

// Release lets the held syncs, and every later one, go on into the
// discarded file system. Call it once the replica can no longer tell
// anyone what a sync made durable, before stopping it.
func (f *FS) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.release:
	default:
		close(f.release)
	}
}

// beforeSync counts a sync, takes the image if it is the armed one, and
// holds it while the disk is crashed and not released.
func (f *FS) beforeSync(name string) {
	f.mu.Lock()
	f.syncs++
	if f.at != 0 && strings.HasPrefix(name, f.under) {
		f.counted++
		if f.counted >= f.at && f.image == nil {
			f.atName = name
			f.crashLocked()
		}
	}
	crashed := f.image != nil
	f.mu.Unlock()
	if crashed {
		<-f.release
	}
}

func (f *FS) wrap(name string, file vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &syncFile{File: file, fs: f, name: name}, nil
}

// Create creates a file whose syncs count.
func (f *FS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.Create(name, category)
	return f.wrap(name, file, err)
}

// Open opens a file whose syncs count.
func (f *FS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	file, err := f.FS.Open(name, opts...)
	return f.wrap(name, file, err)
}

// OpenReadWrite opens a file whose syncs count.
func (f *FS) OpenReadWrite(name string, category vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	file, err := f.FS.OpenReadWrite(name, category, opts...)
	return f.wrap(name, file, err)
}

// OpenDir opens a directory whose syncs (of its entries) count.
func (f *FS) OpenDir(name string) (vfs.File, error) {
	file, err := f.FS.OpenDir(name)
	return f.wrap(name, file, err)
}

// ReuseForWrite renames and reopens a file whose syncs count.
func (f *FS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.ReuseForWrite(oldname, newname, category)
	return f.wrap(newname, file, err)
}

// syncFile counts its syncs on its FS.
type syncFile struct {
	vfs.File
	fs   *FS
	name string
}

func (s *syncFile) Sync() error {
	s.fs.beforeSync(s.name)
	return s.File.Sync()
}

func (s *syncFile) SyncData() error {
	s.fs.beforeSync(s.name)
	return s.File.SyncData()
}

func (s *syncFile) SyncTo(length int64) (bool, error) {
	s.fs.beforeSync(s.name)
	return s.File.SyncTo(length)
}
