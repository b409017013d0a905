package kv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzRestore feeds RestoreSnapshot arbitrary streams: it rejects what is
// not a snapshot with ErrCorrupt and leaves the state as it was, never
// panics, and what it accepts it writes back byte for byte.
func FuzzRestore(f *testing.F) {
	src := openStore(f, Options{NoSync: true, ResultsMax: 2})
	f.Add(stream(f, src))
	commit(f, src, 1, ops(put("a", "1"), put("b", ""), result("t1", "r1")))
	f.Add(stream(f, src))
	commit(f, src, 2, ops(del("a"), result("t2", ""), result("t3", "r3"), auxPut("q1", "m"), auxPut("v", "")))
	f.Add(stream(f, src))

	s := openStore(f, Options{NoSync: true, ResultsMax: 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		// Restore at the index the stream names, so that valid streams get
		// through the index check.
		var index uint64
		if len(data) >= len(snapshotMagic)+8 {
			index = binary.BigEndian.Uint64(data[len(snapshotMagic):])
		}
		before := stream(t, s)
		r := bytes.NewReader(data)
		err := s.RestoreSnapshot(r, index)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("RestoreSnapshot: %v, want ErrCorrupt", err)
			}
			if after := stream(t, s); !bytes.Equal(before, after) {
				t.Fatal("a rejected stream changed the state")
			}
			return
		}
		consumed := data[:len(data)-r.Len()]
		if got := stream(t, s); !bytes.Equal(got, consumed) {
			t.Fatalf("restored %x, writes back %x", consumed, got)
		}
		if s.AppliedIndex() != index {
			t.Fatalf("AppliedIndex %d, want %d", s.AppliedIndex(), index)
		}
	})
}
