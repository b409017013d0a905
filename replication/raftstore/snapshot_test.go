package raftstore

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

// writeSnap writes one snapshot of state into s and returns its id.
func writeSnap(t *testing.T, s *SnapshotStore, index uint64, state []byte) string {
	t.Helper()
	sink, err := s.Create(1, index, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write(bytes.Clone(state)); err != nil { // a file may scribble over what it was given
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	return sink.ID()
}

func readSnap(s *SnapshotStore, id string) ([]byte, error) {
	_, rc, err := s.Open(id)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// TestSnapshotStore: snapshots survive a power loss once Close returned,
// newest first, the oldest beyond retain removed; a state whose bytes
// changed on disk is refused by its checksum.
func TestSnapshotStore(t *testing.T) {
	mem := vfs.NewCrashableMem()
	s, err := NewSnapshotStore(mem, "/a/snapshots", 2)
	if err != nil {
		t.Fatal(err)
	}
	states := [][]byte{bytes.Repeat([]byte{1}, 504), bytes.Repeat([]byte{2}, 10000), []byte("third")}
	var ids []string
	for i, st := range states {
		ids = append(ids, writeSnap(t, s, uint64(10*(i+1)), st))
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	s2, err := NewSnapshotStore(crashed, "/a/snapshots", 2)
	if err != nil {
		t.Fatal(err)
	}
	metas, err := s2.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(metas) != 2 || metas[0].ID != ids[2] || metas[1].ID != ids[1] {
		t.Fatalf("after a crash, List = %v, want %s, %s", metas, ids[2], ids[1])
	}
	for i, id := range ids[1:] {
		got, err := readSnap(s2, id)
		if err != nil || !bytes.Equal(got, states[i+1]) {
			t.Fatalf("snapshot %s after a crash: %d bytes, %v", id, len(got), err)
		}
	}
	// A new snapshot after the restart takes an id of its own.
	if id := writeSnap(t, s2, 30, []byte("again")); id == ids[2] {
		t.Fatalf("a snapshot after the restart reused id %s", id)
	}
	// Corrupt one byte of a state: reading it fails.
	f, err := crashed.OpenReadWrite("/a/snapshots/"+ids[2]+"/state", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{9}, 2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := readSnap(s2, ids[2]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reading a corrupted state: %v, want ErrCorrupt", err)
	}
	// A sink not closed when the power goes leaves nothing listed.
	sink, err := s2.Create(1, 99, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write([]byte("half")); err != nil {
		t.Fatal(err)
	}
	s3, err := NewSnapshotStore(crashed.CrashClone(vfs.CrashCloneCfg{}), "/a/snapshots", 2)
	if err != nil {
		t.Fatal(err)
	}
	if metas, _ := s3.List(); len(metas) == 0 || metas[0].Index == 99 {
		t.Fatalf("a snapshot never closed is listed after a crash: %v", metas)
	}
	_ = sink.Cancel() // its disk crashed: the outcome does not matter
}
