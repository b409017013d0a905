package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/flexkv/flexkv/gtpcc"
	"github.com/flexkv/flexkv/overlay"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/server"
)

// newOverlayCmd returns `flexkv overlay`, the parent of suggest (DESIGN 7).
func newOverlayCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "overlay suggest|apply|watch",
		Short: "Find the FlexCast overlay and the tree that minimise expected latency, or apply one",
	}
	needSubcommand(cmd, "suggest, apply or watch")
	setUsageErrors(cmd)
	cmd.AddCommand(newOverlaySuggestCmd(), newOverlayApplyCmd(), newOverlayWatchCmd())
	return cmd
}

const overlaySuggestLong = `Suggest the FlexCast overlay (the C-DAG's rank order) and the tree of the tree
protocol for a cluster configuration's latency matrix and a gTPC-C workload,
and print them as YAML to paste into the configuration, with the expected
1st/2nd/3rd answer of the suggestion beside the configured overlay's and
tree's, Skeen's and, on the aws-12 regions, the paper's O1, O2 and T1-T3.
Every other line of the output is a YAML comment.

Workload: gTPC-C's generator rules (package gtpcc), one client per group with
its group's warehouse as home: new-order 45, payment 43, the three local kinds
4 each; a payment's customer is remote with --remote-payment (always under
--global-only); each of a new-order's 5..15 lines is remote with --remote-item;
a remote warehouse is the k-th nearest other group with probability
proportional to L(1-L)^k, L = --locality. Sets of more than three groups are
left out. Or, with --sets FILE, the destination sets a run counted: the
"destination_sets" of a results JSON ("flexkv gtpcc run --json FILE"; each
{"home": group, "groups": [groups], "count": n}); the counts then weigh every
home (they hold the closed loop), and the workload flags are not used.

Model (contention-free): a hop costs the one-way latency, half the matrix's
round trip; every step of a group costs a commit (--commit-ms). FlexCast: the
client sends to the lca (the lowest-ranked destination), which delivers; every
other destination delivers after the MSG and the ACK of each destination
ranked below it. FlexCast's garbage collection holds no message back; with
--flush-ms the model also counts a flush of that period, a barrier of the kind
the servers no longer have: the rank-0 group multicasts it, it is
acknowledged along the ranks, and a destination delivers no message before
the last flush its lca delivered before it (averaged over the flush's phase).
--notifications also counts each group
ranked between two destinations as notified (an upper bound: the servers send
few notifications). On aws-12 (300 s runs, 0.99 locality, global-only) the
model with the step the run measured at its clients for the commit (gtpcc
run's "step measured" row, 4.0-4.1 ms) put every mean answer within 4% of
the measured; with the default 2 ms, 6-17% below, on a machine whose
servers took 2.2 ms a step.
Skeen: the nearest destination relays; each proposes, and delivers once it
holds every proposal. Tree: the tree-lca forwards down the tree, a commit per
hop. An answer reaches the client one hop after its destination delivers.
Closed loop: a client waits for its last answer, so a client in a fast region
completes more transactions; every mean is per transaction over all clients.

Search: branch and bound up to 8 groups, seeded annealing beyond; "exact"
(the JSON's "exact") means optimal for the closed-loop weights the branch
and bound fixed from its best order so far, not over every order scored
with its own weights (the annealing scores each order with its own);
--objective first|last|mean picks the per-transaction figure it minimises:
the first answer, the last, or the mean answer. With --keep-last (the
default) the suggestion's mean last answer (over every transaction: a
two-group one's 2nd answer, a three-group one's 3rd) is no worse than the
configured overlay's and tree's (without a configured tree: the paper's T1 on
aws-12, else the star around the group of least mean round trip), and each
client's (the clients of one home group) no more than --home-slack above its
own there (default 1: at most twice; negative: only the mean is kept). The
mean alone lets the search make a few regions' clients wait longer, since a
slow client completes fewer transactions and weighs less (on aws-12 with
notifications counted and no flush, two regions waited 6.3 times longer:
measured 400 ms for their 2nd answer against 60-70 under O1). For first
that is a low first answer that keeps the last where it was, where first alone moves
every lca to the clients' homes and gives up the second answer: the search
weighs the last answer in, more each time, until its result keeps the
bounds, then searches for the best objective within them, and a configured
or paper order that keeps them and scores better wins. The table's last
column names the client whose last answer grows most against the
configured overlay's (or tree's). The same flags give the same suggestion;
--overlay auto and --tree auto of gtpcc run and demo are the defaults
(objective first, --keep-last, --home-slack 1).

Exit codes: 0 done; 2 bad usage or a configuration without a latency matrix.`

// overlaySuggestion is the --json output.
type overlaySuggestion struct {
	Config    string           `json:"config"`
	Groups    int              `json:"groups"`
	Workload  overlay.Workload `json:"workload"`
	Sets      string           `json:"sets,omitempty"` // the --sets file, whose counts replace Workload`
	Objective string           `json:"objective"`
	// KeepLast: the suggestion's last answer is no worse than the
	// configured overlay's and tree's.
	KeepLast bool `json:"keep_last"`
	// HomeSlack: with KeepLast, how much each client's mean last answer
	// may exceed its own under the configured overlay (0.2: a fifth);
	// negative: the clients are not bounded, only their mean.
	HomeSlack     float64           `json:"home_slack"`
	Notifications bool              `json:"notifications"`
	CommitMs      float64           `json:"commit_ms"`
	FlushMs       float64           `json:"flush_ms"`
	Seed          uint64            `json:"seed"`
	Overlay       []string          `json:"overlay"`
	Tree          map[string]string `json:"tree"`
	Exact         bool              `json:"exact"`
	// Predictions: the suggestion and every comparison, one row each.
	Predictions []predictionRow `json:"predictions"`
}

type predictionRow struct {
	Protocol string            `json:"protocol"`
	Name     string            `json:"name"` // suggested, configured, O1, T2, ...
	Overlay  []string          `json:"overlay,omitempty"`
	Tree     map[string]string `json:"tree,omitempty"`
	AnswerMs []float64         `json:"answer_ms"` // mean 1st, 2nd, 3rd answer
	FirstMs  float64           `json:"first_ms"`
	LastMs   float64           `json:"last_ms"`
	MeanMs   float64           `json:"mean_ms"`
	// HomeLastMs: each client's (home group's) mean last answer.
	HomeLastMs map[string]float64 `json:"home_last_ms"`
}

func newOverlaySuggestCmd() *cobra.Command {
	var (
		configPath, objective string
		setsPath              string
		w                     overlay.Workload
		sp                    suggestParams
		asJSON                bool
	)
	cmd := &cobra.Command{
		Use:   "suggest --config FILE [--locality P] [--remote-item P] [--remote-payment P] [--objective first|last|mean] [--json] [--seed S]",
		Short: "Suggest the overlay and tree for a configuration's latency matrix and the gTPC-C workload",
		Long:  overlaySuggestLong,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if sp.Objective, err = overlay.ParseObjective(objective); err != nil {
				return usageError(fmt.Errorf("overlay suggest: --objective: %w", err))
			}
			if err := w.Validate(); err != nil {
				return usageError(fmt.Errorf("overlay suggest: %w", err))
			}
			if !(sp.CommitMs >= 0) {
				return usageError(fmt.Errorf("overlay suggest: --commit-ms %v, want >= 0", sp.CommitMs))
			}
			if !(sp.FlushMs >= 0) || math.IsInf(sp.FlushMs, 1) {
				return usageError(fmt.Errorf("overlay suggest: --flush-ms %v, want >= 0 (0: no flush)", sp.FlushMs))
			}
			if math.IsNaN(sp.HomeSlack) || math.IsInf(sp.HomeSlack, 0) {
				return usageError(fmt.Errorf("overlay suggest: --home-slack %v, want a number (negative: no bound by client)", sp.HomeSlack))
			}
			if configPath == "" {
				return usageError(errors.New("overlay suggest: --config is required (a cluster configuration with a latency matrix)"))
			}
			cfg, lat, err := loadCluster(configPath)
			if err != nil {
				return usageError(fmt.Errorf("overlay suggest: %w", err))
			}
			if lat == nil {
				return usageError(fmt.Errorf("overlay suggest: config %s names no latency matrix (its latency field)", configPath))
			}
			if len(cfg.Groups) < 2 {
				return usageError(fmt.Errorf("overlay suggest: config %s has %d group, want two or more", configPath, len(cfg.Groups)))
			}
			rtt := clusterRTT(cfg, lat, server.LatencyReal)
			var d *overlay.Dist
			if setsPath != "" {
				names, _ := groupRegions(cfg)
				if d, err = readSets(setsPath, names); err != nil {
					return usageError(fmt.Errorf("overlay suggest: --sets %s: %w", setsPath, err))
				}
			} else if d, err = overlay.Destinations(rtt, w); err != nil {
				return usageError(fmt.Errorf("overlay suggest: %w", err))
			}
			res, err := suggestOverlay(cfg, rtt, d, sp)
			if err != nil {
				return err
			}
			res.Config, res.Workload, res.Sets = configPath, w, setsPath
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			printSuggestion(cmd.OutOrStdout(), res)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "cluster configuration (DESIGN 8) with a latency matrix (required)")
	f.Float64Var(&w.Locality, "locality", gtpcc.LocalityDefault, "probability that a remote warehouse is the nearest one (else the next nearest, and so on)")
	f.Float64Var(&w.RemoteItem, "remote-item", gtpcc.RemoteItemPaper, "probability that a new-order line is supplied by a remote warehouse")
	f.Float64Var(&w.RemotePayment, "remote-payment", gtpcc.RemotePaymentDefault, "probability that a payment's customer belongs to a remote warehouse")
	f.BoolVar(&w.GlobalOnly, "global-only", true, "only transactions with 2 or 3 warehouses (the paper's latency runs); false adds the local ones")
	f.StringVar(&setsPath, "sets", "", "counted destination sets to use instead of the generator's (a results JSON of gtpcc run)")
	f.StringVar(&objective, "objective", defaultSuggest.Objective.String(), "what to minimise per transaction: first, last or mean answer")
	f.BoolVar(&sp.KeepLast, "keep-last", defaultSuggest.KeepLast, "keep the mean last answer no worse than the configured overlay's and tree's (without a configured tree: the paper's T1, or the star)")
	f.Float64Var(&sp.HomeSlack, "home-slack", defaultSuggest.HomeSlack, "with --keep-last, how much each client's mean last answer may exceed its own under the configured overlay (and tree), as a fraction; negative: bound only the mean over all clients")
	f.BoolVar(&sp.Notifications, "notifications", defaultSuggest.Notifications, "count the groups ranked between a message's destinations (FlexCast's notifications)")
	f.Float64Var(&sp.CommitMs, "commit-ms", defaultSuggest.CommitMs, "cost of one step of a group (a raft commit), in ms")
	f.Float64Var(&sp.FlushMs, "flush-ms", defaultSuggest.FlushMs, "period of a garbage-collection flush to model, in ms, a barrier that every message of the rank-0 group waits behind; 0 (the servers': their garbage collection holds no message back): none")
	f.Uint64Var(&sp.Seed, "seed", 1, "seed of the search: the same seed gives the same suggestion")
	f.BoolVar(&asJSON, "json", false, "print one JSON object: the suggestion, its predictions and the comparisons")
	return cmd
}

// groupRegions returns the names and the regions of cfg's groups, in the
// order of cfg.Groups (a group without a region is its own).
func groupRegions(cfg *partition.ClusterConfig) (names, regions []string) {
	names = make([]string, len(cfg.Groups))
	regions = make([]string, len(cfg.Groups))
	for i, g := range cfg.Groups {
		names[i], regions[i] = g.Name, g.Region
		if regions[i] == "" {
			regions[i] = g.Name
		}
	}
	return names, regions
}

// clusterRTT returns the round trips between cfg's groups, in the order of
// cfg.Groups, that the model's one-way hop (half of each) turns into the
// delays of the emulated WAN under mode: lat's under real, twice lat's
// under paper (one-way = the matrix's value), none under off.
func clusterRTT(cfg *partition.ClusterConfig, lat *partition.Latency, mode server.LatencyMode) [][]float64 {
	_, regions := groupRegions(cfg)
	n := len(regions)
	rtt := make([][]float64, n)
	for i := range n {
		rtt[i] = make([]float64, n)
		for j := range n {
			oneWay := mode.OneWay(lat.RTTMs(regions[i], regions[j]))
			rtt[i][j] = 2 * float64(oneWay) / float64(time.Millisecond)
		}
	}
	return rtt
}

// suggestOverlay runs the search for cfg's groups with the round trips
// rtt (clusterRTT) and collects the comparisons.
// readSets reads the counted destination sets of a results JSON.
func readSets(path string, names []string) (*overlay.Dist, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return overlay.ReadSets(f, names)
}

// suggestParams are the choices of a search besides the workload.
type suggestParams struct {
	Objective                    overlay.Objective
	KeepLast, Notifications      bool
	CommitMs, FlushMs, HomeSlack float64
	Seed                         uint64
}

// defaultSuggest is overlay suggest's defaults, which --overlay auto and
// --tree auto use with the run's --seed.
// FlushMs is 0: the servers' FlexCast holds no message back for its garbage
// collection (multicast/flexcast, gc.go).
var defaultSuggest = suggestParams{Objective: overlay.First, KeepLast: true, CommitMs: 2, HomeSlack: overlay.HomeSlackDefault}

// model returns the latency model of p for the round trips rtt.
func (p suggestParams) model(rtt [][]float64) *overlay.Model {
	return &overlay.Model{RTTMs: rtt, CommitMs: p.CommitMs, Notifications: p.Notifications, FlushMs: p.FlushMs}
}

// suggestOverlay searches the overlay and the tree for the distribution d
// of destination sets over cfg's groups (matrix rtt, in cfg.Groups order).
func suggestOverlay(cfg *partition.ClusterConfig, rtt [][]float64, d *overlay.Dist, sp suggestParams) (*overlaySuggestion, error) {
	names, _ := groupRegions(cfg)
	m := sp.model(rtt)
	orders, trees := comparedLayouts(cfg)
	rng := rand.New(rand.NewPCG(sp.Seed, 0x6f7665726c6179)) // "overlay"
	opt := overlay.Options{Objective: sp.Objective, KeepLast: sp.KeepLast, HomeSlack: sp.HomeSlack}
	best, err := m.SuggestOverlay(d, layoutOrders(orders), opt, rng)
	if err != nil {
		return nil, err
	}
	// The tree's search draws from its own generator: a change to
	// FlexCast's model or search does not move the tree's suggestion.
	bestTree, err := m.SuggestTree(d, layoutOrders(trees), opt, rand.New(rand.NewPCG(sp.Seed, 0x74726565))) // "tree"
	if err != nil {
		return nil, err
	}
	res := &overlaySuggestion{
		Groups: len(cfg.Groups), Objective: sp.Objective.String(), KeepLast: sp.KeepLast, HomeSlack: sp.HomeSlack, Notifications: sp.Notifications, CommitMs: sp.CommitMs, FlushMs: sp.FlushMs, Seed: sp.Seed,
		Overlay: groupNames(best.Order, names), Tree: treeNames(bestTree.Parent, names), Exact: best.Exact,
	}
	r := newPredictionRow("flexcast", "suggested", best.Prediction, names)
	r.Overlay = res.Overlay
	res.Predictions = append(res.Predictions, r)
	for _, o := range orders {
		p, err := m.FlexCast(d, o.order)
		if err != nil {
			return nil, err
		}
		r := newPredictionRow("flexcast", o.name, p, names)
		r.Overlay = groupNames(o.order, names)
		res.Predictions = append(res.Predictions, r)
	}
	res.Predictions = append(res.Predictions, newPredictionRow("skeen", "-", m.Skeen(d), names))
	r = newPredictionRow("tree", "suggested", bestTree.Prediction, names)
	r.Tree = res.Tree
	res.Predictions = append(res.Predictions, r)
	for _, t := range trees {
		p, err := m.Tree(d, t.order)
		if err != nil {
			return nil, err
		}
		r := newPredictionRow("tree", t.name, p, names)
		r.Tree = treeNames(t.order, names)
		res.Predictions = append(res.Predictions, r)
	}
	return res, nil
}

// namedLayout is an overlay order or a tree (parent of each group) to
// compare with, as group indexes.
type namedLayout struct {
	name  string
	order []int
}

// comparedLayouts returns the overlays and the trees that suggestOverlay
// starts its searches from and compares with: cfg's own, and the paper's
// when cfg's groups are exactly the aws-12 regions, one group each (the
// paper's overlays and trees name regions).
func comparedLayouts(cfg *partition.ClusterConfig) (orders, trees []namedLayout) {
	n := len(cfg.Groups)
	names, regions := groupRegions(cfg)
	configured := make([]int, n)
	for i := range configured {
		configured[i] = i
	}
	if len(cfg.Overlay) > 0 {
		for r, g := range cfg.Overlay {
			configured[r] = slices.Index(names, g)
		}
	}
	orders = append(orders, namedLayout{"configured", configured})
	if len(cfg.Tree) > 0 {
		trees = append(trees, namedLayout{"configured", overlay.TreeParents(cfg.Tree, names)})
	}
	byRegion := func(region string) int { return slices.Index(regions, region) }
	if paper, _ := partition.PaperOverlay("O1"); len(paper) == n && !slices.Contains(regionsOf(paper, byRegion), -1) {
		for _, name := range partition.PaperOverlayNames {
			o, _ := partition.PaperOverlay(name)
			orders = append(orders, namedLayout{name, regionsOf(o, byRegion)})
		}
		for _, name := range partition.PaperTreeNames {
			t, _ := partition.PaperTree(name)
			trees = append(trees, namedLayout{name, overlay.TreeParents(t, regions)})
		}
	}
	return orders, trees
}

// layoutOrders returns the orders of layouts, the starts of a search.
func layoutOrders(layouts []namedLayout) [][]int {
	starts := make([][]int, 0, len(layouts))
	for _, l := range layouts {
		starts = append(starts, l.order)
	}
	return starts
}

// newPredictionRow is the row of prediction p of a layout, its groups named
// by names; homes and answers the model gives no time are left out.
func newPredictionRow(protocol, name string, p overlay.Prediction, names []string) predictionRow {
	r := predictionRow{Protocol: protocol, Name: name, FirstMs: p.FirstMs, LastMs: p.LastMs, MeanMs: p.MeanMs, HomeLastMs: map[string]float64{}}
	for h, v := range p.HomeLastMs {
		if v > 0 {
			r.HomeLastMs[names[h]] = v
		}
	}
	for _, v := range p.AnswerMs {
		if v > 0 {
			r.AnswerMs = append(r.AnswerMs, v)
		}
	}
	return r
}

func regionsOf(regions []string, index func(string) int) []int {
	out := make([]int, len(regions))
	for i, r := range regions {
		out[i] = index(r)
	}
	return out
}

func groupNames(order []int, names []string) []string {
	out := make([]string, len(order))
	for r, g := range order {
		out[r] = names[g]
	}
	return out
}

func treeNames(parent []int, names []string) map[string]string {
	t := make(map[string]string, len(parent))
	for g, p := range parent {
		if p >= 0 {
			t[names[g]] = names[p]
		}
	}
	return t
}

// printSuggestion prints the suggestion as YAML, the rest as comments.
func printSuggestion(out io.Writer, s *overlaySuggestion) {
	w := s.Workload
	if s.Sets != "" {
		fmt.Fprintf(out, "# flexkv overlay suggest: %s, %d groups; the destination sets counted in %s;\n", s.Config, s.Groups, s.Sets)
	} else {
		fmt.Fprintf(out, "# flexkv overlay suggest: %s, %d groups; gTPC-C global-only=%t locality %g, remote-item %g, remote-payment %g;\n",
			s.Config, s.Groups, w.GlobalOnly, w.Locality, w.RemoteItem, w.RemotePayment)
	}
	how := "annealing"
	if s.Exact {
		how = "exact"
	}
	keep := ""
	switch {
	case s.KeepLast && s.HomeSlack >= 0:
		keep = fmt.Sprintf(", keeping the configured last answer (each client's within %g%%)", 100*s.HomeSlack)
	case s.KeepLast:
		keep = ", keeping the configured last answer"
	}
	notifs := "without"
	if s.Notifications {
		notifs = "with"
	}
	flush := "no flush"
	if s.FlushMs > 0 {
		flush = fmt.Sprintf("a flush every %g ms", s.FlushMs)
	}
	fmt.Fprintf(out, "# objective %s answer%s, commit %g ms, %s, %s notifications, seed %d, search %s. Paste into the configuration:\n",
		s.Objective, keep, s.CommitMs, flush, notifs, s.Seed, how)
	fmt.Fprintln(out, "overlay:")
	for _, g := range s.Overlay {
		fmt.Fprintf(out, "  - %s\n", g)
	}
	fmt.Fprintln(out, "tree:")
	for _, c := range slices.Sorted(maps.Keys(s.Tree)) {
		fmt.Fprintf(out, "  %s: %s\n", c, s.Tree[c])
	}
	fmt.Fprintln(out, "# Expected answers, ms (contention-free model, closed-loop weighted; see --help):")
	fmt.Fprintf(out, "# %-9s %-11s %7s %7s %7s %7s %7s  %s\n", "protocol", "order", "1st", "2nd", "3rd", "last", "mean", "slowest client against configured (last answer)")
	configured := map[string]predictionRow{}
	for _, r := range s.Predictions {
		if r.Name == "configured" {
			configured[r.Protocol] = r
		}
	}
	for _, r := range s.Predictions {
		cells := make([]string, 3)
		for k := range cells {
			cells[k] = "-"
			if k < len(r.AnswerMs) {
				cells[k] = fmt.Sprintf("%.1f", r.AnswerMs[k])
			}
		}
		fmt.Fprintf(out, "# %-9s %-11s %7s %7s %7s %7.1f %7.1f  %s\n", r.Protocol, r.Name, cells[0], cells[1], cells[2], r.LastMs, r.MeanMs, slowest(r, configured[r.Protocol]))
	}
}

// slowest names the client whose mean last answer under r is the most
// above its own under base, with the ratio; "-" without base.
func slowest(r, base predictionRow) string {
	name, x := "", 0.0
	for _, h := range slices.Sorted(maps.Keys(base.HomeLastMs)) {
		if b := base.HomeLastMs[h]; b > 0 {
			if v := r.HomeLastMs[h] / b; v > x {
				name, x = h, v
			}
		}
	}
	switch {
	case name == "":
		return "-"
	case x < 1.005:
		return "none slower"
	}
	return fmt.Sprintf("%s x%.2f", name, x)
}
