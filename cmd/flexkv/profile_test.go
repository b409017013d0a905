package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStartProfile: no path, no profile; a path gets a CPU profile pprof
// reads (gzip-compressed protobuf) once stopped; a path that cannot be
// created is an error naming the flag.
func TestStartProfile(t *testing.T) {
	stop, err := startProfile("")
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cpu.out")
	if stop, err = startProfile(path); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("profile of %d bytes, not gzip", len(b))
	}
	_, err = startProfile(filepath.Join(t.TempDir(), "missing", "cpu.out"))
	if err == nil || !strings.Contains(err.Error(), "--cpu-profile") {
		t.Errorf("profile in a missing directory: %v, want an error naming --cpu-profile", err)
	}
}
