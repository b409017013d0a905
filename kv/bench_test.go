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
