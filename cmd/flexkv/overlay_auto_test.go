package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/partition"
)

// startLatencyCluster starts the embedded configuration's 3x3 cluster (TLS
// on) with the aws-12 latency matrix in its configuration, as a cluster
// whose overlay the search can rank, and returns its configuration file.
func startLatencyCluster(t *testing.T) string {
	t.Helper()
	csv, err := filepath.Abs("../../configs/aws-12-regions-latency-ms.csv")
	if err != nil {
		t.Fatal(err)
	}
	_, path, _ := startEmbeddedCluster(t, func(cfg *partition.ClusterConfig) { cfg.Latency = csv })
	return path
}

// TestOverlayApplyAuto: apply auto collects the destination sets the entry
// groups counted in the epoch, and applies the search's suggestion only
// past --min-gain; watch does it in a loop, one JSON object per look; the
// counts of a new epoch start from nothing.
func TestOverlayApplyAuto(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster run")
	}
	path := startLatencyCluster(t)
	auto := func(args ...string) autoOutcome {
		t.Helper()
		code, out, stderr := runCmd(t, newRootCmd(), append([]string{"overlay", "apply", "auto", "--config", path, "--json"}, args...)...)
		var o autoOutcome
		if code != 0 || json.Unmarshal([]byte(out), &o) != nil {
			t.Fatalf("apply auto %q: exit %d, out %q, stderr %q", args, code, out, stderr)
		}
		return o
	}
	if o := auto(); o.Epoch != 1 || o.Counted != 0 || o.Applied || !strings.Contains(o.Reason, "no request counted") {
		t.Errorf("before any request: %+v, want nothing counted at epoch 1", o)
	}
	// Transactions between eu-west-3 and eu-central-1, which the
	// configured overlay ranks below eu-west-1.
	const txns = 20
	for i := range txns {
		body := fmt.Sprintf(`{"then":[{"op":"put","key":"w/0003/k%d","value":"1"},{"op":"put","key":"w/0005/k%d","value":"1"}]}`, i, i)
		if code, _, stderr := runCmd(t, newRootCmd(), "kv", "txn", "--config", path, "--json", body); code != 0 {
			t.Fatalf("txn %d: exit %d, %s", i, code, stderr)
		}
	}
	o := auto("--min-gain", "99")
	if o.Counted < txns || o.Applied || !strings.Contains(o.Reason, "below") || len(o.Suggested) != 3 || !(o.FirstMs > 0) {
		t.Errorf("with --min-gain 99: %+v, want %d or more counted, a suggestion, nothing applied", o, txns)
	}
	o = auto("--min-gain", "0")
	if !o.Applied || o.NewEpoch != 2 || o.GainPct < 0 {
		t.Fatalf("with --min-gain 0: %+v, want the suggestion applied, epoch 2", o)
	}
	// The new epoch counts from nothing; watch looks twice.
	code, out, stderr := runCmd(t, newRootCmd(), "overlay", "watch", "--config", path, "--every", "50ms", "--count", "2", "--json")
	dec := json.NewDecoder(strings.NewReader(out))
	looks := 0
	for dec.More() {
		var w autoOutcome
		if err := dec.Decode(&w); err != nil {
			t.Fatalf("watch output %q: %v", out, err)
		}
		looks++
		if w.Epoch != 2 || w.Applied || strings.Join(w.Overlay, ",") != strings.Join(o.Suggested, ",") {
			t.Errorf("watch look %d: %+v, want epoch 2 with the applied overlay %v, nothing more applied", looks, w, o.Suggested)
		}
	}
	if code != 0 || looks != 2 {
		t.Errorf("watch: exit %d, %d looks, stderr %q; want 2", code, looks, stderr)
	}
	for _, tc := range []struct {
		args []string
		text string
	}{
		{[]string{"overlay", "apply", "auto", "--config", path, "--min-gain", "150"}, "--min-gain 150"},
		{[]string{"overlay", "watch", "--config", path, "--every", "0s"}, "--every 0s"},
		{[]string{"overlay", "watch", "--config", path, "--latency-mode", "fast"}, "--latency-mode"},
	} {
		if code, _, stderr := runCmd(t, newRootCmd(), tc.args...); code != 2 || !strings.Contains(stderr, tc.text) {
			t.Errorf("%q: exit %d, stderr %q; want 2 naming %q", tc.args, code, stderr, tc.text)
		}
	}
}
