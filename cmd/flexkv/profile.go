package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
)

// addProfileFlags adds --cpu-profile and --mem-profile to cmd; what is the
// process's work, for the help.
func addProfileFlags(cmd *cobra.Command, what string) {
	cmd.Flags().String("cpu-profile", "", "write a CPU profile of this process ("+what+") to FILE, for go tool pprof")
	cmd.Flags().String("mem-profile", "", "write the allocations of this process ("+what+") to FILE when it stops, for go tool pprof (-sample_index=alloc_space: bytes allocated by site)")
}

// startProfiles starts what --cpu-profile and --mem-profile ask for (the
// CPU profile at once; the allocations are written by stop) and returns
// the function that stops them and closes their files. A file that cannot
// be created, or a CPU profile that cannot start (one is running), is an
// error naming its flag, and leaves nothing started.
func startProfiles(v *viper.Viper) (stop func() error, err error) {
	cpuPath, memPath := v.GetString("cpu-profile"), v.GetString("mem-profile")
	if cpuPath != "" && cpuPath == memPath {
		return nil, fmt.Errorf("--cpu-profile and --mem-profile name the same file %s", cpuPath)
	}
	var cpu, mem *os.File
	if cpuPath != "" {
		if cpu, err = os.Create(cpuPath); err != nil {
			return nil, fmt.Errorf("--cpu-profile: %w", err)
		}
		if err := pprof.StartCPUProfile(cpu); err != nil {
			cpu.Close()
			return nil, fmt.Errorf("--cpu-profile %s: %w", cpuPath, err)
		}
	}
	if memPath != "" {
		if mem, err = os.Create(memPath); err != nil {
			if cpu != nil {
				pprof.StopCPUProfile()
				cpu.Close()
			}
			return nil, fmt.Errorf("--mem-profile: %w", err)
		}
	}
	return func() error {
		var errs []error
		if cpu != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpu.Close())
		}
		if mem != nil {
			// The allocs profile counts what was sampled up to the last
			// collection: one now takes in the run's end.
			runtime.GC()
			if err := pprof.Lookup("allocs").WriteTo(mem, 0); err != nil {
				errs = append(errs, fmt.Errorf("--mem-profile %s: %w", memPath, err))
			}
			errs = append(errs, mem.Close())
		}
		return errors.Join(errs...)
	}, nil
}
