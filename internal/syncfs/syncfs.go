// Package syncfs makes directories durable on a Pebble vfs.FS: a file
// synced in a directory that was itself never synced into its parent is
// lost with a power loss, with the directory (DESIGN 5, 12). The stores of
// packages kv and replication/raftstore make their directories with it.
package syncfs

import (
	"errors"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// SyncDir syncs directory dir: the entries made or renamed in it last.
func SyncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// MkdirAll creates dir and the parents it lacks, and syncs the parent of
// each directory it created, so that a power loss cannot lose the
// directory entry itself, however well the files in it were synced.
func MkdirAll(fs vfs.FS, dir string) error {
	var created []string
	for d := dir; ; {
		if _, err := fs.Stat(d); err == nil {
			break
		}
		created = append(created, d)
		parent := fs.PathDir(d)
		if parent == d {
			break
		}
		d = parent
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, d := range created {
		if parent := fs.PathDir(d); parent != d {
			if err := SyncDir(fs, parent); err != nil {
				return err
			}
		}
	}
	return nil
}
