package channel

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

func TestFrameRoundTrip(t *testing.T) {
	frames := []Frame{
		data(0, 1, 1, 0, "x"),
		data(4, 2, 1<<40, 1<<63, "payload"),
		{From: 3, To: 0, Seq: 7, Ack: 2}, // a data frame may carry an empty payload
		ctl(1, 0, 5, 0),
		ctl(1, 0, 5, 6),
		ctl(2, 3, 0, 0),
	}
	for _, f := range frames {
		b := AppendFrame([]byte("prefix"), f)
		if n := FrameSize(f); n != len(b)-len("prefix") {
			t.Errorf("FrameSize(%s) = %d, encoding has %d bytes", f, n, len(b)-len("prefix"))
		}
		got, err := DecodeFrame(b[len("prefix"):], 5)
		if err != nil {
			t.Fatalf("DecodeFrame(AppendFrame(%s)): %v", f, err)
		}
		if diff := cmp.Diff(f, got, equateEmpty); diff != "" {
			t.Errorf("round trip of %s (-want +got):\n%s", f, diff)
		}
	}
}

func TestDecodeFrameRejects(t *testing.T) {
	valid := AppendFrame(nil, data(0, 1, 1, 0, "x"))
	tests := []struct {
		name    string
		b       []byte
		corrupt bool // also wraps wire.ErrCorrupt
	}{
		{"empty", nil, true},
		{"truncated", valid[:len(valid)-1], true},
		{"trailing bytes", append(append([]byte(nil), valid...), 0), true},
		{"unknown version", append([]byte{2}, valid[1:]...), true},
		{"group out of range", AppendFrame(nil, data(0, 5, 1, 0, "x")), true},
		{"negative group", AppendFrame(nil, data(-1, 1, 1, 0, "x")), true},
		{"same group", AppendFrame(nil, data(2, 2, 1, 0, "x")), false},
		{"control frame with payload", AppendFrame(nil, Frame{From: 0, To: 1, Payload: []byte("x")}), false},
		{"nack not after ack", AppendFrame(nil, ctl(0, 1, 3, 3)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeFrame(tt.b, 5)
			if !errors.Is(err, multicast.ErrInvalid) {
				t.Fatalf("DecodeFrame = %v, want an error wrapping ErrInvalid", err)
			}
			if got := errors.Is(err, wire.ErrCorrupt); got != tt.corrupt {
				t.Errorf("errors.Is(%v, wire.ErrCorrupt) = %v, want %v", err, got, tt.corrupt)
			}
		})
	}
}

// FuzzDecodeFrame checks that DecodeFrame never panics, that what it accepts
// passes the frame checks, and that it reads back what AppendFrame wrote.
func FuzzDecodeFrame(f *testing.F) {
	for _, fr := range []Frame{data(0, 1, 1, 0, "x"), ctl(2, 0, 9, 10), ctl(1, 3, 0, 0), data(3, 2, 1<<50, 3, "")} {
		f.Add(AppendFrame(nil, fr))
	}
	f.Add([]byte{})
	f.Add([]byte{1, 0x80, 0x80, 0x80})
	const groups = 4
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeFrame(b, groups)
		if err != nil {
			if !errors.Is(err, multicast.ErrInvalid) {
				t.Fatalf("DecodeFrame error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if err := checkFrame(fr, groups); err != nil {
			t.Fatalf("DecodeFrame accepted a malformed frame: %v", err)
		}
		enc := AppendFrame(nil, fr)
		again, err := DecodeFrame(enc, groups)
		if err != nil {
			t.Fatalf("DecodeFrame(AppendFrame(%s)): %v", fr, err)
		}
		if diff := cmp.Diff(fr, again); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
		if !bytes.Equal(AppendFrame(nil, again), enc) {
			t.Fatalf("encoding of %s is not deterministic", fr)
		}
	})
}

// FuzzFrameRoundTrip checks that DecodeFrame(AppendFrame(f)) returns f when f
// is well-formed, and an error otherwise.
func FuzzFrameRoundTrip(f *testing.F) {
	f.Add(int8(0), int8(1), uint64(1), uint64(0), uint64(0), []byte("x"))
	f.Add(int8(1), int8(0), uint64(0), uint64(4), uint64(5), []byte(nil))
	f.Add(int8(-1), int8(70), uint64(0), ^uint64(0), uint64(0), []byte("y"))
	const groups = 8
	f.Fuzz(func(t *testing.T, from, to int8, seq, ack, nack uint64, payload []byte) {
		if len(payload) == 0 {
			payload = nil
		}
		fr := Frame{From: partition.GroupID(from), To: partition.GroupID(to), Seq: seq, Ack: ack, Nack: nack, Payload: payload}
		enc := AppendFrame(nil, fr)
		if n := FrameSize(fr); n != len(enc) {
			t.Fatalf("FrameSize(%s) = %d, encoding has %d bytes", fr, n, len(enc))
		}
		got, err := DecodeFrame(enc, groups)
		if want := checkFrame(fr, groups); want != nil {
			if err == nil {
				t.Fatalf("DecodeFrame accepted %s: %v", fr, want)
			}
			return
		}
		if err != nil {
			t.Fatalf("DecodeFrame(AppendFrame(%s)): %v", fr, err)
		}
		if diff := cmp.Diff(fr, got); diff != "" {
			t.Fatalf("round trip (-want +got):\n%s", diff)
		}
	})
}
