package main

import (
	"os"
	"runtime"
	"runtime/debug"

	"github.com/flexkv/flexkv/partition"
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
	replicas := 0
	for _, g := range cfg.Groups {
		replicas += len(g.Replicas)
	}
	if want := min(2*defaultProcs, replicas); want > prev {
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

// hostGC sets the garbage collector's target to gcPercentHost in a process
// that hosts replicas (flexkv server, local, demo, gtpcc run --local). When
// the GOGC or GOMEMLIMIT environment variable is set, the runtime's own
// settings are left as they are (GOGC=100 is Go's default; a memory limit
// is a choice of how the process may use memory that a larger target would
// second-guess). restore puts back the target found, for a command that
// ends while its process goes on (a test's).
func hostGC() (restore func()) {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return func() {}
	}
	prev := debug.SetGCPercent(gcPercentHost)
	return func() { debug.SetGCPercent(prev) }
}
