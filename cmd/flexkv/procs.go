package main

import (
	"os"
	"runtime"

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
