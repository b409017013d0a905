package kv

import (
	"encoding/binary"
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
// with a stored procedure's rows.
func BenchmarkBatchGet(b *testing.B) {
	const keys, readsPerBatch = 10000, 20
	s := openStore(b, Options{NoSync: true})
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
	n := 0
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		batch := s.NewBatch()
		for i := range readsPerBatch {
			n = (n + 7919) % keys
			if _, found, err := batch.Get(key(n)); err != nil || !found {
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
