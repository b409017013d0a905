package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// profileSettings returns the settings of a command with the profile flags
// set to cpu and mem.
func profileSettings(t *testing.T, cpu, mem string) func() (func() error, error) {
	t.Helper()
	cmd := &cobra.Command{Use: "x"}
	addProfileFlags(cmd, "a test")
	if err := cmd.Flags().Set("cpu-profile", cpu); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Flags().Set("mem-profile", mem); err != nil {
		t.Fatal(err)
	}
	return func() (func() error, error) { return startProfiles(settings(cmd)) }
}

// readGzip fails t unless path holds a gzip stream (pprof's encoding).
func readGzip(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("%s: profile of %d bytes, not gzip", filepath.Base(path), len(b))
	}
}

// TestStartProfiles: no path, no profile; each path gets a profile pprof
// reads (gzip-compressed protobuf) once stopped; a path that cannot be
// created is an error naming its flag, and leaves no CPU profile running.
func TestStartProfiles(t *testing.T) {
	stop, err := profileSettings(t, "", "")()
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.out"), filepath.Join(dir, "mem.out")
	if stop, err = profileSettings(t, cpu, mem)(); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	readGzip(t, cpu)
	readGzip(t, mem)

	missing := filepath.Join(t.TempDir(), "missing", "x.out")
	for _, tc := range []struct{ cpu, mem, flag string }{
		{missing, "", "--cpu-profile"},
		{"", missing, "--mem-profile"},
		{missing, filepath.Join(dir, "mem2.out"), "--cpu-profile"},
		{filepath.Join(dir, "cpu3.out"), missing, "--mem-profile"},
		{cpu, cpu, "the same file"},
	} {
		_, err := profileSettings(t, tc.cpu, tc.mem)()
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("cpu %q mem %q: %v, want an error naming %s", tc.cpu, tc.mem, err, tc.flag)
		}
	}
	// The failed starts left no CPU profile running: a new one starts.
	if stop, err = profileSettings(t, filepath.Join(dir, "cpu2.out"), "")(); err != nil {
		t.Fatalf("CPU profile after failed starts: %v", err)
	}
	// While it runs, another cannot start: an error naming --cpu-profile,
	// and the allocations' file is not even created.
	mem4 := filepath.Join(dir, "mem4.out")
	if _, err := profileSettings(t, filepath.Join(dir, "cpu4.out"), mem4)(); err == nil || !strings.Contains(err.Error(), "--cpu-profile") {
		t.Errorf("a second CPU profile: %v, want an error naming --cpu-profile", err)
	}
	if _, err := os.Stat(mem4); !os.IsNotExist(err) {
		t.Errorf("%s after a start that failed: %v, want no file", filepath.Base(mem4), err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
