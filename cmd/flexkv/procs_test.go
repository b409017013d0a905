package main

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/flexkv/flexkv/partition"
)

// clusterOf returns a configuration of groups with the given replica counts.
func clusterOf(replicas ...int) *partition.ClusterConfig {
	cfg := &partition.ClusterConfig{}
	for _, n := range replicas {
		cfg.Groups = append(cfg.Groups, partition.GroupConfig{Replicas: make([]partition.ReplicaConfig, n)})
	}
	return cfg
}

func TestHostProcs(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev); defaultProcs = prev })
	cases := []struct {
		name     string
		def      int
		env      string
		replicas []int
		want     int
	}{
		{"one replica keeps the default", 2, "", []int{1}, 2},
		{"3x3 on two cores: twice the cores", 2, "", []int{3, 3, 3}, 4},
		{"12x1 on two cores: twice the cores", 2, "", []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 4},
		{"3 replicas on two cores: one a replica", 2, "", []int{3}, 3},
		{"never fewer than the default", 8, "", []int{3, 3}, 8},
		{"GOMAXPROCS set: left alone", 2, "2", []int{3, 3, 3}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("GOMAXPROCS", c.env)
			defaultProcs = c.def
			runtime.GOMAXPROCS(c.def)
			got, restore := hostProcs(clusterOf(c.replicas...))
			if got != c.want {
				t.Errorf("hostProcs = %d, want %d", got, c.want)
			}
			if got := runtime.GOMAXPROCS(0); got != c.want {
				t.Errorf("GOMAXPROCS after hostProcs = %d, want %d", got, c.want)
			}
			restore()
			if got := runtime.GOMAXPROCS(0); got != c.def {
				t.Errorf("GOMAXPROCS after restore = %d, want %d, the value before", got, c.def)
			}
		})
	}
}

func TestHostGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	prevLimit := debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(prev); debug.SetMemoryLimit(prevLimit) })
	gcPercent := func() int { p := debug.SetGCPercent(-1); debug.SetGCPercent(p); return p }
	memLimit := func() int64 { return debug.SetMemoryLimit(-1) }
	cfg := clusterOf(3, 3, 3)
	want := memoryLimit(cfg, 9)

	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	restore := hostGC(cfg, 9)
	if got := gcPercent(); got != gcPercentHost {
		t.Errorf("GOGC unset: collector target %d, want %d", got, gcPercentHost)
	}
	if got := memLimit(); got != want {
		t.Errorf("GOMEMLIMIT unset: memory limit %d, want %d", got, want)
	}
	restore()
	if got := gcPercent(); got != 100 {
		t.Errorf("after restore: collector target %d, want 100, the value before", got)
	}
	if got := memLimit(); got != math.MaxInt64 {
		t.Errorf("after restore: memory limit %d, want none, the value before", got)
	}

	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "1GiB")
	restore = hostGC(cfg, 9)
	if got := gcPercent(); got != 100 {
		t.Errorf("GOMEMLIMIT set: collector target %d, want it left at 100", got)
	}
	if got := memLimit(); got != math.MaxInt64 {
		t.Errorf("GOMEMLIMIT set: memory limit %d, want it left as it was", got)
	}
	restore()

	t.Setenv("GOMEMLIMIT", "")
	t.Setenv("GOGC", "150")
	debug.SetGCPercent(150)
	restore = hostGC(cfg, 1)
	if got := gcPercent(); got != 150 {
		t.Errorf("GOGC=150: collector target %d, want it left at 150", got)
	}
	if got, one := memLimit(), memoryLimit(cfg, 1); got != one {
		t.Errorf("GOGC=150, one replica: memory limit %d, want %d", got, one)
	}
	restore()
	if got := gcPercent(); got != 150 {
		t.Errorf("GOGC=150, after restore: collector target %d, want 150", got)
	}
	if got := memLimit(); got != math.MaxInt64 {
		t.Errorf("GOGC=150, after restore: memory limit %d, want none", got)
	}
}

// TestMemoryLimit checks how the limit grows with what a process hosts:
// per replica, the allowance and the edge's bound, which grows with the
// groups (the peer port).
func TestMemoryLimit(t *testing.T) {
	one, three := memoryLimit(clusterOf(1), 1), memoryLimit(clusterOf(1, 1, 1), 1)
	if one <= replicaMemoryBytes || three <= one {
		t.Errorf("one replica: %d bytes alone, %d among three groups; want more than %d, and more with more groups", one, three, replicaMemoryBytes)
	}
	if nine := memoryLimit(clusterOf(3, 3, 3), 9); nine != 9*memoryLimit(clusterOf(3, 3, 3), 1) {
		t.Errorf("nine replicas: %d bytes, want nine times one's", nine)
	}
	if got := memoryLimit(clusterOf(3, 3, 3), 1); got > 1<<30 {
		t.Errorf("one replica of three groups: a limit of %d bytes, want at most 1 GiB", got)
	}
}
