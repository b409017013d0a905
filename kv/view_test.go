package kv

import (
	"bytes"
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
