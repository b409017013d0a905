package main

import (
	"errors"
	"fmt"
	"os"
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
// be created is an error naming its flag, and starts nothing.
func startProfiles(v *viper.Viper) (stop func() error, err error) {
	cpuPath, memPath := v.GetString("cpu-profile"), v.GetString("mem-profile")
	var cpu, mem *os.File
	if memPath != "" {
		if mem, err = os.Create(memPath); err != nil {
			return nil, fmt.Errorf("--mem-profile: %w", err)
		}
	}
	if cpuPath != "" {
		if cpu, err = os.Create(cpuPath); err == nil {
			if err = pprof.StartCPUProfile(cpu); err != nil {
				cpu.Close()
				err = fmt.Errorf("--cpu-profile %s: %w", cpuPath, err)
			}
		} else {
			err = fmt.Errorf("--cpu-profile: %w", err)
		}
		if err != nil {
			if mem != nil {
				mem.Close()
			}
			return nil, err
		}
	}
	return func() error {
		var errs []error
		if cpu != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpu.Close())
		}
		if mem != nil {
			// The allocs profile counts every allocation sampled since the
			// process started (and what is live now).
			if err := pprof.Lookup("allocs").WriteTo(mem, 0); err != nil {
				errs = append(errs, fmt.Errorf("--mem-profile %s: %w", memPath, err))
			}
			errs = append(errs, mem.Close())
		}
		return errors.Join(errs...)
	}, nil
}
