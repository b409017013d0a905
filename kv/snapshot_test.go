package kv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// stream returns the snapshot stream of s's current state.
func stream(t testing.TB, s *Store) []byte {
	t.Helper()
	sn, err := s.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	defer sn.Release()
	var buf bytes.Buffer
	n, err := sn.WriteTo(&buf)
	if err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo returned %d, wrote %d bytes", n, buf.Len())
	}
	return buf.Bytes()
}

// fill commits a few entries with data, deletes and results.
func fill(t testing.TB, s *Store, from, to uint64) {
	t.Helper()
	for i := from; i <= to; i++ {
		commit(t, s, i, ops(
			put(fmt.Sprintf("k%03d", i), fmt.Sprintf("v%d", i)),
			put("shared", fmt.Sprintf("s%d", i)),
			del(fmt.Sprintf("k%03d", i-2)),
			result(fmt.Sprintf("tx%d", i), fmt.Sprintf("r%d", i)),
			auxPut(fmt.Sprintf("q%03d", i), fmt.Sprintf("x%d", i)),
			auxDel(fmt.Sprintf("q%03d", i-1)),
		))
	}
}

func TestSnapshotRestore(t *testing.T) {
	a := openStore(t, Options{NoSync: true, ResultsMax: 4})
	fill(t, a, 1, 6)
	want := dump(t, a)
	sn, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	if sn.Index() != 6 {
		t.Errorf("snapshot index %d, want 6", sn.Index())
	}
	fill(t, a, 7, 9) // after the capture: not in the snapshot
	var buf bytes.Buffer
	if _, err := sn.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	b, err := Open(Options{Dir: dir, NoSync: true, ResultsMax: 4})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, b, 1, 20) // b is ahead, with other contents: all replaced
	if err := b.RestoreSnapshot(bytes.NewReader(buf.Bytes()), 6); err != nil {
		t.Fatalf("RestoreSnapshot: %v", err)
	}
	if diff := cmp.Diff(want, dump(t, b)); diff != "" {
		t.Errorf("restored state (-snapshot +restored):\n%s", diff)
	}
	if got := b.AppliedIndex(); got != 6 {
		t.Errorf("AppliedIndex %d, want 6", got)
	}
	if !bytes.Equal(stream(t, b), buf.Bytes()) {
		t.Error("the restored store writes a stream different from the one it restored")
	}
	// The restored state is durable, the old generation is gone, and the
	// store goes on from the snapshot's index like the original.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := dirNames(t, dir), []string{markerName, genName(2)}; !cmp.Equal(got, want) {
		t.Errorf("directory holds %v, want %v", got, want)
	}
	b = openStore(t, Options{Dir: dir, NoSync: true, ResultsMax: 4})
	if diff := cmp.Diff(want, dump(t, b)); diff != "" {
		t.Errorf("restored state after reopen (-snapshot +restored):\n%s", diff)
	}
	fill(t, b, 7, 9)
	if diff := cmp.Diff(dump(t, a), dump(t, b)); diff != "" {
		t.Errorf("same commits after the restore (-original +restored):\n%s", diff)
	}
}

func TestRestoreEmptySnapshot(t *testing.T) {
	a := openStore(t, Options{NoSync: true})
	buf := stream(t, a)
	b := openStore(t, Options{NoSync: true})
	fill(t, b, 1, 3)
	if err := b.RestoreSnapshot(bytes.NewReader(buf), 0); err != nil {
		t.Fatal(err)
	}
	st := dump(t, b)
	if st.Applied != 0 || len(st.Data) != 0 || len(st.Results) != 0 || st.ResultsByID != 0 {
		t.Errorf("after restoring an empty snapshot: %+v", st)
	}
}

func TestRestoreRejectsWrongIndex(t *testing.T) {
	a := openStore(t, Options{NoSync: true})
	fill(t, a, 1, 3)
	buf := stream(t, a)
	b := openStore(t, Options{NoSync: true})
	fill(t, b, 1, 1)
	want := dump(t, b)
	if err := b.RestoreSnapshot(bytes.NewReader(buf), 4); !errors.Is(err, ErrCorrupt) {
		t.Errorf("restore as index 4 of a snapshot at 3: %v, want ErrCorrupt", err)
	}
	if diff := cmp.Diff(want, dump(t, b)); diff != "" {
		t.Errorf("a rejected restore changed the state (-want +got):\n%s", diff)
	}
	if got, want := dirNames(t, b.dir), []string{markerName, genName(1)}; !cmp.Equal(got, want) {
		t.Errorf("directory holds %v, want %v", got, want)
	}
}

// Every truncation and every flipped bit of a stream is rejected, and the
// state stays as it was.
func TestRestoreRejectsDamagedStreams(t *testing.T) {
	a := openStore(t, Options{NoSync: true})
	commit(t, a, 1, ops(put("a", "1"), put("b", "22"), result("tx", "r"), auxPut("m", "3"), auxPut("q\x00", "")))
	buf := stream(t, a)
	b := openStore(t, Options{NoSync: true})
	commit(t, b, 1, ops(put("z", "old")))
	want := dump(t, b)
	check := func(name string, data []byte) {
		t.Helper()
		if err := b.RestoreSnapshot(bytes.NewReader(data), 1); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	for n := range len(buf) {
		check(fmt.Sprintf("truncated to %d bytes", n), buf[:n])
	}
	for i := range len(buf) {
		damaged := bytes.Clone(buf)
		damaged[i] ^= 0x10
		check(fmt.Sprintf("byte %d flipped", i), damaged)
	}
	if diff := cmp.Diff(want, dump(t, b)); diff != "" {
		t.Errorf("rejected restores changed the state (-want +got):\n%s", diff)
	}
	if got, want := dirNames(t, b.dir), []string{markerName, genName(1)}; !cmp.Equal(got, want) {
		t.Errorf("directory holds %v, want %v", got, want)
	}
}

// A snapshot and a batch outlive a restore and the store's Close; the old
// generation's directory goes when the last of them is released.
func TestSnapshotOutlivesRestore(t *testing.T) {
	other := openStore(t, Options{NoSync: true})
	fill(t, other, 1, 2)
	otherStream := stream(t, other)

	s := openStore(t, Options{NoSync: true})
	fill(t, s, 1, 5)
	want := stream(t, s)
	sn, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	stale := s.NewBatch()
	if err := stale.Put(keyOf("x"), valueOf("y")); err != nil {
		t.Fatal(err)
	}
	if err := s.RestoreSnapshot(bytes.NewReader(otherStream), 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(stale, 10); !errors.Is(err, ErrInvalid) {
		t.Errorf("Commit of a batch opened before the restore: %v, want ErrInvalid", err)
	}
	if v, found, err := stale.Get(keyOf("k005")); err != nil || !found || string(v) != "v5" {
		t.Errorf("stale batch reads %q, %v, %v; want its own state", v, found, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := sn.WriteTo(&buf); err != nil {
		t.Fatalf("WriteTo after restore and Close: %v", err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Error("snapshot written after a restore differs from the state it captured")
	}
	if got, want := dirNames(t, s.dir), []string{markerName, genName(1), genName(2)}; !cmp.Equal(got, want) {
		t.Errorf("while held: directory holds %v, want %v", got, want)
	}
	stale.Close()
	sn.Release()
	sn.Release()
	if _, err := sn.WriteTo(&buf); !errors.Is(err, ErrInvalid) {
		t.Errorf("WriteTo after Release: %v, want ErrInvalid", err)
	}
	if got, want := dirNames(t, s.dir), []string{markerName, genName(2)}; !cmp.Equal(got, want) {
		t.Errorf("after release: directory holds %v, want %v", got, want)
	}
}

var restoreSteps = []restoreStep{stepDirCreated, stepLoaded, stepMarkerTemp, stepSwitched}

// restoreFixture returns a store at index 3 and a stream of another state
// at index 8, with their dumps. The store syncs its commits, so that a copy
// of its directory (a crash image) holds the old state whole: with NoSync,
// Pebble writes its WAL behind the commit, and an image would hold a prefix
// of the commits.
func restoreFixture(t *testing.T) (s *Store, stream8 []byte, old, restored state) {
	t.Helper()
	src := openStore(t, Options{NoSync: true})
	fill(t, src, 1, 8)
	stream8, restored = stream(t, src), dump(t, src)
	s = openStore(t, Options{})
	commit(t, s, 3, ops(put("old", "1"), result("old-tx", "r")))
	return s, stream8, dump(t, s), restored
}

// A crash at each step of RestoreSnapshot leaves the old state or the new
// one: a copy of the directory at each step (what a crash of the process
// leaves) opens with one of them, and without the other's leftovers.
func TestRestoreCrashAtEachStep(t *testing.T) {
	s, buf, old, restored := restoreFixture(t)
	images := map[restoreStep]string{}
	s.restoreHook = func(step restoreStep) error {
		images[step] = copyDir(t, s.dir)
		return nil
	}
	if err := s.RestoreSnapshot(bytes.NewReader(buf), 8); err != nil {
		t.Fatal(err)
	}
	for _, step := range restoreSteps {
		t.Run(step.String(), func(t *testing.T) {
			image, ok := images[step]
			if !ok {
				t.Fatalf("the hook did not run at step %v", step)
			}
			want, wantGen := old, genName(1)
			if step >= stepSwitched {
				want, wantGen = restored, genName(2)
			}
			c := openStore(t, Options{Dir: image, NoSync: true})
			if diff := cmp.Diff(want, dump(t, c)); diff != "" {
				t.Errorf("crash image (-want +got):\n%s", diff)
			}
			if got, want := dirNames(t, image), []string{markerName, wantGen}; !cmp.Equal(got, want) {
				t.Errorf("after Open the image holds %v, want %v", got, want)
			}
		})
	}
}

// A failure at each step before the commit point leaves the old state in
// use; a failure after it stops the store, and a reopen finds the new
// state.
func TestRestoreFailureAtEachStep(t *testing.T) {
	injected := errors.New("injected failure")
	for _, step := range restoreSteps {
		t.Run(step.String(), func(t *testing.T) {
			s, buf, old, restored := restoreFixture(t)
			s.restoreHook = func(at restoreStep) error {
				if at == step {
					return injected
				}
				return nil
			}
			err := s.RestoreSnapshot(bytes.NewReader(buf), 8)
			if !errors.Is(err, injected) {
				t.Fatalf("RestoreSnapshot: %v, want the injected failure", err)
			}
			s.restoreHook = nil
			if step < stepSwitched {
				if diff := cmp.Diff(old, dump(t, s)); diff != "" {
					t.Errorf("after the failure (-old +got):\n%s", diff)
				}
				if got, want := dirNames(t, s.dir), []string{markerName, genName(1)}; !cmp.Equal(got, want) {
					t.Errorf("directory holds %v, want %v", got, want)
				}
				commit(t, s, 4, ops(put("after", "1")))
				if err := s.RestoreSnapshot(bytes.NewReader(buf), 8); err != nil {
					t.Fatalf("second RestoreSnapshot: %v", err)
				}
				if diff := cmp.Diff(restored, dump(t, s)); diff != "" {
					t.Errorf("after a second restore (-want +got):\n%s", diff)
				}
				return
			}
			if _, _, err := s.Get(keyOf("old")); err == nil || !errors.Is(err, injected) {
				t.Errorf("Get on a store whose restore failed after the switch: %v, want the failure", err)
			}
			if err := s.Commit(s.NewBatch(), 9); !errors.Is(err, injected) {
				t.Errorf("Commit on a failed store: %v, want the failure", err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s2 := openStore(t, Options{Dir: s.dir, NoSync: true})
			if diff := cmp.Diff(restored, dump(t, s2)); diff != "" {
				t.Errorf("reopened (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRestoreStreamIsExact(t *testing.T) {
	a := openStore(t, Options{NoSync: true})
	fill(t, a, 1, 3)
	buf := stream(t, a)
	// With an io.ByteReader, RestoreSnapshot reads the stream and nothing
	// after it.
	r := bytes.NewReader(append(bytes.Clone(buf), "next"...))
	b := openStore(t, Options{NoSync: true})
	if err := b.RestoreSnapshot(r, 3); err != nil {
		t.Fatal(err)
	}
	if r.Len() != len("next") {
		t.Errorf("%d bytes left after the stream, want %d", r.Len(), len("next"))
	}
}

func TestStoreClosedOrFailedRejects(t *testing.T) {
	s, err := Open(Options{Dir: filepath.Join(t.TempDir(), "s"), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b := s.NewBatch()
	defer b.Close()
	for name, err := range map[string]error{
		"Put":             b.Put(keyOf("k"), nil),
		"Commit":          s.Commit(b, 1),
		"Sync":            s.Sync(),
		"RestoreSnapshot": s.RestoreSnapshot(bytes.NewReader(nil), 0),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if _, err := s.Snapshot(); !errors.Is(err, ErrClosed) {
		t.Errorf("Snapshot after Close: %v, want ErrClosed", err)
	}
	if _, err := os.Stat(s.dir); err != nil {
		t.Errorf("the directory of a closed store: %v", err)
	}
}

// Reads run while commits and restores switch the state under them (run
// with -race): each read sees one state or the other, and none fails.
func TestConcurrentReadsDuringRestore(t *testing.T) {
	src := openStore(t, Options{NoSync: true})
	fill(t, src, 1, 3)
	buf := stream(t, src)

	s := openStore(t, Options{NoSync: true})
	done := make(chan struct{})
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				if _, _, err := s.Get(keyOf("shared")); err != nil {
					errs <- err
					return
				}
				if _, err := s.Scan(nil, nil, 10); err != nil {
					errs <- err
					return
				}
				b := s.NewBatch()
				_, _, err := b.Get(keyOf("k003"))
				b.Close()
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range 5 {
		if err := s.RestoreSnapshot(bytes.NewReader(buf), 3); err != nil {
			t.Fatal(err)
		}
		fill(t, s, 4, uint64(4+i))
	}
	close(done)
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent read: %v", err)
		}
	}
}
