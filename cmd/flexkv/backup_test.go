package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBackupBadInvocations checks that `flexkv backup` refuses bad usage
// with exit code 2 and a message naming the problem, before reaching any
// cluster, and that verify names a backup with no manifest (exit code 1).
func TestBackupBadInvocations(t *testing.T) {
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, _ := localLayout(t, 1, false)
	tls := []string{"--insecure"}
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no subcommand", []string{"backup"}, 2, "want a command: create, verify, restore or drop"},
		{"create without --to", append([]string{"backup", "create"}, tls...), 2, "--to DIR is required"},
		{"create into a non-empty directory", append([]string{"backup", "create", "--to", full}, tls...), 2, "exists and is not empty"},
		{"create with --config and --endpoints", append([]string{"backup", "create", "--to", filepath.Join(full, "new"), "--config", cfg, "--endpoints", "127.0.0.1:1"}, tls...), 2, "--config and --endpoints: choose one"},
		{"create with a negative rate", append([]string{"backup", "create", "--to", filepath.Join(full, "new"), "--rate", "-1"}, tls...), 2, "--rate -1: want MB/s >= 0"},
		{"verify without a directory", []string{"backup", "verify"}, 2, "want one directory"},
		{"verify a directory without a manifest", []string{"backup", "verify", full}, 1, "manifest.json"},
		{"restore without flags", []string{"backup", "restore"}, 2, "--from, --config, --node, --data-dir required"},
		{"restore from no backup", []string{"backup", "restore", "--from", full, "--config", cfg, "--node", "r1", "--data-dir", filepath.Join(full, "d")}, 1, "restore refused"},
		{"drop without a marker", []string{"backup", "drop"}, 2, "want one marker"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runRoot(t, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Errorf("exit code %d, stdout %q, stderr %q; want %d, nothing, and %q", code, stdout, stderr, tc.code, tc.want)
			}
		})
	}
}
