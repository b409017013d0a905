package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/flexkv/flexkv/gtpcc"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/overlay"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/server"
)

// The overlay and tree of a --local run (issue 12): --overlay and --tree
// replace the configuration's for every run; --overlays and --trees run
// FlexCast on each overlay, the tree protocol on each tree, a fresh
// cluster each, as --protocols does for protocols. Every run's report
// carries the model's prediction for it (package overlay), printed beside
// what it measured.

// layoutHelp ends the help of gtpcc run and demo.
const layoutHelp = `
Overlay and tree (with --local): --overlay O1|O2|auto|a,b,c,... and --tree
T1|T2|T3|auto replace the configuration's for every run: the paper's (on the
12 aws-12 regions only), the suggestion of 'flexkv overlay suggest' for this
run's --locality, --remote-item, --remote-payment, --global-only, --seed and
latency matrix (its defaults: objective first, keeping the configured
overlay's and tree's last answer), or every group once, lowest FlexCast rank
first. --overlays O1,O2,auto runs FlexCast once per overlay and --trees
T1,T2,T3 the tree protocol once per tree (config: the configuration's), a
fresh cluster each, and prints them side by side, also in the paper's Table 2
layout (per destination: mean, p90, p95, p99). Each run's results JSON
carries its overlay, tree, run name and prediction ("overlay", "tree",
"run", "predicted_ms"); with several runs, one file each, FILE with
-<run> before its extension (results-flexcast-O1.json).

Model: every run with a latency matrix prints the mean 1st/2nd/3rd answer
that the model of 'flexkv overlay suggest' predicts for it (contention-free,
a 2 ms commit per step, one client per group, its defaults) beside what it
measured.`

// The choices that are names rather than lists of groups.
const (
	layoutAuto   = "auto"   // the overlay package's suggestion
	layoutConfig = "config" // the configuration's own
)

// addLayoutFlags adds --overlay, --tree, --overlays and --trees; with is
// the prefix of their help.
func addLayoutFlags(cmd *cobra.Command, with string) {
	f := cmd.Flags()
	f.String("overlay", "", with+"FlexCast overlay of the cluster, replacing the configuration's: O1 or O2 (the paper's, on the aws-12 regions), "+
		"auto (flexkv overlay suggest's for this run's workload flags, latency matrix and --seed) or every group once, lowest rank first: a,b,c,...")
	f.String("tree", "", with+"tree of the cluster, replacing the configuration's: T1, T2 or T3 (the paper's, on the aws-12 regions) or auto (the suggestion)")
	f.String("overlays", "", with+"run FlexCast on a fresh cluster for each overlay, e.g. O1,O2,auto (config: the configuration's) and print them side by side")
	f.String("trees", "", with+"run the tree protocol on a fresh cluster for each tree, e.g. T1,T2,T3,auto (config: the configuration's)")
}

// layoutFlags are the flags addLayoutFlags adds.
var layoutFlags = []string{"overlay", "tree", "overlays", "trees"}

// localRun is one run of a --local comparison: a protocol on a cluster
// configuration.
type localRun struct {
	protocol string
	// name is the run's name in tables and file names, "" when the run
	// is its protocol's only one.
	name string
	cfg  *partition.ClusterConfig
	// overlayName and treeName say how the run's overlay and tree were
	// chosen ("" the configuration's).
	overlayName, treeName string
}

// layoutResolver resolves overlay and tree choices for one configuration
// and run.
type layoutResolver struct {
	cfg      *partition.ClusterConfig
	rtt      [][]float64 // nil without a latency matrix
	workload overlay.Workload
	seed     uint64
	// suggestion is the auto overlay and tree, computed once.
	suggestion *overlaySuggestion
}

func newLayoutResolver(cfg *partition.ClusterConfig, lat *partition.Latency, mode server.LatencyMode, opts runOptions) *layoutResolver {
	r := &layoutResolver{
		cfg:  cfg,
		seed: opts.Seed,
		workload: overlay.Workload{
			Locality: opts.Locality, RemoteItem: opts.RemoteItem, RemotePayment: opts.RemotePayment, GlobalOnly: opts.GlobalOnly,
		},
	}
	if lat != nil {
		r.rtt = clusterRTT(cfg, lat, mode)
	}
	return r
}

// suggest returns the suggestion for the run's workload, the same as
// `flexkv overlay suggest` with the run's workload flags and --seed.
func (r *layoutResolver) suggest(flag string) (*overlaySuggestion, error) {
	if r.suggestion != nil {
		return r.suggestion, nil
	}
	if r.rtt == nil {
		return nil, fmt.Errorf("--%s auto: the configuration names no latency matrix (its latency field) to suggest for", flag)
	}
	if len(r.cfg.Groups) < 2 {
		return nil, fmt.Errorf("--%s auto: the configuration has %d group, want two or more", flag, len(r.cfg.Groups))
	}
	d, err := overlay.Destinations(r.rtt, r.workload)
	if err != nil {
		return nil, fmt.Errorf("--%s auto: %w", flag, err)
	}
	sp := defaultSuggest
	sp.Seed = r.seed
	s, err := suggestOverlay(r.cfg, r.rtt, d, sp)
	if err != nil {
		return nil, fmt.Errorf("--%s auto: %w", flag, err)
	}
	r.suggestion = s
	return s, nil
}

// paperGroups returns the group of each aws-12 region, or an error when
// cfg's groups are not the 12 regions, one group each.
func paperGroups(cfg *partition.ClusterConfig, flag, name string) (map[string]string, error) {
	o1, _ := partition.PaperOverlay("O1")
	names, regions := groupRegions(cfg)
	byRegion := make(map[string]string, len(regions))
	for i, r := range regions {
		if _, dup := byRegion[r]; dup {
			byRegion[r] = ""
			continue
		}
		byRegion[r] = names[i]
	}
	ok := len(cfg.Groups) == len(o1)
	for _, r := range o1 {
		ok = ok && byRegion[r] != ""
	}
	if !ok {
		return nil, fmt.Errorf("--%s %s: the paper's overlays and trees are of the 12 AWS regions, one group each (configs/aws-12.yaml); "+
			"this configuration has %d groups in regions %s", flag, name, len(cfg.Groups), strings.Join(regions, ", "))
	}
	return byRegion, nil
}

// overlayOf returns the overlay of choice: O1, O2, auto, config, or
// group names joined by commas.
func (r *layoutResolver) overlayOf(flag, choice string) ([]string, error) {
	switch {
	case choice == layoutConfig:
		return slices.Clone(r.cfg.Overlay), nil
	case choice == layoutAuto:
		s, err := r.suggest(flag)
		if err != nil {
			return nil, err
		}
		return slices.Clone(s.Overlay), nil
	case slices.Contains(partition.PaperOverlayNames, choice):
		byRegion, err := paperGroups(r.cfg, flag, choice)
		if err != nil {
			return nil, err
		}
		regions, _ := partition.PaperOverlay(choice)
		out := make([]string, len(regions))
		for i, region := range regions {
			out[i] = byRegion[region]
		}
		return out, nil
	}
	if flag == "overlays" {
		return nil, fmt.Errorf("--overlays: unknown overlay %q (want O1, O2, auto or config; a list of groups goes to --overlay)", choice)
	}
	var out []string
	for _, g := range strings.Split(choice, ",") {
		out = append(out, strings.TrimSpace(g))
	}
	// The configuration's own check names the group at fault: not a
	// group, listed twice, or missing.
	cc := *r.cfg
	cc.Overlay = out
	if err := protocol.Validate(&cc); err != nil {
		if len(out) == 1 {
			return nil, fmt.Errorf("--%s %q: want O1, O2, auto, config or every group once, a,b,c,...: %w", flag, choice, err)
		}
		return nil, fmt.Errorf("--%s %q: %w", flag, choice, err)
	}
	return out, nil
}

// treeOf returns the tree of choice: T1, T2, T3, auto or config.
func (r *layoutResolver) treeOf(flag, choice string) (map[string]string, error) {
	switch {
	case choice == layoutConfig:
		return maps.Clone(r.cfg.Tree), nil
	case choice == layoutAuto:
		s, err := r.suggest(flag)
		if err != nil {
			return nil, err
		}
		return maps.Clone(s.Tree), nil
	case slices.Contains(partition.PaperTreeNames, choice):
		byRegion, err := paperGroups(r.cfg, flag, choice)
		if err != nil {
			return nil, err
		}
		t, _ := partition.PaperTree(choice)
		out := make(map[string]string, len(t))
		for c, p := range t {
			out[byRegion[c]] = byRegion[p]
		}
		return out, nil
	}
	return nil, fmt.Errorf("--%s: unknown tree %q (want T1, T2, T3, auto or config)", flag, choice)
}

// splitChoices splits a list flag's value; "" is none.
func splitChoices(flag, s string) ([]string, error) {
	if s == "" {
		return nil, nil
	}
	var out []string
	for _, c := range strings.Split(s, ",") {
		c = strings.TrimSpace(c)
		if slices.Contains(out, c) {
			return nil, fmt.Errorf("--%s %q: %s twice", flag, s, c)
		}
		out = append(out, c)
	}
	return out, nil
}

// planRuns returns the runs of a --local invocation: one per protocol of
// protocols on cfg with --overlay and --tree applied, where FlexCast runs
// once per overlay of --overlays and the tree protocol once per tree of
// --trees. protocolsSet tells whether --protocols was given: without it,
// --overlays and --trees choose the protocols. Every run's configuration
// is checked (protocol.Validate) before any cluster starts.
func planRuns(v *viper.Viper, cfg *partition.ClusterConfig, protocols []string, protocolsSet bool, res *layoutResolver) ([]localRun, error) {
	for _, pair := range [][2]string{{"overlay", "overlays"}, {"tree", "trees"}} {
		if v.GetString(pair[0]) != "" && v.GetString(pair[1]) != "" {
			return nil, fmt.Errorf("--%s and --%s: give one (--%s runs each of its choices)", pair[0], pair[1], pair[1])
		}
	}
	base := *cfg
	var baseOverlay, baseTree string
	if c := v.GetString("overlay"); c != "" {
		o, err := res.overlayOf("overlay", c)
		if err != nil {
			return nil, err
		}
		base.Overlay, baseOverlay = o, c
	}
	if c := v.GetString("tree"); c != "" {
		t, err := res.treeOf("tree", c)
		if err != nil {
			return nil, err
		}
		base.Tree, baseTree = t, c
	}
	overlays, err := splitChoices("overlays", v.GetString("overlays"))
	if err != nil {
		return nil, err
	}
	trees, err := splitChoices("trees", v.GetString("trees"))
	if err != nil {
		return nil, err
	}
	if !protocolsSet && (len(overlays) > 0 || len(trees) > 0) {
		protocols = nil
		if len(overlays) > 0 {
			protocols = append(protocols, "flexcast")
		}
		if len(trees) > 0 {
			protocols = append(protocols, "tree")
		}
	}
	if len(overlays) > 0 && !slices.Contains(protocols, "flexcast") {
		return nil, errors.New("--overlays compares FlexCast's overlays: --protocols has no flexcast")
	}
	if len(trees) > 0 && !slices.Contains(protocols, "tree") {
		return nil, errors.New("--trees compares the tree protocol's trees: --protocols has no tree")
	}
	var runs []localRun
	for _, p := range protocols {
		switch {
		case p == "flexcast" && len(overlays) > 0:
			for _, c := range overlays {
				o, err := res.overlayOf("overlays", c)
				if err != nil {
					return nil, err
				}
				cc := base
				cc.Overlay = o
				runs = append(runs, localRun{protocol: p, name: p + "-" + c, cfg: &cc, overlayName: c, treeName: baseTree})
			}
		case p == "tree" && len(trees) > 0:
			for _, c := range trees {
				t, err := res.treeOf("trees", c)
				if err != nil {
					return nil, err
				}
				cc := base
				cc.Tree = t
				runs = append(runs, localRun{protocol: p, name: p + "-" + c, cfg: &cc, overlayName: baseOverlay, treeName: c})
			}
		default:
			cc := base
			runs = append(runs, localRun{protocol: p, cfg: &cc, overlayName: baseOverlay, treeName: baseTree})
		}
	}
	for _, r := range runs {
		cc := *r.cfg
		cc.Protocol = r.protocol
		if err := protocol.Validate(&cc); err != nil {
			what := ""
			switch {
			case r.treeName != "" && r.overlayName != "":
				what = fmt.Sprintf(" (overlay %s, tree %s)", r.overlayName, r.treeName)
			case r.treeName != "":
				what = fmt.Sprintf(" (tree %s)", r.treeName)
			case r.overlayName != "":
				what = fmt.Sprintf(" (overlay %s)", r.overlayName)
			}
			return nil, fmt.Errorf("%s%s: %w", r.protocol, what, err)
		}
	}
	return runs, nil
}

// predict returns the model's mean 1st, 2nd and 3rd answer for run, by
// gtpcc's destination names, or nil when the model cannot say (no latency
// matrix, a workload it does not model).
func (r *layoutResolver) predict(run localRun) map[string]float64 {
	return r.predictAt(run, defaultSuggest.CommitMs)
}

// predictAt is predict with a commit of commitMs.
func (r *layoutResolver) predictAt(run localRun, commitMs float64) map[string]float64 {
	if r.rtt == nil || len(r.cfg.Groups) < 2 {
		return nil
	}
	d, err := overlay.Destinations(r.rtt, r.workload)
	if err != nil {
		return nil
	}
	sp := defaultSuggest
	sp.CommitMs = commitMs
	m := sp.model(r.rtt)
	names, _ := groupRegions(run.cfg)
	var p overlay.Prediction
	switch run.protocol {
	case "flexcast":
		order := make([]int, len(names))
		for i := range order {
			order[i] = i
		}
		for rank, g := range run.cfg.Overlay {
			order[rank] = slices.Index(names, g)
		}
		if p, err = m.FlexCast(d, order); err != nil {
			return nil
		}
	case "skeen":
		p = m.Skeen(d)
	case "tree":
		if p, err = m.Tree(d, overlay.TreeParents(run.cfg.Tree, names)); err != nil {
			return nil
		}
	default:
		return nil
	}
	out := make(map[string]float64)
	for k, name := range gtpcc.DestinationNames() {
		if k < len(p.AnswerMs) && p.AnswerMs[k] > 0 {
			out[name] = p.AnswerMs[k]
		}
	}
	return out
}

// printLayout prints the overlay and the tree a run starts with, when a
// flag chose them.
func printLayout(w io.Writer, label string, run localRun) {
	if run.overlayName != "" {
		fmt.Fprintf(w, "%s: overlay %s: %s\n", label, run.overlayName, strings.Join(run.cfg.Overlay, ","))
	}
	if run.treeName != "" {
		edges := make([]string, 0, len(run.cfg.Tree))
		for _, c := range slices.Sorted(maps.Keys(run.cfg.Tree)) {
			edges = append(edges, c+":"+run.cfg.Tree[c])
		}
		fmt.Fprintf(w, "%s: tree %s: %s\n", label, run.treeName, strings.Join(edges, ","))
	}
}
