package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestOverlayApply applies the running overlay twice to a running cluster
// (3 groups x 3 replicas, TLS on): epochs 2 and 3; the refusals: an ended
// epoch by the cluster (exit 1), bad input before anything is sent (exit
// 2); then other ranks and back (epochs 4 and 5, the second at the new
// lowest rank), which flexkv status shows.
func TestOverlayApply(t *testing.T) {
	cfg, path, l := startStatusCluster(t)
	apply := func(args ...string) (int, string, string) {
		t.Helper()
		return runCmd(t, newRootCmd(), append([]string{"overlay", "apply", "--config", path}, args...)...)
	}
	order := strings.Join([]string{cfg.Groups[0].Name, cfg.Groups[1].Name, cfg.Groups[2].Name}, ",")
	if code, out, stderr := apply(order); code != 0 || out != "epoch 2: overlay "+order+"\n" {
		t.Fatalf("apply %s: exit %d, out %q, stderr %q", order, code, out, stderr)
	}
	code, out, stderr := apply(order, "--json")
	var got struct {
		Epoch   uint64   `json:"epoch"`
		Overlay []string `json:"overlay"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Epoch != 3 || strings.Join(got.Overlay, ",") != order {
		t.Fatalf("apply --json: exit %d, out %q, stderr %q", code, out, stderr)
	}
	for _, tc := range []struct {
		args []string
		code int
		text string
	}{
		{[]string{order, "--epoch", "1"}, 1, "epoch changed"},
		{[]string{cfg.Groups[0].Name + ",mars," + cfg.Groups[2].Name}, 2, `"mars" is not a group`},
		{[]string{cfg.Groups[0].Name + "," + cfg.Groups[1].Name}, 2, "missing " + cfg.Groups[2].Name},
		{[]string{order + "," + cfg.Groups[0].Name}, 2, "listed twice"},
		{[]string{order, "--tree", cfg.Groups[1].Name + "=" + cfg.Groups[2].Name + "," + cfg.Groups[2].Name + "=" + cfg.Groups[1].Name}, 2, "cycle"},
		{[]string{"auto"}, 1, "no latency matrix"},
		{[]string{}, 2, "want one ORDER"},
	} {
		if code, _, stderr := apply(tc.args...); code != tc.code || !strings.Contains(stderr, tc.text) {
			t.Errorf("apply %q: exit %d, stderr %q; want %d naming %q", tc.args, code, stderr, tc.code, tc.text)
		}
	}
	// New ranks: the second group lowest. The command finds the group
	// that takes the changes in the running epoch (the first one, here).
	swapped := strings.Join([]string{cfg.Groups[1].Name, cfg.Groups[0].Name, cfg.Groups[2].Name}, ",")
	if code, out, stderr := apply(swapped); code != 0 || out != "epoch 4: overlay "+swapped+"\n" {
		t.Fatalf("apply %s: exit %d, out %q, stderr %q", swapped, code, out, stderr)
	}
	// And back, sent to the second group, the lowest rank of epoch 4.
	if code, out, stderr := apply(order); code != 0 || out != "epoch 5: overlay "+order+"\n" {
		t.Fatalf("apply %s: exit %d, out %q, stderr %q", order, code, out, stderr)
	}
	// Every group starts epoch 5 at its delivery of the change.
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, out, _ = runCmd(t, newRootCmd(), "status", "--config", path, "--json")
		behind := ""
		for _, r := range decodeRows(t, out) {
			if r.Epoch == nil || *r.Epoch != 5 {
				behind = fmt.Sprintf("%+v", r)
			}
		}
		if code == 0 && behind == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status after four changes: exit %d, row %s, want every replica at epoch 5", code, behind)
		}
		time.Sleep(50 * time.Millisecond)
	}
	checkPartitionList(t, cfg, path, 5)
	// A change needs every group: with one group down, refused naming it,
	// and nothing changed.
	down := cfg.Groups[2]
	for _, r := range down.Replicas {
		if err := l.Stop(r.ID); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, stderr := apply(order, "--timeout", "5s"); code != 1 || !strings.Contains(stderr, "a change needs every group") || !strings.Contains(stderr, down.Name) {
		t.Errorf("apply with %s down: exit %d, stderr %q; want 1 naming it", down.Name, code, stderr)
	}
}
