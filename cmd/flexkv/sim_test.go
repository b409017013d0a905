package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/multicast/sim"
)

// runSim runs `flexkv sim args...` in-process.
func runSim(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCmd(t, newSimCmd(), args...)
}

func TestSimTree(t *testing.T) {
	args := []string{"--protocol", "tree", "--groups", "12", "--messages", "200", "--seed", "4",
		"--dst-max", "3", "--drop", "0.1", "--dup", "0.1", "--partition", "0.3", "--jitter-ms", "20", "-v"}
	code, out, errOut := runSim(t, args...)
	if code != 0 {
		t.Fatalf("exit code %d, want 0; stderr:\n%s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], "ok: 200 messages, 12 groups, 12 replicas, ") {
		t.Fatalf("first line %q, want the checker's ok summary", lines[0])
	}
	for _, want := range []string{"tree, 12 groups: 200 multicasts", "sends msg=", "acks/multicast", "notifs/multicast", "simulated "} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("counts line %q lacks %q", lines[1], want)
		}
	}
	// -v: a header and one row per group, eu-west-3 (T1's root) among them.
	if len(lines) != 2+1+12 || !strings.HasPrefix(lines[3], "eu-north-1") || !strings.Contains(out, "\neu-west-3 ") {
		t.Fatalf("per-group table missing or wrong:\n%s", out)
	}
	// The same flags replay the same run.
	if _, again, _ := runSim(t, args...); again != out {
		t.Fatalf("second run printed\n%s\nwant\n%s", again, out)
	}
}

// TestSimDeliveryLog: the log flexkv sim writes passes flexkv check-log.
func TestSimDeliveryLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.jsonl")
	code, out, errOut := runSim(t, "--protocol", "tree", "--groups", "5", "--messages", "100", "--seed", "9",
		"--drop", "0.1", "--delivery-log", path)
	if code != 0 {
		t.Fatalf("sim exit code %d, want 0; stderr:\n%s", code, errOut)
	}
	summary := strings.SplitN(out, "\n", 2)[0]
	code, checked, errOut := runCheckLog(t, path, "--complete")
	if code != 0 {
		t.Fatalf("check-log exit code %d, want 0; stderr:\n%s", code, errOut)
	}
	if got := strings.TrimSpace(checked); got != summary {
		t.Fatalf("check-log says %q, sim said %q", got, summary)
	}
}

func TestSimFailedRun(t *testing.T) {
	code, _, errOut := runSim(t, "--protocol", "tree", "--groups", "4", "--messages", "50", "--seed", "2", "--events-max", "20")
	if code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	for _, want := range []string{"seed 2", "20 events processed, the bound",
		"replay: go run ./cmd/flexkv sim --protocol tree --groups 4 --messages 50 --seed 2 --events-max 20"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr %q lacks %q", errOut, want)
		}
	}
}

func TestSimBadFlags(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "never.jsonl")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--groups", "3"}, "--protocol is required"},
		{[]string{"--protocol", "paxos"}, `unknown protocol "paxos"`},
		{[]string{"--protocol", "tree", "--groups", "2"}, "groups 2 out of range"},
		{[]string{"--protocol", "tree", "--messages", "0"}, "messages 0 out of range"},
		{[]string{"--protocol", "tree", "--drop", "0.7"}, "drop 0.7 out of range"},
		{[]string{"--protocol", "tree", "--dup", "abc"}, `invalid argument "abc" for "--dup"`},
		{[]string{"--protocol", "tree", "--dst-max", "9"}, "dst-max 9 out of range"},
		{[]string{"--protocol", "tree", "--gc-ticks", "2"}, "gc-ticks 2: want 0, or a positive count with protocol flexcast"},
		{[]string{"--protocol", "tree", "--groups", "5", "--tree", "T2"}, "need the aws-12 matrix"},
		{[]string{"--protocol", "tree", "--overlay", "O7"}, `unknown overlay "O7"`},
		{[]string{"--protocol", "tree", "--latency-mode", "slow"}, `unknown latency mode "slow"`},
		{[]string{"--protocol", "tree", "--no-such-flag"}, "unknown flag: --no-such-flag"},
		{[]string{"--protocol", "tree", "stray"}, `unexpected arguments ["stray"]`},
		{[]string{"--protocol", "tree", "--partition", "2", "--delivery-log", logPath}, "partition 2 out of range"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runSim(t, tc.args...)
			if code != 2 {
				t.Fatalf("exit code %d, want 2; stdout %q stderr %q", code, out, errOut)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Fatalf("stderr %q lacks %q", errOut, tc.want)
			}
		})
	}
	if _, err := os.Stat(logPath); !os.IsNotExist(err) {
		t.Fatalf("a bad flag left a delivery log behind (stat: %v)", err)
	}
}

// TestSimReplayCommand: the command a run prints to replay it reproduces the
// run byte for byte, with every field of the configuration set.
func TestSimReplayCommand(t *testing.T) {
	cfg := sim.Config{
		Protocol: protocol.Tree, Groups: 12, Messages: 80, Seed: -17, DstMax: 4, LatencyMode: sim.LatencyPaper,
		Overlay: "O2", Tree: "T2", Locality: 0.3, GapMs: 2.5, Drop: 0.1, Dup: 0.05, Partition: 0.4, JitterMs: 12.5,
		OutboxMax: 3, HoldbackMax: 2, LivenessMs: 60000, EventsMax: 1000000,
	}
	var want bytes.Buffer
	cfg.DeliveryLog = &want
	if _, err := sim.Run(cfg); err != nil {
		t.Fatal(err)
	}
	prefix := "go run ./cmd/flexkv sim "
	line := cfg.Command()
	if !strings.HasPrefix(line, prefix) {
		t.Fatalf("command %q does not start with %q", line, prefix)
	}
	path := filepath.Join(t.TempDir(), "replay.jsonl")
	args := append(strings.Fields(strings.TrimPrefix(line, prefix)), "--delivery-log", path)
	if code, _, errOut := runSim(t, args...); code != 0 {
		t.Fatalf("replay exit code %d; stderr:\n%s", code, errOut)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("replay log (%d bytes) differs from the run's (%d bytes)", len(got), want.Len())
	}
}
