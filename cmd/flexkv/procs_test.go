package main

import (
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
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	gcPercent := func() int { p := debug.SetGCPercent(-1); debug.SetGCPercent(p); return p }

	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	restore := hostGC()
	if got := gcPercent(); got != gcPercentHost {
		t.Errorf("GOGC unset: collector target %d, want %d", got, gcPercentHost)
	}
	restore()
	if got := gcPercent(); got != 100 {
		t.Errorf("after restore: collector target %d, want 100, the value before", got)
	}

	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "1GiB")
	restore = hostGC()
	if got := gcPercent(); got != 100 {
		t.Errorf("GOMEMLIMIT set: collector target %d, want it left at 100", got)
	}
	restore()

	t.Setenv("GOMEMLIMIT", "")
	t.Setenv("GOGC", "150")
	debug.SetGCPercent(150)
	restore = hostGC()
	if got := gcPercent(); got != 150 {
		t.Errorf("GOGC=150: collector target %d, want it left at 150", got)
	}
	restore()
	if got := gcPercent(); got != 150 {
		t.Errorf("GOGC=150, after restore: collector target %d, want 150", got)
	}
}
