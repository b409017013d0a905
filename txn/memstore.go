package txn

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// MemStore is a Reader and a Writer over a map: the store a transaction is
// evaluated on where no database is wanted (tests, tools, fakes of a
// cluster). It records the writes it receives, in call order, as "put k=v"
// and "delete k". It hands out copies: what a caller does with a returned
// value does not reach the store. It is not safe for concurrent use.
type MemStore struct {
	kv     map[string][]byte
	writes []string
}

// NewMemStore returns a store holding kv (copied).
func NewMemStore(kv map[string]string) *MemStore {
	s := &MemStore{kv: make(map[string][]byte, len(kv))}
	for k, v := range kv { //flexkv:unordered copying into a map
		s.kv[k] = []byte(v)
	}
	return s
}

// Get implements Reader.
func (s *MemStore) Get(key []byte) ([]byte, bool, error) {
	v, ok := s.kv[string(key)]
	if !ok {
		return nil, false, nil
	}
	return bytes.Clone(v), true, nil
}

// Scan implements Reader.
func (s *MemStore) Scan(start, end []byte, limit int) ([]KV, error) {
	var keys []string
	for k := range s.kv { //flexkv:unordered sorted below
		if k >= string(start) && k < string(end) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	if len(keys) > limit {
		keys = keys[:limit]
	}
	out := make([]KV, len(keys))
	for i, k := range keys {
		out[i] = KV{Key: []byte(k), Value: bytes.Clone(s.kv[k])}
	}
	return out, nil
}

// Put implements Writer.
func (s *MemStore) Put(key, value []byte) error {
	s.kv[string(key)] = bytes.Clone(value)
	s.writes = append(s.writes, fmt.Sprintf("put %s=%s", key, value))
	return nil
}

// Delete implements Writer.
func (s *MemStore) Delete(key []byte) error {
	delete(s.kv, string(key))
	s.writes = append(s.writes, fmt.Sprintf("delete %s", key))
	return nil
}

// Writes returns the writes received so far, in call order.
func (s *MemStore) Writes() []string { return slices.Clone(s.writes) }

// Keys returns the keys that have a value, in ascending order.
func (s *MemStore) Keys() []string { return slices.Sorted(maps.Keys(s.kv)) }

// String formats the contents in key order: "k1=v1 k2=v2".
func (s *MemStore) String() string {
	var b strings.Builder
	for i, k := range s.Keys() {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%s", k, s.kv[k])
	}
	return b.String()
}
