package main

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/server"
)

// hostProcs sets how many goroutines run at once (GOMAXPROCS) in a process
// that hosts the replicas of a whole cluster (flexkv local, demo, gtpcc run
// --local) and returns the value in force. Every replica that leads fsyncs
// its raft log for each batch of entries it writes, and a goroutine in
// fdatasync keeps its processor until the runtime takes it back: with one
// processor per core, a dozen leaders' fsyncs leave the cores idle while
// runnable goroutines queue (the scheduler's delays, in a runtime trace of
// the 12-region run, fell from 180 s to 44 s with four processors on two
// cores). So such a process runs up to twice as many processors as it
// would by default, one per replica at most; the GOMAXPROCS environment
// variable, when set, is left as it is. A server of one replica keeps the
// default. restore puts back the value found, for a command that ends
// while its process goes on (a test's).
func hostProcs(cfg *partition.ClusterConfig) (procs int, restore func()) {
	prev := runtime.GOMAXPROCS(0)
	if os.Getenv("GOMAXPROCS") != "" {
		return prev, func() {}
	}
	if want := min(2*defaultProcs, replicasOf(cfg)); want > prev {
		runtime.GOMAXPROCS(want)
		return want, func() { runtime.GOMAXPROCS(prev) }
	}
	return prev, func() {}
}

// defaultProcs is the runtime's own GOMAXPROCS, read before hostProcs
// changes it: the cores (or the container's CPU limit) the process has.
var defaultProcs = runtime.GOMAXPROCS(0)

// gcPercentHost is the garbage collector's target (GOGC) in a process that
// hosts replicas: the heap may grow to five times what is live between
// collections instead of twice. A replica's live heap is small (its rows,
// caches and memtables are Pebble's, outside the Go heap; the nine
// replicas and 96 clients of `flexkv gtpcc run --local` keep about 90 MB
// live) and it allocates fast (a row decoded, a value copied, a message
// framed), so at Go's default of 100 the collector ran six times a second
// there and took about 9% of the process's CPU; at 400, about 4%.
const gcPercentHost = 400

// replicaMemoryBytes is the memory a replica is given beyond what its
// edge may hold (server.EdgeBytesMax): Pebble's block cache (32 MiB) and
// memtables, which are in the Go heap when the binary is built without
// cgo as the release is; raft's log cache; the executor's results and
// sessions; the goroutines of its calls; and the garbage between
// collections. An idle replica of `flexkv local` takes some 40 MiB, and
// the nine replicas and 96 clients of `flexkv gtpcc run --local` keep
// about 90 MB live: the allowance is several times that, so that the limit
// bounds a replica under attack or a runaway, not a busy one.
const replicaMemoryBytes = 256 << 20

// memoryLimit is the memory limit of a process that hosts replicas of
// cfg: for each, replicaMemoryBytes and what its edge may hold.
func memoryLimit(cfg *partition.ClusterConfig, replicas int) int64 {
	return int64(replicas) * (replicaMemoryBytes + server.EdgeBytesMax(cfg))
}

// hostGC sets the garbage collector of a process that hosts replicas
// (flexkv server, local, demo, gtpcc run --local) hosted replicas of cfg:
// its target to gcPercentHost, and a memory limit (the runtime's soft
// limit, debug.SetMemoryLimit) of memoryLimit. The target lets the heap
// grow to five times what is live between collections; the limit makes
// the collector run before the heap passes it, whatever the target says,
// so that memory a burst took comes back instead of waiting for a heap
// five times the burst. When the GOGC or GOMEMLIMIT environment variable
// is set, the target is left as it is (GOGC=100 is Go's default; a memory
// limit is a choice of how the process may use memory that a larger target
// would second-guess); when GOMEMLIMIT is, the limit too. restore puts
// back what it found, for a command that ends while its process goes on (a
// test's).
func hostGC(cfg *partition.ClusterConfig, hosted int) (restore func()) {
	limit := int64(-1) // -1 reads the limit without changing it
	if os.Getenv("GOMEMLIMIT") == "" {
		limit = memoryLimit(cfg, hosted)
	}
	prevLimit := debug.SetMemoryLimit(limit)
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return func() { debug.SetMemoryLimit(prevLimit) }
	}
	prev := debug.SetGCPercent(gcPercentHost)
	return func() {
		debug.SetGCPercent(prev)
		debug.SetMemoryLimit(prevLimit)
	}
}

// replicasOf returns how many replicas cfg has.
func replicasOf(cfg *partition.ClusterConfig) int {
	n := 0
	for _, g := range cfg.Groups {
		n += len(g.Replicas)
	}
	return n
}

// memoryLimitText states the process's memory limit (the runtime's soft
// limit, hostGC) for a person and for the soak, which checks the resident
// memory against it: "memory limit N MiB", or "no memory limit".
func memoryLimitText() string {
	limit := debug.SetMemoryLimit(-1)
	if limit == math.MaxInt64 {
		return "no memory limit"
	}
	return fmt.Sprintf("memory limit %d MiB", limit>>20)
}
