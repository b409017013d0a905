package flexkvdb

import (
	"bytes"
	"errors"
	"maps"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fields map[string][]byte
	}{
		{"none", map[string][]byte{}},
		{"one", map[string][]byte{"field0": []byte("v")}},
		{"empty value", map[string][]byte{"field0": {}}},
		{"ten", func() map[string][]byte {
			m := map[string][]byte{}
			for i := range 10 {
				m["field"+string(rune('0'+i))] = bytes.Repeat([]byte{byte(i)}, 100)
			}
			return m
		}()},
		{"long name", map[string][]byte{string(bytes.Repeat([]byte("n"), 300)): bytes.Repeat([]byte("v"), 70000)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := encodeRecord(tc.fields)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) == 0 || b[0] != recordVersion {
				t.Fatalf("encoding starts %x, want the version byte %d", b[:min(len(b), 1)], recordVersion)
			}
			got, err := decodeRecord(b, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.EqualFunc(got, tc.fields, bytes.Equal) {
				t.Fatalf("decode(encode(%v)) = %v", tc.fields, got)
			}
			// One encoding whatever the map's order.
			for range 5 {
				again, _ := encodeRecord(maps.Clone(tc.fields))
				if !bytes.Equal(again, b) {
					t.Fatalf("two encodings of one record: %x and %x", b, again)
				}
			}
		})
	}
}

func TestRecordKnownBytes(t *testing.T) {
	b, err := encodeRecord(map[string][]byte{"b": []byte("2"), "a": []byte("xy")})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{1, 2, 1, 'a', 2, 'x', 'y', 1, 'b', 1, '2'}
	if !bytes.Equal(b, want) {
		t.Fatalf("encoding = %v, want %v", b, want)
	}
}

func TestRecordSelectedFields(t *testing.T) {
	b, _ := encodeRecord(map[string][]byte{"f0": []byte("a"), "f1": []byte("b"), "f2": []byte("c")})
	got, err := decodeRecord(b, []string{"f2", "f0", "missing"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{"f0": []byte("a"), "f2": []byte("c")}
	if !maps.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestRecordMerge(t *testing.T) {
	old, _ := encodeRecord(map[string][]byte{"f0": []byte("a"), "f1": []byte("b")})
	merged, err := mergeRecord(old, map[string][]byte{"f1": []byte("B"), "f2": []byte("C")})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := decodeRecord(merged, nil)
	want := map[string][]byte{"f0": []byte("a"), "f1": []byte("B"), "f2": []byte("C")}
	if !maps.EqualFunc(got, want, bytes.Equal) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestRecordBad(t *testing.T) {
	good, _ := encodeRecord(map[string][]byte{"a": []byte("1"), "b": []byte("2")})
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"version 2", append([]byte{2}, good[1:]...)},
		{"no count", []byte{1}},
		{"too many fields", []byte{1, 0xff, 0xff, 0x03}},
		{"short name", []byte{1, 1, 5, 'a'}},
		{"short value", []byte{1, 1, 1, 'a', 9, 'x'}},
		{"trailing byte", append(bytes.Clone(good), 0)},
		{"out of order", []byte{1, 2, 1, 'b', 0, 1, 'a', 0}},
		{"repeated", []byte{1, 2, 1, 'a', 0, 1, 'a', 0}},
		{"truncated", good[:len(good)-1]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := decodeRecord(tc.b, nil); !errors.Is(err, errRecord) {
				t.Fatalf("decode(%v) = %v, %v; want an error matching errRecord", tc.b, got, err)
			}
		})
	}
	if _, err := mergeRecord([]byte("plain"), map[string][]byte{"a": nil}); !errors.Is(err, errRecord) {
		t.Fatalf("merge into a value that is no record: %v, want errRecord", err)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	good, _ := encodeRecord(map[string][]byte{"a": []byte("1"), "b": []byte("2")})
	f.Add(good)
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		fields, err := decodeRecord(b, nil)
		if err != nil {
			return
		}
		again, err := encodeRecord(fields)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("%x decodes to %v, which encodes to %x (%v)", b, fields, again, err)
		}
	})
}
