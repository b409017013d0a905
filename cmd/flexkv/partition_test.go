package main

import (
	"encoding/json"
	"strings"
	"testing"

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
