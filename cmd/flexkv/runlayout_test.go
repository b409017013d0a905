package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/server"
)

// aws12Layout writes configs/aws-12.yaml with every address on a free port
// into a fresh directory, beside a copy of its latency matrix, and returns
// its path and the configuration.
func aws12Layout(t *testing.T) (string, *partition.ClusterConfig) {
	t.Helper()
	cfg, _, err := loadCluster(filepath.Join("..", "..", "configs", "aws-12.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Groups {
		rs := cfg.Groups[i].Replicas
		for j := range rs {
			rs[j].Raft, rs[j].GRPC, rs[j].Peer = freeAddr(t), freeAddr(t), freeAddr(t)
		}
	}
	dir := t.TempDir()
	csv, err := os.ReadFile(filepath.Join("..", "..", "configs", cfg.Latency))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, cfg.Latency), csv, 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "cluster.yaml")
	writeConfigAt(t, path, cfg)
	return path, cfg
}

// TestOverlayFlagsBad: a bad --overlay, --tree, --overlays or --trees
// exits 2 before any cluster starts, naming the group or the choice at
// fault.
func TestOverlayFlagsBad(t *testing.T) {
	local, _ := localLayout(t, 1, true)
	aws, _ := aws12Layout(t)
	tests := []struct {
		name   string
		config string
		args   []string
		want   string
	}{
		{"unknown group", local, []string{"demo", "--overlay", "eu-west-1,eu-west-3,us-east-1"},
			`--overlay "eu-west-1,eu-west-3,us-east-1": partition: overlay[2]: "us-east-1" is not a group`},
		{"missing group", local, []string{"gtpcc", "run", "--local", "--overlay", "eu-west-1,eu-west-3"},
			`partition: overlay: lists 2 of the 3 groups, want every group once (missing "eu-central-1")`},
		{"listed twice", local, []string{"demo", "--overlay", "eu-west-3,eu-west-1,eu-west-3"},
			`partition: overlay[2]: "eu-west-3" listed twice (also overlay[0])`},
		{"unknown name", local, []string{"demo", "--overlay", "O3"}, `--overlay "O3": want O1, O2, auto, config or every group once`},
		{"aws-12 group missing", aws, []string{"demo", "--overlay", "eu-north-1,eu-central-1"}, `(missing "us-west-1", "ca-central-1", `},
		{"paper overlay on 3 groups", local, []string{"demo", "--overlay", "O1"},
			"--overlay O1: the paper's overlays and trees are of the 12 AWS regions, one group each (configs/aws-12.yaml); this configuration has 3 groups"},
		{"paper tree on 3 groups", local, []string{"demo", "--trees", "T1,T2"}, "--trees T1: the paper's overlays and trees are of the 12 AWS regions"},
		{"unknown tree", aws, []string{"demo", "--tree", "T4"}, `--tree: unknown tree "T4" (want T1, T2, T3, auto or config)`},
		{"list in --overlays", aws, []string{"demo", "--overlays", "O1,eu-north-1"}, `--overlays: unknown overlay "eu-north-1" (want O1, O2, auto or config;`},
		{"overlay twice", aws, []string{"demo", "--overlays", "O1,auto,O1"}, `--overlays "O1,auto,O1": O1 twice`},
		{"both", aws, []string{"demo", "--overlay", "O1", "--overlays", "O2,auto"}, "--overlay and --overlays: give one"},
		{"no flexcast", aws, []string{"demo", "--overlays", "O1,O2", "--protocols", "skeen"}, "--overlays compares FlexCast's overlays: --protocols has no flexcast"},
		{"auto without a workload", aws, []string{"demo", "--overlay", "auto", "--remote-item", "0"},
			"--overlay auto: overlay: a global-only workload needs remote-item and remote-payment above 0"},
		{"needs --local", aws, []string{"gtpcc", "run", "--overlay", "O1"}, "--overlay needs --local"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := slices.Concat(tt.args, []string{"--config", tt.config, "--duration", "1s", "--progress", "0"})
			if tt.args[0] == "demo" || slices.Contains(tt.args, "--local") {
				args = slices.Concat(args, []string{"--scale", testScale, "--data-dir", t.TempDir()})
			}
			code, stdout, stderr := runRoot(t, args...)
			if code != 2 || !strings.Contains(stderr, tt.want) || stdout != "" || strings.Count(stderr, "\n") != 1 {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and one line with %q", args, code, stdout, stderr, tt.want)
			}
		})
	}
}

// TestOverlayAuto: --overlay auto and --tree auto are what `flexkv overlay
// suggest` prints for the run's workload flags, the same each time; the
// paper's names resolve to the paper's regions.
func TestOverlayAuto(t *testing.T) {
	path := filepath.Join("..", "..", "configs", "aws-12.yaml")
	cfg, lat, err := loadCluster(path)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runOverlay(t, "suggest", "--config", path, "--locality", "0.9", "--remote-item", "0.05", "--seed", "7", "--json")
	if code != 0 {
		t.Fatalf("overlay suggest: exit %d, stderr %s", code, errOut)
	}
	var want overlaySuggestion
	if err := json.Unmarshal([]byte(out), &want); err != nil {
		t.Fatal(err)
	}
	opts := runOptions{}
	opts.Locality, opts.RemoteItem, opts.RemotePayment, opts.GlobalOnly, opts.Seed = 0.9, 0.05, 0.15, true, 7
	for range 2 {
		res := newLayoutResolver(cfg, lat, server.LatencyReal, opts)
		o, err := res.overlayOf("overlay", "auto")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(o, want.Overlay) {
			t.Errorf("--overlay auto: %v, want the suggestion %v", o, want.Overlay)
		}
		tr, err := res.treeOf("tree", "auto")
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(tr, want.Tree) {
			t.Errorf("--tree auto: %v, want the suggestion %v", tr, want.Tree)
		}
		// The run's prediction is the suggestion's.
		cc := *cfg
		cc.Overlay = o
		p := res.predict(localRun{protocol: "flexcast", cfg: &cc})
		if got := want.Predictions[0]; got.Name != "suggested" || p["1st"] != got.AnswerMs[0] || p["2nd"] != got.AnswerMs[1] {
			t.Errorf("--overlay auto predicts %v, suggest %v", p, got)
		}
	}
	res := newLayoutResolver(cfg, lat, server.LatencyReal, opts)
	o1, err := res.overlayOf("overlays", "O1")
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := partition.PaperOverlay("O1"); !slices.Equal(o1, want) {
		t.Errorf("O1: %v, want %v (aws-12's groups are named by region)", o1, want)
	}
	t3, err := res.treeOf("trees", "T3")
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := partition.PaperTree("T3"); !maps.Equal(t3, want) {
		t.Errorf("T3: %v, want %v", t3, want)
	}
}

// TestDemoOverlays runs the demo on aws-12 (12 groups, one replica each,
// TLS) with --overlays O1,auto: a fresh cluster for each, a results file
// for each carrying its overlay, the Table 2 layout and the model beside
// the measures.
func TestDemoOverlays(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two clusters and runs the workload")
	}
	cfg, cc := aws12Layout(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "ov.json")
	code, stdout, stderr := runRoot(t, "demo", "--config", cfg, "--overlays", "O1,auto", "--duration", "2s", "--clients", "1",
		"--scale", testScale, "--warehouses", "1-12", "--json", out, "--progress", "0", "--data-dir", filepath.Join(dir, "data"), "--check=false")
	if code != 0 {
		t.Fatalf("demo: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	res := newLayoutResolver(cc, nil, server.LatencyReal, runOptions{})
	o1, _ := res.overlayOf("overlays", "O1")
	for _, run := range []string{"O1", "auto"} {
		path := filepath.Join(dir, "ov-flexcast-"+run+".json")
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Protocol    string             `json:"protocol"`
			Run         string             `json:"run"`
			Overlay     []string           `json:"overlay"`
			Tree        map[string]string  `json:"tree"`
			PredictedMs map[string]float64 `json:"predicted_ms"`
			StepMs      float64            `json:"step_ms"`
			EntryStepMs float64            `json:"entry_step_ms"`
			AtStepMs    map[string]float64 `json:"predicted_at_step_ms"`
		}
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatal(err)
		}
		if r.Protocol != "flexcast" || r.Run != "flexcast-"+run || len(r.Overlay) != 12 || len(r.Tree) != 11 || r.PredictedMs["1st"] <= 0 || r.PredictedMs["2nd"] <= 0 {
			t.Errorf("%s: protocol %q, run %q, overlay %v, tree %v, predicted %v; want flexcast, flexcast-%s, 12 groups, 11 edges, predictions",
				path, r.Protocol, r.Run, r.Overlay, r.Tree, r.PredictedMs, run)
		}
		if r.StepMs <= 0 || r.AtStepMs["1st"] <= 0 || r.AtStepMs["2nd"] <= 0 {
			t.Errorf("%s: step %v ms, predicted at it %v; want the run's step and predictions", path, r.StepMs, r.AtStepMs)
		}
		// The clients' step holds the servers' and more (the execution,
		// the answer), and the predictions at the step use it.
		if r.EntryStepMs <= r.StepMs {
			t.Errorf("%s: step at the clients %v ms, at the servers %v; want the clients' above", path, r.EntryStepMs, r.StepMs)
		}
		if r.EntryStepMs > 0 && !strings.Contains(stdout, fmt.Sprintf("step measured %.1f ", r.EntryStepMs)) {
			t.Errorf("demo: stdout lacks the step at the clients, %.1f ms", r.EntryStepMs)
		}
		if run == "O1" && !slices.Equal(r.Overlay, o1) {
			t.Errorf("%s: overlay %v, want O1 %v", path, r.Overlay, o1)
		}
		if want := "flexcast-" + run + ": overlay " + run + ": " + strings.Join(r.Overlay, ",") + "\n"; !strings.Contains(stdout, want) {
			t.Errorf("demo: stdout lacks %q", want)
		}
	}
	// The tables are right-aligned: match their rows by fields.
	for _, want := range []string{
		`(?m)^\s*latency \(ms\)\s+1st mean\s+p90\s+p95\s+p99\s+2nd mean\s+p90\s+p95\s+p99\s+3rd mean`,
		`(?m)^\s*model vs run \(ms\)\s+1st predicted\s+measured\s+off\s+2nd predicted`,
		`(?m)^\s*flexcast-O1(\s+[0-9.]+){8}`, `(?m)^\s*flexcast-auto(\s+[0-9.]+){8}`,
		`(?m)^\s*flexcast-auto\s+[0-9.]+\s+[0-9.]+\s+[-+][0-9]+%`,
		`(?m)^\s*step measured [0-9.]+\s+[0-9.]+\s+[0-9.]+\s+[-+][0-9]+%`,
	} {
		if !regexp.MustCompile(want).MatchString(stdout) {
			t.Errorf("demo: stdout lacks %s:\n%s", want, stdout)
		}
	}
}
