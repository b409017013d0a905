package txn

import (
	"slices"
	"testing"
)

func TestMemStore(t *testing.T) {
	s := NewMemStore(map[string]string{"b": "2", "a": "1", "c": "3"})
	v, ok, err := s.Get([]byte("b"))
	if err != nil || !ok || string(v) != "2" {
		t.Fatalf("Get(b) = %q, %v, %v", v, ok, err)
	}
	v[0] = 'x' // a copy: the store keeps its value
	if v, _, _ := s.Get([]byte("b")); string(v) != "2" {
		t.Errorf("a caller's change to a returned value reached the store: b = %q", v)
	}
	if _, ok, _ := s.Get([]byte("z")); ok {
		t.Error("Get(z) found a value")
	}
	kvs, err := s.Scan([]byte("a"), []byte("c"), 10)
	if err != nil || len(kvs) != 2 || string(kvs[0].Key) != "a" || string(kvs[1].Key) != "b" {
		t.Fatalf("Scan[a, c) = %v, %v, want a and b in order", kvs, err)
	}
	if kvs, _ := s.Scan([]byte("a"), []byte("z"), 1); len(kvs) != 1 || string(kvs[0].Key) != "a" {
		t.Errorf("Scan with limit 1 = %v, want a alone", kvs)
	}
	val := []byte("4")
	if err := s.Put([]byte("d"), val); err != nil {
		t.Fatal(err)
	}
	val[0] = 'x'
	if err := s.Delete([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if got, want := s.String(), "b=2 c=3 d=4"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got, want := s.Writes(), []string{"put d=4", "delete a"}; !slices.Equal(got, want) {
		t.Errorf("Writes() = %q, want %q", got, want)
	}
	if got, want := s.Keys(), []string{"b", "c", "d"}; !slices.Equal(got, want) {
		t.Errorf("Keys() = %q, want %q", got, want)
	}
}
