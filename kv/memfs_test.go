package kv

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestStoreOnMemFS: a store lives on any vfs.FS; on a crashable one, a crash
// keeps what Sync made durable and drops the commits after it (the raft log
// replays those), and snapshots stream between two in-memory stores.
func TestStoreOnMemFS(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s, err := Open(Options{Dir: "/r1", NoSync: true, FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	commit := func(index uint64, key, value string) {
		t.Helper()
		b := s.NewBatch()
		defer b.Close()
		if err := b.Put([]byte(key), []byte(value)); err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(b, index); err != nil {
			t.Fatal(err)
		}
	}
	commit(1, "a", "1")
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	commit(2, "b", "2")

	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	r, err := Open(Options{Dir: "/r1", NoSync: true, FS: crashed})
	if err != nil {
		t.Fatalf("reopen after a crash: %v", err)
	}
	defer r.Close()
	if got := r.AppliedIndex(); got != 1 {
		t.Errorf("applied index after the crash %d, want 1 (the last synced commit)", got)
	}
	if v, ok, err := r.Get([]byte("a")); err != nil || !ok || string(v) != "1" {
		t.Errorf("synced key a: %q %v %v", v, ok, err)
	}
	if _, ok, err := r.Get([]byte("b")); err != nil || ok {
		t.Errorf("unsynced key b survived the crash (%v, %v)", ok, err)
	}

	buf := bytes.NewBuffer(stream(t, s))
	other, err := Open(Options{Dir: "/r2", NoSync: true, FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.RestoreSnapshot(buf, 2); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := other.Get([]byte("b")); err != nil || !ok || string(v) != "2" {
		t.Errorf("key b after the restore: %q %v %v", v, ok, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestPebbleErrorsLogged: Pebble's errors reach the store's logger, its
// informational lines do not, and a fatal one is logged before the panic.
func TestPebbleErrorsLogged(t *testing.T) {
	var buf bytes.Buffer
	l := pebbleLogger{slog.New(slog.NewTextHandler(&buf, nil))}
	l.Infof("flushed %d tables", 3)
	l.Errorf("background compaction: %s", "disk full")
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Fatalf did not panic")
			}
		}()
		l.Fatalf("corrupt manifest %q", "MANIFEST-1")
	}()
	out := buf.String()
	for _, want := range []string{"pebble: background compaction: disk full", `kv: pebble: corrupt manifest \"MANIFEST-1\"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log %q lacks %q", out, want)
		}
	}
	if strings.Contains(out, "flushed") {
		t.Errorf("an informational line was logged: %q", out)
	}
}
