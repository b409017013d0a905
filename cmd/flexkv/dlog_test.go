package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
)

// TestDeliveryLogAcrossKill: a `flexkv server` killed with SIGKILL runs
// again, on restart, the entries its store had not flushed, and delivers
// their messages again; its reopened --delivery-log holds each delivery
// once (DESIGN 10.1), so that `flexkv check-log` passes on the logs of a
// run with a kill, --complete included.
func TestDeliveryLogAcrossKill(t *testing.T) {
	if testing.Short() {
		t.Skip("nine server processes and two gTPC-C runs")
	}
	dir := t.TempDir()
	certsDir, _ := copyCerts(t)
	t.Setenv("FLEXKV_CERTS_DIR", certsDir)
	cfg := testcluster.Layout(t, "flexcast", testaddr.Command)
	path := configFile(t, cfg)
	logs := filepath.Join(dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	start := func(id string) *serverProc {
		return startServer(t, dir, id, "--config", path, "--certs-dir", certsDir, "--delivery-log", filepath.Join(logs, id+".jsonl"))
	}
	procs := map[string]*serverProc{}
	for _, g := range cfg.Groups {
		for _, r := range g.Replicas {
			procs[r.ID] = start(r.ID)
		}
	}
	defer stopAll(procs)
	waitStatus(t, path, dir, 9)
	if code, _, stderr := runCmd(t, newRootCmd(), "gtpcc", "load", "--config", path); code != 0 {
		t.Fatalf("gtpcc load: exit %d: %s", code, stderr)
	}
	mix := func() {
		t.Helper()
		if code, out, stderr := runCmd(t, newRootCmd(), "gtpcc", "run", "--config", path, "--duration", "3s", "--progress", "0", "--clients", "2"); code != 0 {
			t.Fatalf("gtpcc run: exit %d: %s%s", code, out, stderr)
		}
	}
	mix()
	// A replica of the first group: its store has flushed little or
	// nothing of what it applied, so its restart runs much of it again.
	victim := cfg.Groups[0].Replicas[2].ID
	if err := procs[victim].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-procs[victim].done
	procs[victim] = start(victim)
	waitStatus(t, path, dir, 9)
	mix()
	stopAll(procs)

	code, out, stderr := runCmd(t, newRootCmd(), "check-log", logs, "--complete")
	if code != 0 {
		t.Fatalf("check-log --complete after a kill: exit %d: %s%s", code, out, stderr)
	}
	if !strings.Contains(out, "ok") {
		t.Errorf("check-log: %q", out)
	}
	t.Logf("check-log: %s", strings.TrimSpace(out))
	// The replay did repeat deliveries, and the log left them out.
	tail := tailOf(dir, victim)
	if !strings.Contains(tail, "left out the deliveries the restart repeated") {
		t.Errorf("%s's log says nothing of repeated deliveries left out:\n%s", victim, tail)
	}
}
