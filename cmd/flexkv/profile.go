package main

import (
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/spf13/cobra"
)

// addProfileFlag adds --cpu-profile to cmd; what is the process's work,
// for the help.
func addProfileFlag(cmd *cobra.Command, what string) {
	cmd.Flags().String("cpu-profile", "", "write a CPU profile of this process ("+what+") to FILE, for go tool pprof")
}

// startProfile starts the CPU profile that --cpu-profile names, if any, and
// returns the function that stops it and closes the file.
func startProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpu-profile %s: %w", path, err)
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
