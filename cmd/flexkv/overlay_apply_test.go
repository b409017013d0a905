package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestOverlayApply applies the running overlay twice to a running cluster
// (3 groups x 3 replicas, TLS on): epochs 2 and 3, which flexkv status
// shows; then the refusals: an ended epoch and another overlay by the
// cluster (exit 1), bad input before anything is sent (exit 2).
func TestOverlayApply(t *testing.T) {
	cfg, path, _ := startStatusCluster(t)
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
		{[]string{cfg.Groups[1].Name + "," + cfg.Groups[0].Name + "," + cfg.Groups[2].Name}, 1, "alters the overlay"},
		{[]string{cfg.Groups[0].Name + ",mars," + cfg.Groups[2].Name}, 2, `"mars" is not a group`},
		{[]string{cfg.Groups[0].Name + "," + cfg.Groups[1].Name}, 2, "missing " + cfg.Groups[2].Name},
		{[]string{order + "," + cfg.Groups[0].Name}, 2, "listed twice"},
		{[]string{order, "--tree", cfg.Groups[1].Name + "=" + cfg.Groups[2].Name + "," + cfg.Groups[2].Name + "=" + cfg.Groups[1].Name}, 2, "cycle"},
		{[]string{"auto"}, 2, "not built yet"},
		{[]string{}, 2, "want one ORDER"},
	} {
		if code, _, stderr := apply(tc.args...); code != tc.code || !strings.Contains(stderr, tc.text) {
			t.Errorf("apply %q: exit %d, stderr %q; want %d naming %q", tc.args, code, stderr, tc.code, tc.text)
		}
	}
	// Every group starts epoch 3 at its delivery of the change.
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, out, _ = runCmd(t, newRootCmd(), "status", "--config", path, "--json")
		behind := ""
		for _, r := range decodeRows(t, out) {
			if r.Epoch == nil || *r.Epoch != 3 {
				behind = fmt.Sprintf("%+v", r)
			}
		}
		if code == 0 && behind == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("status after two changes: exit %d, row %s, want every replica at epoch 3", code, behind)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
