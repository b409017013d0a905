package kv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The aux namespace is separate from the user keys: the same bytes name
// different entries, and neither scan sees the other's.
func TestAuxSeparateFromData(t *testing.T) {
	s := openStore(t, Options{NoSync: true})
	commit(t, s, 1, ops(put("k", "data"), auxPut("k", "aux"), auxPut("k2", "aux2")))
	if v, ok, err := s.Get(keyOf("k")); err != nil || !ok || string(v) != "data" {
		t.Errorf("Get(k) = %q, %v, %v; want data", v, ok, err)
	}
	if v, ok, err := s.GetAux(keyOf("k")); err != nil || !ok || string(v) != "aux" {
		t.Errorf("GetAux(k) = %q, %v, %v; want aux", v, ok, err)
	}
	kvs, err := s.Scan(nil, nil, ScanLimitMax)
	if err != nil {
		t.Fatal(err)
	}
	if got := kvStrings(kvs); !cmp.Equal(got, []string{"k=data"}) {
		t.Errorf("user scan %v, want only k=data", got)
	}
	kvs, err = s.ScanAux(nil, nil, ScanLimitMax)
	if err != nil {
		t.Fatal(err)
	}
	if got := kvStrings(kvs); !cmp.Equal(got, []string{"k=aux", "k2=aux2"}) {
		t.Errorf("aux scan %v", got)
	}
	if _, ok, err := s.GetAux(keyOf("missing")); err != nil || ok {
		t.Errorf("GetAux(missing): found %v, %v", ok, err)
	}
}

// A batch reads its own aux writes, deletes and range deletes, over the
// committed state; they commit with the entry's index and survive a reopen.
func TestAuxBatchReadsOwnWrites(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "s")
	s, err := Open(Options{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, 1, ops(auxPut("a", "1"), auxPut("b", "2"), auxPut("c", "3"), auxPut("d", "4")))
	b := s.NewBatch()
	defer b.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	scanAll := func(start, end string, limit int) []string {
		t.Helper()
		kvs, err := b.ScanAux(keyOf(start), keyOf(end), limit)
		must(err)
		return kvStrings(kvs)
	}
	must(b.PutAux(keyOf("bb"), valueOf("22")))
	must(b.DeleteAux(keyOf("a")))
	if got, want := scanAll("", "", 10), []string{"b=2", "bb=22", "c=3", "d=4"}; !cmp.Equal(got, want) {
		t.Errorf("after put and delete: %v, want %v", got, want)
	}
	must(b.DeleteAuxRange(keyOf("b"), keyOf("c")))
	if got, want := scanAll("", "", 10), []string{"c=3", "d=4"}; !cmp.Equal(got, want) {
		t.Errorf("after range delete [b, c): %v, want %v", got, want)
	}
	if _, ok, err := b.GetAux(keyOf("bb")); err != nil || ok {
		t.Errorf("GetAux(bb) after the range delete: found %v, %v", ok, err)
	}
	must(b.PutAux(keyOf("b5"), valueOf("new"))) // a write after a range delete survives it
	if got, want := scanAll("b", "d", 1), []string{"b5=new"}; !cmp.Equal(got, want) {
		t.Errorf("scan [b, d) limit 1: %v, want %v", got, want)
	}
	// The store still sees the committed state.
	if v, ok, err := s.GetAux(keyOf("a")); err != nil || !ok || string(v) != "1" {
		t.Errorf("store GetAux(a) before commit = %q, %v, %v", v, ok, err)
	}
	must(s.Commit(b, 2))
	b.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, Options{Dir: dir, NoSync: true})
	if got, want := dump(t, s).Aux, []string{"b5=new", "c=3", "d=4"}; !cmp.Equal(got, want) {
		t.Errorf("after reopen: %v, want %v", got, want)
	}
	if s.AppliedIndex() != 2 {
		t.Errorf("AppliedIndex %d, want 2", s.AppliedIndex())
	}
}

// CommitAux commits aux writes without moving the applied index, and
// refuses a batch with user writes or results.
func TestCommitAux(t *testing.T) {
	s := openStore(t, Options{NoSync: true})
	commit(t, s, 5, ops(auxPut("s1", "x"), auxPut("s2", "y"), auxPut("s3", "z")))
	b := s.NewBatch()
	defer b.Close()
	if err := b.DeleteAuxRange(nil, keyOf("s3")); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitAux(b); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, s); got.Applied != 5 || !cmp.Equal(got.Aux, []string{"s3=z"}) {
		t.Errorf("after CommitAux: applied %d, aux %v; want 5, [s3=z]", got.Applied, got.Aux)
	}
	if err := s.CommitAux(b); !errors.Is(err, ErrInvalid) {
		t.Errorf("second CommitAux: %v, want ErrInvalid", err)
	}
	for name, write := range map[string]func(*Batch) error{
		"put":    func(b *Batch) error { return b.Put(keyOf("k"), nil) },
		"delete": func(b *Batch) error { return b.Delete(keyOf("k")) },
		"result": func(b *Batch) error { return b.SetResult("tx", nil) },
	} { //flexkv:unordered independent cases
		b := s.NewBatch()
		if err := b.PutAux(keyOf("ok"), nil); err != nil {
			t.Fatal(err)
		}
		if err := write(b); err != nil {
			t.Fatal(err)
		}
		if err := s.CommitAux(b); !errors.Is(err, ErrInvalid) {
			t.Errorf("CommitAux of a batch with a %s: %v, want ErrInvalid", name, err)
		}
		b.Close()
	}
	if _, ok, _ := s.GetAux(keyOf("ok")); ok {
		t.Error("a refused CommitAux wrote")
	}
}

func TestAuxInvalidArguments(t *testing.T) {
	s := openStore(t, Options{NoSync: true})
	longKey := bytes.Repeat([]byte{'k'}, AuxKeyMax)
	bigValue := bytes.Repeat([]byte{'v'}, AuxValueMax)
	b := s.NewBatch()
	defer b.Close()
	for _, c := range []struct {
		name string
		do   func() error
	}{
		{"put of an empty key", func() error { return b.PutAux(nil, nil) }},
		{"put of a key over AuxKeyMax", func() error { return b.PutAux(append(longKey, 'k'), nil) }},
		{"put of a value over AuxValueMax", func() error { return b.PutAux(keyOf("k"), append(bigValue, 'v')) }},
		{"get of an empty key", func() error { _, _, err := b.GetAux(nil); return err }},
		{"delete of an empty key", func() error { return b.DeleteAux(nil) }},
		{"range start after end", func() error { return b.DeleteAuxRange(keyOf("b"), keyOf("a")) }},
		{"range end over AuxKeyMax", func() error { return b.DeleteAuxRange(nil, append(longKey, 'k')) }},
		{"scan limit 0", func() error { _, err := b.ScanAux(nil, nil, 0); return err }},
		{"scan limit over ScanLimitMax", func() error { _, err := b.ScanAux(nil, nil, ScanLimitMax+1); return err }},
		{"store get of an empty key", func() error { _, _, err := s.GetAux(nil); return err }},
		{"store scan start after end", func() error { _, err := s.ScanAux(keyOf("b"), keyOf("a"), 1); return err }},
	} {
		if err := c.do(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, err)
		}
	}
	if err := b.PutAux(longKey, bigValue); err != nil {
		t.Errorf("PutAux of AuxKeyMax and AuxValueMax bytes: %v", err)
	}
	if err := s.Commit(b, 1); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, s).Aux; len(got) != 1 || !strings.HasPrefix(got[0], string(longKey)+"=") {
		t.Errorf("after commit: %d aux entries, want the largest one alone", len(got))
	}
}

// Aux records travel in snapshots: a restored store holds the same aux
// entries, writes the same stream, and a stream with aux keys out of order
// is refused.
func TestSnapshotCarriesAux(t *testing.T) {
	a := openStore(t, Options{NoSync: true})
	commit(t, a, 1, ops(put("k", "v"), auxPut("q\x00\x01", "head"), auxPut("q\x00\x02", ""), auxPut("v/1", "yes")))
	commit(t, a, 2, ops(auxDel("q\x00\x01"), result("tx", "r")))
	want := dump(t, a)
	if !cmp.Equal(want.Aux, []string{"q\x00\x02=", "v/1=yes"}) {
		t.Fatalf("source aux %q", want.Aux)
	}
	buf := stream(t, a)
	b := openStore(t, Options{NoSync: true})
	commit(t, b, 9, ops(auxPut("stale", "gone")))
	if err := b.RestoreSnapshot(bytes.NewReader(buf), 2); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, dump(t, b)); diff != "" {
		t.Errorf("restored (-want +got):\n%s", diff)
	}
	if !bytes.Equal(stream(t, b), buf) {
		t.Error("the restored store writes another stream")
	}

	// Swap the two aux records (both have 1-byte value lengths, so only
	// their order changes), then fix the checksum: refused as unordered.
	rec1 := []byte("\x03q\x00\x02\x00")
	rec2 := []byte("\x03v/1\x03yes")
	i := bytes.Index(buf, append(append([]byte{}, rec1...), rec2...))
	if i < 0 {
		t.Fatal("aux records not found in the stream")
	}
	bad := bytes.Clone(buf[:len(buf)-4])
	copy(bad[i:], rec2)
	copy(bad[i+len(rec2):], rec1)
	bad = appendCRC(bad)
	if err := b.RestoreSnapshot(bytes.NewReader(bad), 2); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "aux key") {
		t.Errorf("unordered aux keys: %v, want ErrCorrupt about an aux key", err)
	}
}

// appendCRC appends the stream checksum of b.
func appendCRC(b []byte) []byte {
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}
