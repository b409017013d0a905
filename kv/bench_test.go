package kv

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkCommit measures Commit of batches of 10 puts of 100-byte values
// with NoSync, as a replica applies entries; commits/s is the figure to
// read (each commit also writes the applied index).
func BenchmarkCommit(b *testing.B) {
	const putsPerBatch = 10
	s := openStore(b, Options{NoSync: true})
	value := make([]byte, 100)
	key := make([]byte, 0, 16)
	var index uint64
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		index++
		batch := s.NewBatch()
		for i := range putsPerBatch {
			key = binary.BigEndian.AppendUint64(append(key[:0], 'k'), index*putsPerBatch+uint64(i))
			if err := batch.Put(key, value); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Commit(batch, index); err != nil {
			b.Fatal(err)
		}
		batch.Close()
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}

// BenchmarkBatchGet measures the reads of a replica's entry: a batch over
// a store of 10,000 committed keys reads 20 of them, writing one after each
// fifth read (reads must see the batch's own writes), as the executor does
// with a stored procedure's rows. It reads without the row cache
// (BenchmarkBatchGetLSM compares).
func BenchmarkBatchGet(b *testing.B) {
	const keys = 10000
	s := openStore(b, Options{NoSync: true, RowCacheSlots: -1})
	value := make([]byte, 100)
	load := s.NewBatch()
	key := func(i int) []byte { return binary.BigEndian.AppendUint64([]byte{'k'}, uint64(i)) }
	for i := range keys {
		if err := load.Put(key(i), value); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Commit(load, 1); err != nil {
		b.Fatal(err)
	}
	load.Close()
	benchReads(b, s, key, keys, keys)
}

// BenchmarkBatchGetLSM is BenchmarkBatchGet on the shape a replica's store
// has under gTPC-C: 100,000 rows loaded long ago in the bottom level, a
// tenth of them rewritten since (some flushed to L0, the latest in the
// memtable), and one read in four of a key that is not there. Batch.point
// seeks the batch's one iterator: on this shape Pebble's own Batch.Get,
// which builds a level-by-level iterator for each call, measured 250,000
// gets/s against the iterator's 382,000-425,000 (and twice the
// allocations).
//
// pebble reads without the row cache; cold reads through it keys far more
// than it holds (nearly every read a miss: what the cache costs); hot reads
// 4,000 keys, which it holds once warm (less the slots they share).
func BenchmarkBatchGetLSM(b *testing.B) {
	const keys = 100000
	for _, c := range []struct {
		name  string
		slots int
		span  int
	}{
		{"pebble", -1, keys + keys/3},
		{"cold", 0, keys + keys/3},
		{"hot", 0, 4000},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := openStore(b, Options{NoSync: true, RowCacheSlots: c.slots})
			loadLSM(b, s, keys)
			benchReads(b, s, lsmKey, keys, c.span)
		})
	}
}

func lsmKey(i int) []byte { return binary.BigEndian.AppendUint64([]byte{'k'}, uint64(i)) }

// loadLSM gives s BenchmarkBatchGetLSM's shape: keys rows of 100 bytes,
// lsmKey(0) to lsmKey(keys-1), compacted to the bottom level, a tenth
// rewritten since, flushed or in the memtable.
func loadLSM(b *testing.B, s *Store, keys int) {
	value := make([]byte, 100)
	key := lsmKey
	index := uint64(0)
	put := func(from, to, step int) {
		batch := s.NewBatch()
		for i := from; i < to; i += step {
			if err := batch.Put(key(i), value); err != nil {
				b.Fatal(err)
			}
		}
		index++
		if err := s.Commit(batch, index); err != nil {
			b.Fatal(err)
		}
		batch.Close()
	}
	for i := 0; i < keys; i += 1000 {
		put(i, i+1000, 1)
	}
	db := s.h.db
	if err := db.Compact(b.Context(), []byte{0}, []byte{0xff}, true); err != nil {
		b.Fatal(err)
	}
	for r := range 4 {
		put(r, keys, 40)
		if err := db.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	put(5, keys, 20)
}

// BenchmarkViewGet measures a leader's point reads (DESIGN 6.5): each
// takes a view, reads one key and releases the view, from two goroutines
// per processor, on BenchmarkBatchGetLSM's shape of store, among all its
// keys (cold: the row cache holds a third of them) or 4,000 (hot). A
// View without the row cache is what a read cost before reads went
// through it; PointView takes no Pebble snapshot.
func BenchmarkViewGet(b *testing.B) {
	const keys = 100000
	for _, c := range []struct {
		name  string
		slots int
		point bool
	}{
		{"view-nocache", -1, false},
		{"view", 0, false},
		{"point", 0, true},
	} {
		for _, span := range []int{keys, 4000} {
			b.Run(fmt.Sprintf("%s/span=%d", c.name, span), func(b *testing.B) {
				s := openStore(b, Options{NoSync: true, RowCacheSlots: c.slots})
				loadLSM(b, s, keys)
				take := s.View
				if c.point {
					take = s.PointView
				}
				b.SetParallelism(2)
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					n := rand.IntN(span)
					for pb.Next() {
						n = (n + 7919) % span
						v, err := take()
						if err != nil {
							b.Error(err)
							return
						}
						if _, found, err := v.Get(lsmKey(n)); err != nil || !found {
							b.Errorf("get %d: %v, found %v", n, err, found)
						}
						v.Release()
					}
				})
			})
		}
	}
}

// benchReads runs the reads of BenchmarkBatchGet over the keys key(0) to
// key(keys-1) that s holds, reading among the first span (those past keys
// are missing), and reports gets/s.
func benchReads(b *testing.B, s *Store, key func(int) []byte, keys, span int) {
	const readsPerBatch = 20
	value := make([]byte, 100)
	n := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		batch := s.NewBatch()
		for i := range readsPerBatch {
			n = (n + 7919) % span
			if _, found, err := batch.Get(key(n)); err != nil || found != (n < keys) {
				b.Fatalf("get %d: %v, found %v", n, err, found)
			}
			if i%5 == 4 {
				if err := batch.Put(key(n), value); err != nil {
					b.Fatal(err)
				}
			}
		}
		batch.Close()
	}
	b.ReportMetric(float64(b.N*readsPerBatch)/b.Elapsed().Seconds(), "gets/s")
}

// BenchmarkRowCacheGet measures the row cache's lookups in nine caches of
// the default size (a whole-mix process hosts nine replicas), each filled
// with the same 20,000 rows of 130 bytes, which it holds three quarters of
// (direct-mapped: the rest share slots; "held" reports the fraction), in a
// fixed random order: rows spread over more memory than the processor's
// caches hold, as under the whole mix, where a lookup's cost is mostly the
// memory it touches. A hit's copy of the value is counted (allocs/op).
func BenchmarkRowCacheGet(b *testing.B) {
	const caches, rows = 9, 20000
	cs := make([]*rowCache, caches)
	keys := make([][]byte, rows)
	for i := range keys {
		keys[i] = binary.BigEndian.AppendUint64([]byte("w/0001/c/"), uint64(i))
	}
	value := make([]byte, 130-len(keys[0]))
	held := 0
	for i := range cs {
		cs[i] = newRowCache(0)
		for _, k := range keys {
			cs[i].fill(0, k, value, true)
		}
		for _, k := range keys {
			if _, found, ok, _ := cs[i].get(0, k, false, 0); ok && found {
				held++
			}
		}
	}
	var x uint64 = 1
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		x = x*6364136223846793005 + 1442695040888963407 // a fixed sequence, not the keys' order
		c, k := cs[(x>>32)%caches], keys[(x>>8)%rows]
		c.get(0, k, false, 0)
	}
	b.ReportMetric(float64(held)/(caches*rows), "held")
}
