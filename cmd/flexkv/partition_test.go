package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flexkv/flexkv/partition"
)

// checkPartitionList: flexkv partition list shows every partition of cfg
// with its range and owner (the cluster at epoch, after changes of its
// ranks, which renumber no owner), in key order, as a table and as JSON.
func checkPartitionList(t *testing.T, cfg *partition.ClusterConfig, path string, epoch uint64) {
	t.Helper()
	code, out, stderr := runCmd(t, newRootCmd(), "partition", "list", "--config", path, "--json")
	if code != 0 {
		t.Fatalf("partition list --json: exit %d, stderr %q", code, stderr)
	}
	want := map[string]partition.PartitionConfig{}
	for _, p := range cfg.Partitions {
		want[p.Name] = p
	}
	var prev string
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, line := range lines {
		var r partitionRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("partition list --json line %q: %v", line, err)
		}
		p, ok := want[r.Partition]
		switch {
		case !ok:
			t.Errorf("partition list: %q is not a partition of the cluster", r.Partition)
		case r.Start != p.Start || r.End != p.End || r.Group != p.Group || r.Replicated != p.Replicated || r.Epoch != epoch:
			t.Errorf("partition list: %+v; want %+v at epoch %d", r, p, epoch)
		case r.Start < prev:
			t.Errorf("partition list: %q listed after a range that starts at %q", r.Start, prev)
		}
		prev = r.Start
	}
	if len(lines) != len(cfg.Partitions) {
		t.Errorf("partition list: %d lines, want one per partition (%d)", len(lines), len(cfg.Partitions))
	}
	code, out, _ = runCmd(t, newRootCmd(), "partition", "list", "--config", path)
	first := cfg.Partitions[0]
	if code != 0 || !strings.HasPrefix(out, "PARTITION") || !strings.Contains(out, first.Name) || !strings.Contains(out, `"`+first.Start+`"`) {
		t.Errorf("partition list: exit %d, table %q; want a header and %s's row", code, out, first.Name)
	}
	if code, _, stderr := runCmd(t, newRootCmd(), "partition", "list", "extra", "--config", path); code != 2 || !strings.Contains(stderr, "partition list") {
		t.Errorf("partition list with an argument: exit %d, stderr %q; want 2", code, stderr)
	}
}

// TestPartitionMove moves a partition of a running cluster (3 groups x 3
// replicas, TLS on) with flexkv partition move: bad input refused before
// anything is sent (exit 2); a move with --wait (JSON: done at epoch 3)
// after which partition list names the new owner and the keys read back
// through it; a move back without --wait, which list shows under way or
// done, and which ends at epoch 5.
func TestPartitionMove(t *testing.T) {
	cfg, path, _ := startStatusCluster(t)
	run := func(args ...string) (int, string, string) {
		t.Helper()
		return runCmd(t, newRootCmd(), append(args, "--config", path)...)
	}
	for i := range 20 {
		if code, _, stderr := run("kv", "put", fmt.Sprintf("w/0001/k%02d", i), fmt.Sprintf("v%d", i)); code != 0 {
			t.Fatalf("kv put: exit %d, stderr %q", code, stderr)
		}
	}
	from, to := cfg.Groups[0].Name, cfg.Groups[1].Name
	for _, tc := range []struct {
		args []string
		text string
	}{
		{[]string{"partition", "move", "w0009", "--to", to}, `unknown partition "w0009"`},
		{[]string{"partition", "move", "item", "--to", to}, "replicated"},
		{[]string{"partition", "move", "w0001", "--to", from}, "is group " + from + "'s already"},
		{[]string{"partition", "move", "w0001", "--to", "mars"}, `unknown group "mars"`},
		{[]string{"partition", "move", "w0001"}, "--to GROUP is required"},
		{[]string{"partition", "move", "--to", to}, "want one PARTITION"},
	} {
		if code, _, stderr := run(tc.args...); code != 2 || !strings.Contains(stderr, tc.text) {
			t.Errorf("%q: exit %d, stderr %q; want 2 naming %q", tc.args, code, stderr, tc.text)
		}
	}
	code, out, stderr := run("partition", "move", "w0001", "--to", to, "--wait", "--json")
	var got struct {
		Partition, To string
		Epoch         uint64
		Done          bool
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || !got.Done || got.Epoch != 3 || got.Partition != "w0001" || got.To != to {
		t.Fatalf("partition move --wait --json: exit %d, out %q, stderr %q; want done at epoch 3", code, out, stderr)
	}
	if owner := partitionOwner(t, path, "w0001"); owner.Group != to || owner.MovingTo != "" || owner.Epoch != 3 {
		t.Errorf("partition list after the move: %+v, want w0001 at %s, not moving, epoch 3", owner, to)
	}
	for i := range 20 {
		code, out, stderr := run("kv", "get", fmt.Sprintf("w/0001/k%02d", i))
		if code != 0 || strings.TrimSpace(out) != fmt.Sprintf("v%d", i) {
			t.Fatalf("kv get w/0001/k%02d after the move: exit %d, out %q, stderr %q", i, code, out, stderr)
		}
	}
	code, out, stderr = run("partition", "move", "w0001", "--to", from)
	if code != 0 || !strings.Contains(out, "moving to group "+from) {
		t.Fatalf("partition move back: exit %d, out %q, stderr %q", code, out, stderr)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		owner := partitionOwner(t, path, "w0001")
		if owner.Group == from && owner.MovingTo == "" {
			if owner.Epoch != 5 {
				t.Errorf("moved back at epoch %d, want 5", owner.Epoch)
			}
			break
		}
		if owner.MovingTo != "" && owner.MovingTo != from {
			t.Fatalf("partition list: w0001 moving to %s, want %s", owner.MovingTo, from)
		}
		if time.Now().After(deadline) {
			t.Fatalf("w0001 not back at %s within 30s: %+v", from, owner)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, out, _ := run("kv", "get", "w/0001/k07"); code != 0 || strings.TrimSpace(out) != "v7" {
		t.Errorf("kv get after moving back: exit %d, out %q", code, out)
	}
}

// partitionOwner returns partition name's row of flexkv partition list
// --json.
func partitionOwner(t *testing.T, path, name string) partitionRow {
	t.Helper()
	code, out, stderr := runCmd(t, newRootCmd(), "partition", "list", "--config", path, "--json")
	if code != 0 {
		t.Fatalf("partition list: exit %d, stderr %q", code, stderr)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var r partitionRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("partition list line %q: %v", line, err)
		}
		if r.Partition == name {
			return r
		}
	}
	t.Fatalf("partition list: no %s", name)
	return partitionRow{}
}
