package kv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/flexkv/flexkv/partition"
)

// Pebble starts goroutines per open store: a leak means a store, batch or
// snapshot left open.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openStore(t testing.TB, opts Options) *Store {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	s, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// op is one operation of a test commit.
type op struct {
	put, del, result string
	auxPut, auxDel   string
	value            string
}

func put(k, v string) op      { return op{put: k, value: v} }
func del(k string) op         { return op{del: k} }
func result(id, v string) op  { return op{result: id, value: v} }
func auxPut(k, v string) op   { return op{auxPut: k, value: v} }
func auxDel(k string) op      { return op{auxDel: k} }
func ops(o ...op) []op        { return o }
func keyOf(s string) []byte   { return []byte(s) }
func valueOf(s string) []byte { return []byte(s) }

// commit applies ops in one batch committed at index.
func commit(t testing.TB, s *Store, index uint64, o []op) {
	t.Helper()
	b := s.NewBatch()
	defer b.Close()
	for _, x := range o {
		var err error
		switch {
		case x.put != "":
			err = b.Put(keyOf(x.put), valueOf(x.value))
		case x.del != "":
			err = b.Delete(keyOf(x.del))
		case x.result != "":
			err = b.SetResult(x.result, valueOf(x.value))
		case x.auxPut != "":
			err = b.PutAux(keyOf(x.auxPut), valueOf(x.value))
		case x.auxDel != "":
			err = b.DeleteAux(keyOf(x.auxDel))
		}
		if err != nil {
			t.Fatalf("index %d: %+v: %v", index, x, err)
		}
	}
	if err := s.Commit(b, index); err != nil {
		t.Fatalf("Commit(%d): %v", index, err)
	}
}

// state is everything a store holds, read through its internals.
type state struct {
	Applied         uint64
	Data            []string // "key=value"
	ResultFirst     uint64
	ResultNext      uint64
	Results         []string // "seq:id=result", by sequence
	ResultsByID     int      // entries under the result prefix
	Aux             []string // "key=value"
	UnknownPrefixes []string
}

func dump(t testing.TB, s *Store) state {
	t.Helper()
	s.mu.RLock()
	defer s.mu.RUnlock()
	db := s.h.db
	var st state
	applied, first, next, err := readMeta(db)
	if err != nil {
		t.Fatalf("readMeta: %v", err)
	}
	if applied != s.AppliedIndex() {
		t.Fatalf("stored applied index %d, AppliedIndex() %d", applied, s.AppliedIndex())
	}
	st.Applied, st.ResultFirst, st.ResultNext = applied, first, next
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		switch k[0] {
		case prefixData:
			st.Data = append(st.Data, fmt.Sprintf("%s=%s", k[1:], v))
		case prefixMeta:
		case prefixResult:
			st.ResultsByID++
		case prefixAux:
			st.Aux = append(st.Aux, fmt.Sprintf("%s=%s", k[1:], v))
		case prefixResultSeq:
			res, ok, err := get(db, resultKey(string(v)))
			if err != nil || !ok {
				t.Fatalf("result %q of sequence key %x: found %v, %v", v, k, ok, err)
			}
			st.Results = append(st.Results, fmt.Sprintf("%d:%s=%s", binary.BigEndian.Uint64(k[1:]), v, res))
		default:
			st.UnknownPrefixes = append(st.UnknownPrefixes, fmt.Sprintf("%x", k))
		}
	}
	return st
}

func TestRoundTrip(t *testing.T) {
	s := openStore(t, Options{NoSync: true})
	if got := s.AppliedIndex(); got != 0 {
		t.Fatalf("fresh store: AppliedIndex %d, want 0", got)
	}
	commit(t, s, 3, ops(put("a", "1"), put("b", "2"), put("empty", ""), result("tx1", "ok")))
	commit(t, s, 7, ops(put("a", "10"), del("b"), del("never")))

	for _, c := range []struct {
		key   string
		value string
		found bool
	}{{"a", "10", true}, {"b", "", false}, {"empty", "", true}, {"missing", "", false}} {
		v, found, err := s.Get(keyOf(c.key))
		if err != nil || found != c.found || string(v) != c.value {
			t.Errorf("Get(%q) = %q, %v, %v; want %q, %v, nil", c.key, v, found, err, c.value, c.found)
		}
	}
	if v, found, err := s.Result("tx1"); err != nil || !found || string(v) != "ok" {
		t.Errorf(`Result("tx1") = %q, %v, %v; want "ok", true, nil`, v, found, err)
	}
	if _, found, err := s.Result("tx2"); err != nil || found {
		t.Errorf(`Result("tx2") found %v, %v; want false, nil`, found, err)
	}
	if got := s.AppliedIndex(); got != 7 {
		t.Errorf("AppliedIndex %d, want 7", got)
	}
}

func TestBatchReadsOwnWrites(t *testing.T) {
	s := openStore(t, Options{NoSync: true})
	commit(t, s, 1, ops(put("a", "1"), put("c", "3"), result("tx1", "r1")))

	b := s.NewBatch()
	defer b.Close()
	for _, err := range []error{b.Put(keyOf("b"), valueOf("2")), b.Delete(keyOf("a")), b.Put(keyOf("c"), valueOf("33")), b.SetResult("tx2", valueOf("r2"))} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, found, err := b.Get(keyOf("a")); err != nil || found {
		t.Errorf("batch Get(a) after its Delete: found %v, %v; want false", found, err)
	}
	if v, found, err := b.Get(keyOf("b")); err != nil || !found || string(v) != "2" {
		t.Errorf("batch Get(b) = %q, %v, %v; want 2", v, found, err)
	}
	kvs, err := b.Scan(nil, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := kvStrings(kvs), []string{"b=2", "c=33"}; !cmp.Equal(got, want) {
		t.Errorf("batch Scan = %v, want %v", got, want)
	}
	for id, want := range map[string]string{"tx1": "r1", "tx2": "r2"} {
		if v, found, err := b.Result(id); err != nil || !found || string(v) != want {
			t.Errorf("batch Result(%s) = %q, %v, %v; want %q", id, v, found, err, want)
		}
	}
	// The committed state does not see the batch.
	if v, found, err := s.Get(keyOf("a")); err != nil || !found || string(v) != "1" {
		t.Errorf("store Get(a) = %q, %v, %v; want 1 (uncommitted delete)", v, found, err)
	}
	if _, found, _ := s.Result("tx2"); found {
		t.Error("store Result(tx2) found before the commit")
	}
	b.Close()
	b.Close() // a second Close does nothing
	if err := b.Put(keyOf("x"), nil); err == nil {
		t.Error("Put on a closed batch succeeded")
	}
	if got, want := dump(t, s).Data, []string{"a=1", "c=3"}; !cmp.Equal(got, want) {
		t.Errorf("after closing the batch uncommitted: data %v, want %v", got, want)
	}
}

// TestBatchReadsInterleaveWrites: each read sees every write before it in
// the batch, however reads and writes alternate (the batch's reads share
// one iterator, refreshed after writes).
func TestBatchReadsInterleaveWrites(t *testing.T) {
	s := openStore(t, Options{NoSync: true})
	commit(t, s, 1, ops(put("a", "1"), put("c", "3")))
	b := s.NewBatch()
	defer b.Close()
	want := func(key, value string) {
		t.Helper()
		v, found, err := b.Get(keyOf(key))
		switch {
		case err != nil:
			t.Fatalf("Get(%s): %v", key, err)
		case value == "" && found:
			t.Fatalf("Get(%s) = %q, want missing", key, v)
		case value != "" && (!found || string(v) != value):
			t.Fatalf("Get(%s) = %q, %v; want %q", key, v, found, value)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	want("a", "1")
	want("b", "")
	must(b.Put(keyOf("a"), valueOf("2")))
	want("a", "2")
	want("c", "3")
	must(b.Delete(keyOf("a")))
	want("a", "")
	must(b.Put(keyOf("b"), valueOf("x")))
	want("b", "x")
	must(b.Put(keyOf("a"), valueOf("4")))
	want("a", "4")
	if _, found, err := b.Result("tx9"); err != nil || found {
		t.Fatalf("Result(tx9) before SetResult: %v, %v", found, err)
	}
	must(b.SetResult("tx9", valueOf("r")))
	if v, found, err := b.Result("tx9"); err != nil || !found || string(v) != "r" {
		t.Fatalf("Result(tx9) = %q, %v, %v; want r", v, found, err)
	}
	if err := b.SetResult("tx9", valueOf("r")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("second SetResult(tx9): %v, want ErrInvalid", err)
	}
	// A value returned is a copy: a later write does not change it.
	v, _, _ := b.Get(keyOf("a"))
	must(b.Put(keyOf("a"), valueOf("5")))
	if string(v) != "4" {
		t.Fatalf("value read before a write changed to %q", v)
	}
	must(s.Commit(b, 2))
	if got, want := dump(t, s).Data, []string{"a=5", "b=x", "c=3"}; !cmp.Equal(got, want) {
		t.Errorf("after the commit: data %v, want %v", got, want)
	}
}

func kvStrings(kvs []KV) []string {
	var out []string
	for _, kv := range kvs {
		out = append(out, fmt.Sprintf("%s=%s", kv.Key, kv.Value))
	}
	return out
}

func TestCommitSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, 4, ops(put("a", "1"), result("tx1", "r1")))
	commit(t, s, 9, ops(put("b", "2"), del("a"), result("tx2", "r2")))
	want := dump(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
	if _, _, err := s.Get(keyOf("b")); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}
	s2 := openStore(t, Options{Dir: dir, NoSync: true})
	if diff := cmp.Diff(want, dump(t, s2)); diff != "" {
		t.Errorf("after reopen (-want +got):\n%s", diff)
	}
	if want.Applied != 9 {
		t.Errorf("applied %d, want 9", want.Applied)
	}
	commit(t, s2, 10, ops(result("tx3", "r3")))
	if got := dump(t, s2).Results; len(got) != 3 || !strings.HasPrefix(got[2], "2:tx3=") {
		t.Errorf("results after reopen and commit: %v, want tx3 at sequence 2", got)
	}
}

// A copy of the directory taken while the store is open is what a crash of
// the process leaves: with NoSync=false every returned Commit is in it.
func TestSyncedCommitInCrashImage(t *testing.T) {
	s := openStore(t, Options{})
	commit(t, s, 1, ops(put("a", "1")))
	commit(t, s, 2, ops(put("b", "2"), result("tx", "r")))
	want := dump(t, s)
	image := copyDir(t, s.dir)
	s2 := openStore(t, Options{Dir: image})
	if diff := cmp.Diff(want, dump(t, s2)); diff != "" {
		t.Errorf("crash image (-want +got):\n%s", diff)
	}
}

// copyDir copies a store's directory tree to a new temporary directory.
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, in)
		return errors.Join(err, out.Close())
	})
	if err != nil {
		t.Fatalf("copying %s: %v", src, err)
	}
	return dst
}

func TestCommitIndexMustIncrease(t *testing.T) {
	s := openStore(t, Options{NoSync: true})
	commit(t, s, 5, ops(put("a", "1")))
	want := dump(t, s)

	b := s.NewBatch()
	defer b.Close()
	if err := b.Put(keyOf("a"), valueOf("2")); err != nil {
		t.Fatal(err)
	}
	for _, index := range []uint64{0, 3, 5} {
		if err := s.Commit(b, index); !errors.Is(err, ErrInvalid) {
			t.Errorf("Commit at %d after 5: %v, want ErrInvalid", index, err)
		}
	}
	if diff := cmp.Diff(want, dump(t, s)); diff != "" {
		t.Errorf("rejected commits changed the state (-want +got):\n%s", diff)
	}
	// A rejected Commit leaves the batch usable.
	if err := s.Commit(b, 6); err != nil {
		t.Fatalf("Commit(6) after rejections: %v", err)
	}
	if err := s.Commit(b, 7); !errors.Is(err, ErrInvalid) {
		t.Errorf("second Commit of one batch: %v, want ErrInvalid", err)
	}
	if err := b.Put(keyOf("x"), nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("Put after Commit: %v, want ErrInvalid", err)
	}
	other := openStore(t, Options{NoSync: true})
	ob := other.NewBatch()
	defer ob.Close()
	if err := s.Commit(ob, 8); !errors.Is(err, ErrInvalid) {
		t.Errorf("Commit of another store's batch: %v, want ErrInvalid", err)
	}
	if got := s.AppliedIndex(); got != 6 {
		t.Errorf("AppliedIndex %d, want 6", got)
	}
}

func TestResultsBoundedAndDeterministic(t *testing.T) {
	feed := [][]op{
		ops(result("t1", "r1")),
		ops(put("k", "v"), result("t2", "r2"), result("t3", "r3")),
		ops(put("k", "w")), // no results: nothing evicted
		ops(result("t4", "r4")),
		ops(result("t5", "r5"), result("t6", "r6"), result("t7", "r7"), result("t8", "r8")), // more than ResultsMax in one batch
	}
	a := openStore(t, Options{NoSync: true, ResultsMax: 3})
	b := openStore(t, Options{NoSync: true, ResultsMax: 3})
	for i, o := range feed {
		commit(t, a, uint64(i+1), o)
		commit(t, b, uint64(i+1), o)
		if i == 1 {
			if got, want := dump(t, a).Results, []string{"0:t1=r1", "1:t2=r2", "2:t3=r3"}; !cmp.Equal(got, want) {
				t.Errorf("at the bound: results %v, want %v", got, want)
			}
		}
		if i == 3 {
			if got, want := dump(t, a).Results, []string{"1:t2=r2", "2:t3=r3", "3:t4=r4"}; !cmp.Equal(got, want) {
				t.Errorf("one over the bound: results %v, want %v (t1 evicted)", got, want)
			}
		}
	}
	da := dump(t, a)
	if got, want := da.Results, []string{"5:t6=r6", "6:t7=r7", "7:t8=r8"}; !cmp.Equal(got, want) {
		t.Errorf("results %v, want %v", got, want)
	}
	if da.ResultsByID != 3 || da.ResultFirst != 5 || da.ResultNext != 8 {
		t.Errorf("result entries %d, sequences [%d, %d); want 3, [5, 8)", da.ResultsByID, da.ResultFirst, da.ResultNext)
	}
	for _, id := range []string{"t1", "t5"} {
		if _, found, err := a.Result(id); err != nil || found {
			t.Errorf("Result(%s) after eviction: found %v, %v", id, found, err)
		}
	}
	if diff := cmp.Diff(da, dump(t, b)); diff != "" {
		t.Errorf("two stores fed the same commits differ (-a +b):\n%s", diff)
	}
	if !bytes.Equal(stream(t, a), stream(t, b)) {
		t.Error("two stores fed the same commits write different snapshot streams")
	}

	// A result is set once while it is kept, and again after its eviction.
	batch := a.NewBatch()
	defer batch.Close()
	if err := batch.SetResult("t8", nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("SetResult of a kept result: %v, want ErrInvalid", err)
	}
	if err := batch.SetResult("t9", nil); err != nil {
		t.Fatal(err)
	}
	if err := batch.SetResult("t9", nil); !errors.Is(err, ErrInvalid) {
		t.Errorf("SetResult twice in a batch: %v, want ErrInvalid", err)
	}
	if err := batch.SetResult("t1", valueOf("again")); err != nil {
		t.Errorf("SetResult of an evicted result: %v", err)
	}
}

// A store reopened with a smaller ResultsMax drops the excess at its next
// commit.
func TestResultsMaxLowered(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Options{Dir: dir, NoSync: true, ResultsMax: 4})
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, 1, ops(result("a", ""), result("b", ""), result("c", ""), result("d", "")))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, Options{Dir: dir, NoSync: true, ResultsMax: 2})
	commit(t, s, 2, ops(put("k", "v")))
	if got, want := dump(t, s).Results, []string{"2:c=", "3:d="}; !cmp.Equal(got, want) {
		t.Errorf("results %v, want %v", got, want)
	}
}

func TestScanBounds(t *testing.T) {
	s := openStore(t, Options{NoSync: true})
	keys := []string{"\x00", "a", "a\x00", "b", "ba", "c", "\xff\xff"}
	var o []op
	for _, k := range keys {
		o = append(o, put(k, "v"+k))
	}
	o = append(o, result("tx", "r")) // internal keys after the data
	commit(t, s, 1, o)
	keysOf := func(kvs []KV) []string {
		out := []string{}
		for _, kv := range kvs {
			out = append(out, string(kv.Key))
			if string(kv.Value) != "v"+string(kv.Key) {
				t.Errorf("key %q: value %q", kv.Key, kv.Value)
			}
		}
		return out
	}
	for _, c := range []struct {
		name       string
		start, end string
		limit      int
		want       []string
	}{
		{"everything", "", "", ScanLimitMax, keys},
		{"half open", "a", "c", 10, []string{"a", "a\x00", "b", "ba"}},
		{"end excluded", "b", "ba", 10, []string{"b"}},
		{"limit", "a", "", 2, []string{"a", "a\x00"}},
		{"limit 1", "", "", 1, []string{"\x00"}},
		{"start after every key", "\xff\xff\x00", "", 10, []string{}},
		{"start equals end", "b", "b", 10, []string{}},
		{"from the top key", "\xff\xff", "", 10, []string{"\xff\xff"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			kvs, err := s.Scan(keyOf(c.start), keyOf(c.end), c.limit)
			if err != nil {
				t.Fatal(err)
			}
			if got := keysOf(kvs); !cmp.Equal(got, c.want) {
				t.Errorf("Scan(%q, %q, %d) = %q, want %q", c.start, c.end, c.limit, got, c.want)
			}
		})
	}
	for _, c := range []struct {
		name       string
		start, end []byte
		limit      int
	}{
		{"limit 0", nil, nil, 0},
		{"negative limit", nil, nil, -1},
		{"limit over ScanLimitMax", nil, nil, ScanLimitMax + 1},
		{"start after end", keyOf("c"), keyOf("a"), 10},
		{"long start", bytes.Repeat([]byte{'a'}, KeyMax+1), nil, 10},
		{"long end", nil, bytes.Repeat([]byte{'a'}, KeyMax+1), 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := s.Scan(c.start, c.end, c.limit); !errors.Is(err, ErrInvalid) {
				t.Errorf("Scan: %v, want ErrInvalid", err)
			}
			b := s.NewBatch()
			defer b.Close()
			if _, err := b.Scan(c.start, c.end, c.limit); !errors.Is(err, ErrInvalid) {
				t.Errorf("batch Scan: %v, want ErrInvalid", err)
			}
		})
	}
}

func TestInvalidSizesRejected(t *testing.T) {
	s := openStore(t, Options{NoSync: true})
	longKey := bytes.Repeat([]byte{'k'}, KeyMax)
	bigValue := bytes.Repeat([]byte{'v'}, ValueMax)
	longID := strings.Repeat("i", ResultIDMax)
	b := s.NewBatch()
	defer b.Close()
	for _, c := range []struct {
		name string
		do   func() error
	}{
		{"empty key", func() error { return b.Put(nil, valueOf("v")) }},
		{"key over KeyMax", func() error { return b.Put(append(longKey, 'k'), valueOf("v")) }},
		{"value over ValueMax", func() error { return b.Put(keyOf("k"), append(bigValue, 'v')) }},
		{"delete of a key over KeyMax", func() error { return b.Delete(append(longKey, 'k')) }},
		{"empty result id", func() error { return b.SetResult("", nil) }},
		{"result id over ResultIDMax", func() error { return b.SetResult(longID+"i", nil) }},
		{"result over ValueMax", func() error { return b.SetResult("tx", append(bigValue, 'r')) }},
		{"get of an empty key", func() error { _, _, err := b.Get(nil); return err }},
		{"store get of a key over KeyMax", func() error { _, _, err := s.Get(append(longKey, 'k')); return err }},
		{"store result of an empty id", func() error { _, _, err := s.Result(""); return err }},
	} {
		if err := c.do(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, err)
		}
	}
	if err := b.Put(append(longKey, 'k'), nil); !errors.Is(err, partition.ErrInvalidKey) {
		t.Errorf("key over KeyMax: %v, want it to wrap partition.ErrInvalidKey too", err)
	}
	// The largest sizes are accepted, and the rejected calls left nothing.
	if err := b.Put(longKey, bigValue); err != nil {
		t.Errorf("Put of KeyMax and ValueMax bytes: %v", err)
	}
	if err := b.SetResult(longID, bigValue); err != nil {
		t.Errorf("SetResult of ResultIDMax and ValueMax bytes: %v", err)
	}
	if err := s.Commit(b, 1); err != nil {
		t.Fatal(err)
	}
	st := dump(t, s)
	if len(st.Data) != 1 || len(st.Results) != 1 || st.ResultsByID != 1 {
		t.Errorf("after commit: %d entries, %d results (%d by id); want 1, 1, 1", len(st.Data), len(st.Results), st.ResultsByID)
	}
}

func TestOpenRejects(t *testing.T) {
	for _, c := range []struct {
		name string
		opts Options
	}{
		{"no directory", Options{}},
		{"negative ResultsMax", Options{Dir: t.TempDir(), ResultsMax: -1}},
	} {
		if _, err := Open(c.opts); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, err)
		}
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, markerName), []byte("db-x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{Dir: dir}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("bad marker: %v, want ErrCorrupt", err)
	}
}

// A directory without a marker holds nothing committed: Open starts afresh
// and removes generation directories a crash left, and nothing else.
func TestOpenWithoutMarker(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{genName(1), genName(2), "keep-me"} {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := openStore(t, Options{Dir: dir})
	if got := s.AppliedIndex(); got != 0 {
		t.Errorf("AppliedIndex %d, want 0", got)
	}
	if got, want := dirNames(t, dir), []string{markerName, genName(1), "keep-me"}; !cmp.Equal(got, want) {
		t.Errorf("directory holds %v, want %v", got, want)
	}
}

func dirNames(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestGenNames(t *testing.T) {
	for _, c := range []struct {
		name string
		gen  uint64
		ok   bool
	}{
		{"db-000001", 1, true}, {"db-1234567", 1234567, true}, {"db-000000", 0, false},
		{"db-1", 0, false}, {"db-0000001", 0, false}, {"db-00000x", 0, false}, {"ACTIVE", 0, false},
	} {
		if gen, ok := parseGen(c.name); gen != c.gen || ok != c.ok {
			t.Errorf("parseGen(%q) = %d, %v; want %d, %v", c.name, gen, ok, c.gen, c.ok)
		}
	}
}

// The reader interface covers the three Pebble readers the store uses.
var (
	_ reader = (*pebble.DB)(nil)
	_ reader = (*pebble.Batch)(nil)
	_ reader = (*pebble.Snapshot)(nil)
)

// TestScanBytes: ScanBytes, of the store and of a view, and ScanChunk,
// which also names where a copy goes on when the row limit stopped it
// (chunkNext).
func TestScanBytes(t *testing.T) {
	s := openStore(t, Options{NoSync: true})
	commit(t, s, 1, ops(put("a", "12345"), put("b", "123456789"), put("c", "1"), put("d", "1")))
	for _, c := range []struct {
		name                      string
		start                     string
		limit, bytes              int
		wantKeys, next, chunkNext string
	}{
		{"fits", "", 10, 100, "abcd", "", ""},
		{"exact", "", 10, 6 + 10 + 2 + 2, "abcd", "", ""},
		{"cut before b", "", 10, 6 + 9, "a", "b", "b"},
		{"cut before d", "", 10, 6 + 10 + 2 + 1, "abc", "d", "d"},
		{"first alone, larger than the bound", "b", 10, 1, "b", "c", "c"},
		{"limit first", "", 2, 100, "ab", "", "c"},
		{"limit at the end", "c", 2, 100, "cd", "", ""},
		{"limit and bytes together", "", 1, 6, "a", "", "b"},
	} {
		t.Run(c.name, func(t *testing.T) {
			// The store and a view of it answer alike.
			v, err := s.View()
			if err != nil {
				t.Fatal(err)
			}
			defer v.Release()
			for _, scan := range []func([]byte, []byte, int, int) ([]KV, []byte, error){s.ScanBytes, v.ScanBytes} {
				kvs, next, err := scan(keyOf(c.start), nil, c.limit, c.bytes)
				if err != nil {
					t.Fatal(err)
				}
				got := ""
				for _, kv := range kvs {
					got += string(kv.Key)
				}
				if got != c.wantKeys || string(next) != c.next {
					t.Errorf("ScanBytes(%q, limit %d, bytes %d) = keys %q next %q, want %q next %q", c.start, c.limit, c.bytes, got, next, c.wantKeys, c.next)
				}
			}
			kvs, next, err := s.ScanChunk(keyOf(c.start), nil, c.limit, c.bytes)
			got := ""
			for _, kv := range kvs {
				got += string(kv.Key)
			}
			if err != nil || got != c.wantKeys || string(next) != c.chunkNext {
				t.Errorf("ScanChunk(%q, limit %d, bytes %d) = keys %q next %q (%v), want %q next %q", c.start, c.limit, c.bytes, got, next, err, c.wantKeys, c.chunkNext)
			}
		})
	}
	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	defer v.Release()
	if _, _, err := s.ScanBytes(nil, nil, 1, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("ScanBytes with bound 0 = %v, want ErrInvalid", err)
	}
	if _, _, err := v.ScanBytes(nil, nil, 1, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("View.ScanBytes with bound 0 = %v, want ErrInvalid", err)
	}
}

// TestScanEntriesApart: a scan's entries share one buffer, yet each key and
// value is the caller's alone: appending to one, or writing into it, leaves
// every other entry as it was.
func TestScanEntriesApart(t *testing.T) {
	s := openStore(t, Options{NoSync: true})
	commit(t, s, 1, ops(put("a", "1"), put("b", ""), put("c", "333")))
	b := s.NewBatch()
	defer b.Close()
	for name, scanned := range map[string]func() ([]KV, error){
		"store": func() ([]KV, error) { return s.Scan(nil, nil, 10) },
		"batch": func() ([]KV, error) { return b.Scan(nil, nil, 10) },
	} {
		kvs, err := scanned()
		if err != nil {
			t.Fatal(err)
		}
		if len(kvs) != 3 {
			t.Fatalf("%s: %d entries, want 3", name, len(kvs))
		}
		for _, kv := range kvs {
			kv.Key = append(kv.Key, 'x', 'x', 'x', 'x')
			kv.Value = append(kv.Value, 'y', 'y', 'y', 'y')
		}
		kvs[2].Value[0] = '9'
		got := ""
		for _, kv := range kvs {
			got += string(kv.Key) + "=" + string(kv.Value) + ";"
		}
		if want := "a=1;b=;c=933;"; got != want {
			t.Errorf("%s: entries after appends to each = %q, want %q", name, got, want)
		}
	}
	if v, _, err := b.Get([]byte("c")); err != nil || string(v) != "333" {
		t.Errorf("c after writing into a scanned value = %q, %v; want the stored 333", v, err)
	}
}
