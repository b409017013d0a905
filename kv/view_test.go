package kv

import (
	"bytes"
	"errors"
	"testing"
)

// TestSettledView: a view is settled only after a commit of a batch marked
// settled, and no longer after a commit of one that is not, or after a
// restore; a view reads the state of its moment, whatever commits after.
func TestSettledView(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	commit := func(index uint64, value string, settled bool) {
		t.Helper()
		b := s.NewBatch()
		defer b.Close()
		if err := b.Put([]byte("k"), []byte(value)); err != nil {
			t.Fatal(err)
		}
		if settled {
			b.MarkSettled()
		}
		if err := s.Commit(b, index); err != nil {
			t.Fatal(err)
		}
	}
	settled := func() *View {
		t.Helper()
		v, ok, err := s.SettledView()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return nil
		}
		return v
	}
	if v := settled(); v != nil {
		t.Fatal("a new store's state is settled before any settled commit")
	}
	commit(1, "one", true)
	v := settled()
	if v == nil {
		t.Fatal("no settled view after a settled commit")
	}
	defer v.Release()
	commit(2, "two", false)
	if w := settled(); w != nil {
		w.Release()
		t.Fatal("a settled view after a commit that was not marked settled")
	}
	if got, found, err := v.Get([]byte("k")); err != nil || !found || !bytes.Equal(got, []byte("one")) {
		t.Fatalf("view of commit 1 after commit 2: %q, %v, %v; want one", got, found, err)
	}
	commit(3, "three", true)
	sn, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Release()
	var buf bytes.Buffer
	if _, err := sn.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if err := s.RestoreSnapshot(&buf, 3); err != nil {
		t.Fatal(err)
	}
	if w := settled(); w != nil {
		w.Release()
		t.Fatal("a settled view after a restore")
	}
	w, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release()
	if kvs, err := w.Scan(nil, nil, 10); err != nil || len(kvs) != 1 || string(kvs[0].Value) != "three" {
		t.Fatalf("view after the restore: %v, %v; want k=three", kvs, err)
	}
}

// TestViewRowCacheDuringCommit checks that a view taken while a commit is
// between Pebble and the row cache (Pebble holds the new rows, the cache
// the old) does not read through the cache: the batch of the commit went
// without the cache (another batch held it), so no slot it wrote was
// marked pending, and the cached row of "a" is the old one until the
// cache's update. Views before and after the commit read through it.
func TestViewRowCacheDuringCommit(t *testing.T) {
	s := openStore(t, Options{})
	commit(t, s, 1, ops(put("a", "1")))
	read := func(what, want string) {
		t.Helper()
		v, err := s.View()
		if err != nil {
			t.Fatal(err)
		}
		defer v.Release()
		for range 2 { // the first read may fill the slot for the second
			if got, found, err := v.Get(keyOf("a")); err != nil || !found || string(got) != want {
				t.Fatalf("%s: a = %q, %v, %v; want %s", what, got, found, err, want)
			}
		}
	}
	read("before the commit", "1")
	hits, _ := viewStats(s)
	if hits != 1 {
		t.Fatalf("view hits %d before the commit; want 1", hits)
	}
	holder := s.NewBatch() // holds the cache: the next batch goes without
	defer holder.Close()
	b := s.NewBatch()
	defer b.Close()
	if err := b.Put(keyOf("a"), valueOf("2")); err != nil {
		t.Fatal(err)
	}
	during := false
	s.commitHook = func() {
		during = true
		read("during the commit", "2")
	}
	if err := s.Commit(b, 2); err != nil {
		t.Fatal(err)
	}
	s.commitHook = nil
	if !during {
		t.Fatal("the commit hook did not run")
	}
	if h, _ := viewStats(s); h != hits {
		t.Fatalf("view hits %d after a view during the commit; want %d (none during it)", h, hits)
	}
	read("after the commit", "2")
	if h, _ := viewStats(s); h != hits+1 {
		t.Fatalf("view hits %d after the commit; want %d", h, hits+1)
	}
}

// TestPointView checks a point view: it reads its state while no commit
// comes, and fails with ErrViewMoved after one, unless a Scan took its
// snapshot before; taken during a commit, it is a View, valid after.
func TestPointView(t *testing.T) {
	s := openStore(t, Options{})
	long := string(bytes.Repeat([]byte("x"), rowCacheEntryMax)) // never cached
	commit(t, s, 1, ops(put("a", "1"), put("b", long+"1")))
	get := func(v *View, k, want string) {
		t.Helper()
		got, found, err := v.Get(keyOf(k))
		if err != nil || !found || string(got) != want {
			t.Fatalf("Get(%s) = %.8q, %v, %v; want %.8q", k, got, found, err, want)
		}
	}
	pv, err := s.PointView()
	if err != nil {
		t.Fatal(err)
	}
	defer pv.Release()
	if pv.ps != nil {
		t.Fatal("a point view took a snapshot")
	}
	for range 2 {
		get(pv, "a", "1")
		get(pv, "b", long+"1")
	}
	scanned, err := s.PointView()
	if err != nil {
		t.Fatal(err)
	}
	defer scanned.Release()
	if kvs, err := scanned.Scan(keyOf("a"), keyOf("c"), 10); err != nil || len(kvs) != 2 {
		t.Fatalf("Scan: %d rows, %v; want 2", len(kvs), err)
	}
	commit(t, s, 2, ops(put("a", "2"), put("b", long+"2")))
	for _, k := range []string{"a", "b"} {
		if got, _, err := pv.Get(keyOf(k)); !errors.Is(err, ErrViewMoved) {
			t.Fatalf("Get(%s) after a commit = %.8q, %v; want ErrViewMoved", k, got, err)
		}
	}
	if _, err := pv.Scan(keyOf("a"), keyOf("c"), 10); !errors.Is(err, ErrViewMoved) {
		t.Fatalf("Scan after a commit: %v; want ErrViewMoved", err)
	}
	get(scanned, "a", "1")
	get(scanned, "b", long+"1")

	var during *View
	s.commitHook = func() {
		if during, err = s.PointView(); err != nil {
			t.Error(err)
		}
	}
	commit(t, s, 3, ops(put("a", "3")))
	s.commitHook = nil
	defer during.Release()
	commit(t, s, 4, ops(put("a", "4")))
	get(during, "a", "3")
}

// TestViewDuringTokenZeroCommit: while a batch that went without the
// cache commits, the batch that holds the cache makes its iterator after
// Pebble's commit and before the cache's update, and fills a slot with a
// new row; a View taken before the commit must not read it.
func TestViewDuringTokenZeroCommit(t *testing.T) {
	s := openStore(t, Options{})
	commit(t, s, 1, ops(put("k1", "0"), put("k2", "0")))
	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Release()
	holder := s.NewBatch()
	defer holder.Close()
	b := s.NewBatch() // without the cache
	defer b.Close()
	for _, k := range []string{"k1", "k2"} {
		if err := b.Put(keyOf(k), valueOf("1")); err != nil {
			t.Fatal(err)
		}
	}
	s.commitHook = func() {
		if got, _, err := holder.Get(keyOf("k1")); err != nil || string(got) != "1" { // fills k1's slot
			t.Errorf("holder during the commit: k1 = %q, %v; want 1", got, err)
		}
		for _, k := range []string{"k1", "k2"} {
			if got, _, err := v.Get(keyOf(k)); err != nil || string(got) != "0" {
				t.Errorf("view of before the commit: %s = %q, %v; want 0", k, got, err)
			}
		}
	}
	if err := s.Commit(b, 2); err != nil {
		t.Fatal(err)
	}
	s.commitHook = nil
	for _, k := range []string{"k1", "k2"} {
		if got, _, err := v.Get(keyOf(k)); err != nil || string(got) != "0" {
			t.Errorf("view of before the commit, after it: %s = %q, %v; want 0", k, got, err)
		}
	}
}
