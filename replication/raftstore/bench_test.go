package raftstore

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// BenchmarkStoreLogs measures synced appends as raft makes them: one
// StoreLogs call per batch of 64 entries of 256 bytes (raft's
// MaxAppendEntries is 64 by default). MB/s counts entry data; entries/s is
// what a leader could append to this disk.
func BenchmarkStoreLogs(b *testing.B) {
	const (
		batchSize = 64
		dataSize  = 256
	)
	s, err := Open(Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatalf("Open: %v", err)
	}
	b.Cleanup(func() {
		if err := s.Close(); err != nil {
			b.Errorf("Close: %v", err)
		}
	})
	data := make([]byte, dataSize)
	for i := range data {
		data[i] = byte(i)
	}
	batch := make([]*raft.Log, batchSize)
	for i := range batch {
		batch[i] = &raft.Log{Term: 1, Type: raft.LogCommand, Data: data, AppendedAt: time.Unix(1700000000, 0)}
	}
	b.SetBytes(batchSize * dataSize)
	b.ReportAllocs()
	next := uint64(1)
	for b.Loop() {
		for _, l := range batch {
			l.Index = next
			next++
		}
		if err := s.StoreLogs(batch); err != nil {
			b.Fatalf("StoreLogs: %v", err)
		}
	}
	b.ReportMetric(float64(next-1)/b.Elapsed().Seconds(), "entries/s")
}
