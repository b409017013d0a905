package raftstore

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"
)

func TestLogEncodingGolden(t *testing.T) {
	// The encoding is on disk: a change to it must be deliberate (and come
	// with a new version byte), so the bytes are pinned here.
	tests := []struct {
		name string
		log  raft.Log
		want string
	}{
		{
			name: "zero",
			log:  raft.Log{},
			want: "01" + "00" + "00" + "00" + "00" + "00" + "00",
		},
		{
			name: "full",
			log: raft.Log{
				Index: 300, Term: 2, Type: raft.LogConfiguration,
				Data: []byte("ab"), Extensions: []byte{0xff},
				AppendedAt: time.Unix(0, 1),
			},
			want: "01" + "ac02" + "02" + "05" + "026162" + "01ff" + "01" + "01",
		},
		{
			name: "before 1970",
			log:  raft.Log{Index: 1, Term: 1, AppendedAt: time.Unix(0, -1)},
			want: "01" + "01" + "01" + "00" + "00" + "00" + "01" + "ffffffffffffffffff01",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := hex.EncodeToString(appendLog(nil, &tt.log))
			if got != tt.want {
				t.Fatalf("appendLog = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestLogEncodingRoundTrip(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name string
		in   raft.Log
		want raft.Log
	}{
		{name: "zero", in: raft.Log{}, want: raft.Log{}},
		{
			name: "command",
			in:   raft.Log{Index: 7, Term: 3, Type: raft.LogCommand, Data: []byte("x"), AppendedAt: now},
			want: raft.Log{Index: 7, Term: 3, Type: raft.LogCommand, Data: []byte("x"), AppendedAt: now},
		},
		{
			name: "extensions and max indexes",
			in:   raft.Log{Index: math.MaxUint64, Term: math.MaxUint64, Type: raft.LogBarrier, Extensions: []byte{0, 1}},
			want: raft.Log{Index: math.MaxUint64, Term: math.MaxUint64, Type: raft.LogBarrier, Extensions: []byte{0, 1}},
		},
		{
			name: "unknown type kept",
			in:   raft.Log{Index: 1, Type: raft.LogType(200)},
			want: raft.Log{Index: 1, Type: raft.LogType(200)},
		},
		{
			name: "empty slices read back nil",
			in:   raft.Log{Index: 1, Data: []byte{}, Extensions: []byte{}},
			want: raft.Log{Index: 1},
		},
		{
			name: "time after 2262 is clamped",
			in:   raft.Log{Index: 1, AppendedAt: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)},
			want: raft.Log{Index: 1, AppendedAt: time.Unix(0, math.MaxInt64)},
		},
		{
			name: "time before 1678 is clamped",
			in:   raft.Log{Index: 1, AppendedAt: time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)},
			want: raft.Log{Index: 1, AppendedAt: time.Unix(0, math.MinInt64)},
		},
		{
			name: "unix epoch is not the zero time",
			in:   raft.Log{Index: 1, AppendedAt: time.Unix(0, 0)},
			want: raft.Log{Index: 1, AppendedAt: time.Unix(0, 0)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got raft.Log
			if err := decodeLog(appendLog(nil, &tt.in), &got); err != nil {
				t.Fatalf("decodeLog: %v", err)
			}
			// cmp compares time.Time with its Equal method: the instant,
			// not the location or the monotonic reading.
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("round trip (-want +got):\n%s", diff)
			}
			if got.AppendedAt.IsZero() != tt.want.AppendedAt.IsZero() {
				t.Fatalf("AppendedAt.IsZero() = %v, want %v", got.AppendedAt.IsZero(), tt.want.AppendedAt.IsZero())
			}
		})
	}
}

func TestDecodeLogRejects(t *testing.T) {
	valid := appendLog(nil, &raft.Log{Index: 5, Term: 1, Data: []byte("abc"), AppendedAt: time.Unix(9, 0)})
	tests := []struct {
		name string
		b    []byte
	}{
		{name: "empty", b: nil},
		{name: "unknown version", b: append([]byte{2}, valid[1:]...)},
		{name: "truncated", b: valid[:len(valid)-1]},
		{name: "trailing byte", b: append(bytes.Clone(valid), 0)},
		{name: "bad appended-at flag", b: []byte{1, 1, 1, 0, 0, 0, 2}},
		{name: "data length beyond input", b: []byte{1, 1, 1, 0, 0x7f, 0}},
		{name: "overlong varint", b: []byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := raft.Log{Index: 42, Data: []byte("kept")}
			got := before
			err := decodeLog(tt.b, &got)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeLog(%x) = %v, want an error wrapping ErrCorrupt", tt.b, err)
			}
			if diff := cmp.Diff(before, got); diff != "" {
				t.Fatalf("decodeLog changed its output on error (-before +after):\n%s", diff)
			}
		})
	}
}

// FuzzDecodeLog checks that decoding arbitrary bytes never panics, and that
// whatever decodes re-encodes to bytes that decode to the same entry.
func FuzzDecodeLog(f *testing.F) {
	for _, l := range []raft.Log{
		{},
		{Index: 1, Term: 1, Type: raft.LogNoop},
		{Index: 1 << 40, Term: 9, Type: raft.LogCommand, Data: []byte("payload"), Extensions: []byte("ext"), AppendedAt: time.Unix(1700000000, 5)},
		{Index: 3, AppendedAt: time.Unix(0, math.MinInt64)},
	} {
		f.Add(appendLog(nil, &l))
	}
	f.Add([]byte{})
	f.Add([]byte{1, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		var l raft.Log
		if err := decodeLog(b, &l); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decodeLog error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		again := appendLog(nil, &l)
		if !bytes.Equal(again, appendLog(nil, &l)) {
			t.Fatalf("appendLog is not deterministic for %+v", l)
		}
		var l2 raft.Log
		if err := decodeLog(again, &l2); err != nil {
			t.Fatalf("re-encoding of %x does not decode: %v", b, err)
		}
		if diff := cmp.Diff(l, l2); diff != "" {
			t.Fatalf("decode(encode(decode(%x))) differs (-first +second):\n%s", b, diff)
		}
		if len(again) > len(b) {
			// Decoding reads canonical or longer varints; re-encoding
			// writes canonical ones, so it never grows.
			t.Fatalf("re-encoding of %d bytes is %d bytes", len(b), len(again))
		}
	})
}
