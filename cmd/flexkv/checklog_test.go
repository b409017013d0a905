package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// runCheckLog runs `flexkv check-log args...` in-process.
func runCheckLog(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runCmd(t, newCheckLogCmd(), args...)
}

// runCmd runs a subcommand in-process and returns its exit code, stdout and
// stderr (with the error line main would print).
func runCmd(t *testing.T, cmd *cobra.Command, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		errOut.WriteString("flexkv: " + err.Error() + "\n")
		return exitCode(err), out.String(), errOut.String()
	}
	return 0, out.String(), errOut.String()
}

func writeLog(t *testing.T, dir, name string, lines ...string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const (
	mcAB  = `{"ev":"multicast","id":"c1.1","dst":["A","B"]}`
	mcAC  = `{"ev":"multicast","id":"c1.2","dst":["A","C"]}`
	mcBC  = `{"ev":"multicast","id":"c1.3","dst":["B","C"]}`
	dlA1  = `{"ev":"deliver","group":"A","replica":"r1","id":"c1.1","dst":["A","B"]}`
	dlB1  = `{"ev":"deliver","group":"B","replica":"r1","id":"c1.1","dst":["A","B"]}`
	sndAB = `{"ev":"send","from":"A","to":"B","kind":"msg","about":"c1.1","bytes":40}`
	sndCB = `{"ev":"send","from":"C","to":"B","kind":"ack","about":"c1.1","bytes":40}`
)

func TestCheckLog(t *testing.T) {
	dir := t.TempDir()
	valid := writeLog(t, dir, "valid.jsonl", mcAB, sndAB, dlA1, dlB1)
	partial := writeLog(t, dir, "partial.jsonl", mcAB, dlA1)
	foreign := writeLog(t, dir, "foreign.jsonl", mcAB, sndAB, sndCB, dlA1, dlB1)
	cycle := writeLog(t, dir, "cycle.jsonl", mcAB, mcAC, mcBC,
		// A: c1.1 < c1.2, B: c1.3 < c1.1, C: c1.2 < c1.3
		dlA1, `{"ev":"deliver","group":"A","replica":"r1","id":"c1.2","dst":["A","C"]}`,
		`{"ev":"deliver","group":"B","replica":"r1","id":"c1.3","dst":["B","C"]}`, dlB1,
		`{"ev":"deliver","group":"C","replica":"r1","id":"c1.2","dst":["A","C"]}`,
		`{"ev":"deliver","group":"C","replica":"r1","id":"c1.3","dst":["B","C"]}`)
	dups := writeLog(t, dir, "dups.jsonl", mcAB, dlA1, dlA1, dlA1, dlA1, dlA1)
	malformed := writeLog(t, dir, "malformed.jsonl", mcAB, `{"ev":"deliver","group":"A","id":"c1.1","dst":["A","B"]}`)
	logDir := filepath.Join(dir, "split")
	if err := os.Mkdir(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeLog(t, logDir, "a.jsonl", dlA1, dlB1)
	writeLog(t, logDir, "b.jsonl", mcAB, sndAB)

	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     string // the whole of stdout
		stderrHas  []string
		stderrLine int // lines on stderr, when not 0
	}{
		{name: "valid", args: []string{valid, "--complete", "--genuine"}, code: 0,
			stdout: "ok: 1 messages, 2 groups, 2 replicas, 2 deliveries, 1 sends\n"},
		{name: "directory", args: []string{logDir, "--complete", "--genuine"}, code: 0,
			stdout: "ok: 1 messages, 2 groups, 2 replicas, 2 deliveries, 1 sends\n"},
		{name: "partial without --complete", args: []string{partial}, code: 0,
			stdout: "ok: 1 messages, 2 groups, 1 replicas, 1 deliveries, 0 sends\n"},
		{name: "partial with --complete", args: []string{partial, "--complete"}, code: 1,
			stdout:    "FAIL: 1 violation: agreement: c1.1, multicast to [A B], delivered by 1 of 2 destination replicas; missing at B (no deliveries at all)\n",
			stderrHas: []string{"agreement: c1.1", "flexkv: check-log: 1 violations"}},
		{name: "foreign send without --genuine", args: []string{foreign}, code: 0,
			stdout: "ok: 1 messages, 3 groups, 2 replicas, 2 deliveries, 2 sends\n"},
		{name: "foreign send with --genuine", args: []string{foreign, "--genuine"}, code: 1,
			stdout:    "FAIL: 1 violation: genuineness: ack from C to B about c1.1 (multicast to [A B]): C is neither a destination nor notified\n",
			stderrHas: []string{"genuineness: ack from C to B"}},
		{name: "cycle", args: []string{cycle}, code: 1,
			stdout:    "FAIL: 1 violation: acyclic-order: cycle c1.1 -> c1.2 -> c1.3 -> c1.1 (orders of A, C, B)\n",
			stderrHas: []string{"acyclic-order: cycle c1.1 -> c1.2 -> c1.3 -> c1.1"}},
		{name: "details bounded", args: []string{dups, "--details", "2"}, code: 1,
			stdout:     "FAIL: 4 violations: integrity: A/r1 delivered c1.1 twice (deliveries #1 and #2) (first of 4)\n",
			stderrHas:  []string{"#1 and #3", "... and 2 more violations not shown"},
			stderrLine: 4},
		{name: "malformed", args: []string{malformed}, code: 2,
			stderrHas: []string{malformed + `:2: deliver record without "replica"`}},
		{name: "missing", args: []string{filepath.Join(dir, "nope.jsonl")}, code: 2,
			stderrHas: []string{"no such file"}},
		{name: "no path", args: nil, code: 2, stderrHas: []string{"want one PATH"}},
		{name: "two paths", args: []string{valid, valid}, code: 2, stderrHas: []string{"want one PATH"}},
		{name: "unknown flag", args: []string{valid, "--fast"}, code: 2, stderrHas: []string{"unknown flag: --fast"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCheckLog(t, tt.args...)
			if code != tt.code {
				t.Errorf("exit code = %d, want %d (stderr %q)", code, tt.code, stderr)
			}
			if stdout != tt.stdout {
				t.Errorf("stdout = %q, want %q", stdout, tt.stdout)
			}
			for _, s := range tt.stderrHas {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr = %q, want it to contain %q", stderr, s)
				}
			}
			if tt.stderrLine != 0 {
				if got := strings.Count(stderr, "\n"); got != tt.stderrLine {
					t.Errorf("stderr has %d lines, want %d: %q", got, tt.stderrLine, stderr)
				}
			}
		})
	}
}
