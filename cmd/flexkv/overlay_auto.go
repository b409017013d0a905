package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/flexkv/flexkv/api"
	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/internal/rpcflow"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/overlay"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/server"
)

// Automatic overlay changes (DESIGN 14: `flexkv overlay apply auto`,
// `flexkv overlay watch`). The entry groups count the destination sets of
// the requests they take in each epoch (group, counts.go); auto collects
// them from every group's leader, runs the overlay search of `overlay
// suggest` on them with the cluster's latency matrix, and applies the
// suggestion only if the model predicts a first answer at least --min-gain
// better than the running overlay's. The counts are by destination set and
// the group of the client's region (the request's origin_group, which the
// Go client names when its region has a group): where a request named none, its set's count is spread evenly over its
// groups as the clients' homes.

// minGainDefault is --min-gain's default, in percent.
const minGainDefault = 5.0

// homeSpread divides evenly among the groups of any set (up to
// overlay.SetGroupsMax): a set's count, times it, is shared by its groups.
const homeSpread = 840 // lcm(1..8)

// autoOptions are the choices of an automatic change.
type autoOptions struct {
	minGain float64 // percent
	mode    server.LatencyMode
	seed    uint64
}

// autoOutcome is one look at the running cluster: what it counted, the
// suggestion, and whether it was applied. The JSON of --json.
type autoOutcome struct {
	Epoch       uint64            `json:"epoch"`
	Protocol    string            `json:"protocol"`
	Counted     uint64            `json:"counted"`
	Overlay     []string          `json:"overlay"`
	Tree        map[string]string `json:"tree,omitempty"`
	Suggested   []string          `json:"suggested,omitempty"`
	SuggestTree map[string]string `json:"suggested_tree,omitempty"`
	// FirstMs: the model's mean first answer under the running overlay
	// (or tree) and under the suggestion; GainPct the difference in
	// percent of the running one's.
	FirstMs          float64 `json:"first_ms"`
	SuggestedFirstMs float64 `json:"suggested_first_ms"`
	GainPct          float64 `json:"gain_pct"`
	MinGainPct       float64 `json:"min_gain_pct"`
	Applied          bool    `json:"applied"`
	NewEpoch         uint64  `json:"new_epoch,omitempty"`
	Reason           string  `json:"reason"`
}

// runAuto looks at the running cluster that cfg's replicas belong to and
// applies the suggestion past the gain.
func runAuto(ctx context.Context, cfg *partition.ClusterConfig, creds credentials.TransportCredentials, o autoOptions) (*autoOutcome, error) {
	v, err := viewCluster(ctx, cfg, creds)
	if err != nil {
		return nil, err
	}
	out := &autoOutcome{Epoch: v.resp.GetEpoch(), Protocol: v.cfg.Protocol, MinGainPct: o.minGain, Overlay: v.overlay, Tree: v.tree}
	if !v.proto.Rebuilds() {
		out.Reason = fmt.Sprintf("%s orders without the overlay: nothing to gain", v.proto.Name())
		return out, nil
	}
	if v.lat == nil {
		return nil, errors.New("the cluster has no latency matrix: the overlay search needs one (the configuration's latency field)")
	}
	if err := requireLeaders(ctx, v.cfg, creds); err != nil {
		return nil, err
	}
	sets, counted, err := collectCounts(ctx, v.cfg, v.top, creds, out.Epoch)
	if err != nil {
		return nil, err
	}
	out.Counted = counted
	if counted == 0 {
		out.Reason = fmt.Sprintf("no request counted in epoch %d yet", out.Epoch)
		return out, nil
	}
	req, err := v.suggest(out, sets, o)
	if err != nil || req == nil {
		return out, err
	}
	entry := v.cfg.Groups[slices.IndexFunc(v.cfg.Groups, func(g partition.GroupConfig) bool { return g.Name == v.etop.Name(v.proto.ChangeEntry(v.etop)) })]
	r, err := reconfigureAt(ctx, entry, creds, req)
	if err != nil {
		return nil, err
	}
	out.Applied, out.NewEpoch = true, r.GetEpoch()
	out.Reason = fmt.Sprintf("gain %.1f%% at least %.1f%%: applied", out.GainPct, o.minGain)
	return out, nil
}

// clusterView is the running cluster as a Topology answer shows it: its
// configuration and the epoch's overlay and tree, by the configuration's
// group order (the matrix's, groupRegions).
type clusterView struct {
	resp      *apipb.TopologyResponse
	cfg       *partition.ClusterConfig
	lat       *partition.Latency
	proto     *protocol.Protocol
	top, etop *partition.Topology
	names     []string
	order     []int // the epoch's overlay, lowest rank first
	parent    []int // the epoch's tree; nil without one
	overlay   []string
	tree      map[string]string
}

// viewCluster asks a replica of cfg for the running cluster.
func viewCluster(ctx context.Context, cfg *partition.ClusterConfig, creds credentials.TransportCredentials) (*clusterView, error) {
	v := &clusterView{}
	var err error
	if v.resp, err = fetchTopology(ctx, cfg, creds); err != nil {
		return nil, err
	}
	if v.cfg, v.lat, err = api.ConfigFromProto(v.resp); err != nil {
		return nil, err
	}
	if v.proto, v.top, _, err = protocol.Build(v.cfg); err != nil {
		return nil, err
	}
	if v.etop, err = api.EpochTopology(v.resp, v.top); err != nil {
		return nil, err
	}
	v.names, _ = groupRegions(v.cfg)
	index := func(g partition.GroupID) int { return slices.Index(v.names, v.top.Name(g)) }
	v.order = make([]int, v.top.Len())
	for k := range v.order {
		v.order[k] = index(v.etop.Ranks().Group(partition.GroupID(k)))
		v.overlay = append(v.overlay, v.names[v.order[k]])
	}
	if v.etop.HasTree() {
		v.parent = make([]int, v.top.Len())
		v.tree = map[string]string{}
		for g := range v.top.Len() {
			par := v.etop.Parent(partition.GroupID(g))
			if par == partition.NoGroup {
				v.parent[index(partition.GroupID(g))] = -1
				continue
			}
			v.parent[index(partition.GroupID(g))] = index(par)
			v.tree[v.top.Name(partition.GroupID(g))] = v.top.Name(par)
		}
	}
	return v, nil
}

// suggest runs the search on the counted sets, fills out's predictions,
// and returns the change to make, or nil when the gain is below o's.
func (v *clusterView) suggest(out *autoOutcome, sets []overlay.CountedSet, o autoOptions) (*apipb.ReconfigureRequest, error) {
	d, err := overlay.CountedDist(sets, v.names)
	if err != nil {
		return nil, err
	}
	rtt := clusterRTT(v.cfg, v.lat, o.mode)
	sp := defaultSuggest
	sp.Seed = o.seed
	m := sp.model(rtt)
	// The search starts from the running overlay and tree (and the
	// paper's, on its regions).
	running := *v.cfg
	running.Overlay, running.Tree = v.overlay, v.tree
	res, err := suggestOverlay(&running, rtt, d, sp)
	if err != nil {
		return nil, err
	}
	var now, next overlay.Prediction
	if v.proto.NeedsTree() {
		out.SuggestTree = res.Tree
		if now, err = m.Tree(d, v.parent); err == nil {
			next, err = m.Tree(d, overlay.TreeParents(res.Tree, v.names))
		}
	} else {
		out.Suggested = res.Overlay
		if now, err = m.FlexCast(d, v.order); err == nil {
			next, err = m.FlexCast(d, indexesOf(res.Overlay, v.names))
		}
	}
	if err != nil {
		return nil, err
	}
	out.FirstMs, out.SuggestedFirstMs = now.FirstMs, next.FirstMs
	if now.FirstMs > 0 {
		out.GainPct = 100 * (now.FirstMs - next.FirstMs) / now.FirstMs
	}
	if out.GainPct < o.minGain {
		out.Reason = fmt.Sprintf("gain %.1f%% below %.1f%%: kept", out.GainPct, o.minGain)
		return nil, nil
	}
	req := &apipb.ReconfigureRequest{Epoch: out.Epoch, Overlay: res.Overlay}
	if v.proto.NeedsTree() {
		req.Overlay = v.overlay
		for _, child := range slices.Sorted(maps.Keys(res.Tree)) {
			req.Tree = append(req.Tree, &apipb.TreeEdge{Child: child, Parent: res.Tree[child]})
		}
	}
	return req, nil
}

// indexesOf returns the indexes in names of the groups of order.
func indexesOf(order, names []string) []int {
	out := make([]int, len(order))
	for i, n := range order {
		out[i] = slices.Index(names, n)
	}
	return out
}

// fetchTopology asks every replica of cfg for its Topology, each call
// bounded, and returns the answer of the newest epoch: each group starts
// an epoch at its own delivery of the change, and a replica applies it at
// its own pace, so the first answer may be of an epoch that ended.
func fetchTopology(ctx context.Context, cfg *partition.ClusterConfig, creds credentials.TransportCredentials) (*apipb.TopologyResponse, error) {
	type answer struct {
		resp *apipb.TopologyResponse
		err  error
	}
	var answers []answer
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, g := range cfg.Groups {
		for _, r := range g.Replicas {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, memberCallTimeout)
				defer cancel()
				var an answer
				cc, err := grpc.NewClient(r.GRPC, append(rpcflow.DialOptions(), grpc.WithTransportCredentials(creds))...)
				if err == nil {
					an.resp, err = apipb.NewKVClient(cc).Topology(cctx, &apipb.TopologyRequest{})
					cc.Close()
				}
				if err != nil {
					an.err = fmt.Errorf("%s at %s: %w", r.ID, r.GRPC, err)
				}
				mu.Lock()
				answers = append(answers, an)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	var best *apipb.TopologyResponse
	var errs []error
	for _, an := range answers {
		switch {
		case an.err != nil:
			errs = append(errs, an.err)
		case best == nil || an.resp.GetEpoch() > best.GetEpoch():
			best = an.resp
		}
	}
	if best == nil {
		return nil, fmt.Errorf("no replica answered with the topology: %w", errors.Join(errs...))
	}
	return best, nil
}

// collectCounts asks every group's leader for the destination sets it
// counted in epoch, and returns them as counted sets (a set counted
// without a home spread over its groups as homes), with the requests
// counted. A group at
// another epoch (a change meanwhile) fails it: look again.
func collectCounts(ctx context.Context, cfg *partition.ClusterConfig, top *partition.Topology, creds credentials.TransportCredentials, epoch uint64) ([]overlay.CountedSet, uint64, error) {
	var sets []overlay.CountedSet
	var counted uint64
	for _, g := range cfg.Groups {
		st, err := leaderStatus(ctx, g, creds)
		if err != nil {
			return nil, 0, err
		}
		if st.GetEpoch() != epoch {
			return nil, 0, fmt.Errorf("group %s is at epoch %d, the cluster was at %d: a change ran meanwhile; look again", g.Name, st.GetEpoch(), epoch)
		}
		counted += st.GetDestinationsOther()
		for _, c := range st.GetDestinations() {
			counted += c.GetCount()
			k := len(c.GetGroups())
			if k == 0 || k > overlay.SetGroupsMax {
				continue // the model's bound; such sets are rare
			}
			for _, name := range append(slices.Clone(c.GetGroups()), c.GetHome()) {
				if _, ok := top.Lookup(name); !ok && name != "" {
					return nil, 0, fmt.Errorf("group %s counted a set naming unknown group %q", g.Name, name)
				}
			}
			if home := c.GetHome(); home != "" {
				sets = append(sets, overlay.CountedSet{Home: home, Groups: c.GetGroups(), Count: int64(c.GetCount()) * homeSpread})
				continue
			}
			// No home named: spread over the set's groups.
			for _, home := range c.GetGroups() {
				sets = append(sets, overlay.CountedSet{Home: home, Groups: c.GetGroups(), Count: int64(c.GetCount()) * homeSpread / int64(k)})
			}
		}
	}
	return sets, counted, nil
}

// requireLeaders checks that every group of cfg has a leader that answers:
// a change needs every group (DESIGN 14), and one made while a group is
// unreachable would hold the new epoch's traffic until it returns. A group
// electing a leader is waited for, until ctx ends; then the group is named.
func requireLeaders(ctx context.Context, cfg *partition.ClusterConfig, creds credentials.TransportCredentials) error {
	var whole error // the outcome of the last look that ctx did not cut
	for {
		err := leadersAnswer(ctx, cfg, creds)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil && whole != nil:
			// The time ran out during this look, at whichever group it
			// was asking: the look before says which group is missing.
			return whole
		case ctx.Err() == nil:
			whole = err
		}
		select {
		case <-ctx.Done():
			return cmp.Or(whole, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// leadersAnswer is one look of requireLeaders, at the members of the
// current epoch (DESIGN 14: a group whose replicas were all replaced since
// the configuration file answers at none of the file's addresses), or of
// cfg when no replica tells them.
func leadersAnswer(ctx context.Context, cfg *partition.ClusterConfig, creds credentials.TransportCredentials) error {
	if resp, err := fetchTopology(ctx, cfg, creds); err == nil {
		if cur, _, err := api.ConfigFromProto(resp); err == nil {
			cfg = cur
		}
	}
	var missing []string
	for _, g := range cfg.Groups {
		st, err := leaderStatus(ctx, g, creds)
		switch {
		case err != nil:
			missing = append(missing, err.Error())
		case st.GetRole() != "leader":
			missing = append(missing, fmt.Sprintf("group %s has no leader that answers (its replicas know of %q)", g.Name, st.GetLeader()))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("a change needs every group, and %s", strings.Join(missing, "; "))
	}
	return nil
}

// leaderStatus returns the Status, with the destination counts, of group
// g's leader: the replica that says it leads, else the first that answers.
func leaderStatus(ctx context.Context, g partition.GroupConfig, creds credentials.TransportCredentials) (*apipb.StatusResponse, error) {
	var first *apipb.StatusResponse
	var errs []error
	replicas := slices.Clone(g.Replicas)
	for i := 0; i < len(replicas); i++ {
		r := replicas[i]
		cc, err := grpc.NewClient(r.GRPC, append(rpcflow.DialOptions(), grpc.WithTransportCredentials(creds))...)
		if err != nil {
			return nil, err
		}
		st, err := apipb.NewKVClient(cc).Status(ctx, &apipb.StatusRequest{Destinations: true})
		cc.Close()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s at %s: %w", r.ID, r.GRPC, err))
		case st.GetRole() == "leader":
			return st, nil
		case first == nil:
			first = st
		}
		// A leader the file does not name (a member added since, DESIGN
		// 14) is asked too, once.
		if hint := st.GetLeader(); hint != "" && !slices.ContainsFunc(replicas, func(r partition.ReplicaConfig) bool { return r.GRPC == hint }) {
			replicas = append(replicas, partition.ReplicaConfig{ID: "the leader", GRPC: hint})
		}
	}
	if first != nil {
		return first, nil
	}
	return nil, fmt.Errorf("group %s: no replica answered: %w", g.Name, errors.Join(errs...))
}

// printAuto writes an outcome as one line.
func printAuto(w io.Writer, o *autoOutcome) error {
	var b strings.Builder
	fmt.Fprintf(&b, "epoch %d (%s): %d requests counted", o.Epoch, o.Protocol, o.Counted)
	if o.Suggested != nil || o.SuggestTree != nil {
		fmt.Fprintf(&b, "; running %s: first answer %.1f ms; suggested ", strings.Join(o.Overlay, ","), o.FirstMs)
		if o.SuggestTree != nil {
			b.WriteString(treeText(o.SuggestTree))
		} else {
			b.WriteString(strings.Join(o.Suggested, ","))
		}
		fmt.Fprintf(&b, ": %.1f ms", o.SuggestedFirstMs)
	}
	fmt.Fprintf(&b, "; %s", o.Reason)
	if o.Applied {
		fmt.Fprintf(&b, ", epoch %d", o.NewEpoch)
	}
	_, err := fmt.Fprintln(w, b.String())
	return err
}

// treeText writes a tree as child=parent,... sorted by child.
func treeText(tree map[string]string) string {
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(tree)) {
		parts = append(parts, c+"="+tree[c])
	}
	return strings.Join(parts, ",")
}

const overlayWatchLong = `Look at the running cluster every --every and change its overlay when that
pays (DESIGN 14), as flexkv overlay apply auto does once: the destination sets
the entry groups counted in the current epoch, the overlay search of flexkv
overlay suggest on them with the cluster's latency matrix, applied only if
the model predicts a first answer at least --min-gain percent better than
the running overlay's (the tree's, under the tree protocol). A change starts
a new epoch, whose counts start from nothing: the next look waits for them.
One line per look (one JSON object with --json). It runs until interrupted,
or for --count looks.`

func newOverlayWatchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "watch --every D [--min-gain P] [--count N] [--config FILE] [--json]",
		Short: "Apply the overlay the counted destination sets suggest, in a loop",
		Long:  overlayWatchLong,
		Args:  noArgs,
	}
	f := cmd.Flags()
	f.String("config", "", "cluster configuration YAML (default: embedded "+defaultConfigName+")")
	f.Duration("every", 15*time.Second, "time between looks")
	f.Float64("min-gain", minGainDefault, "apply only past this predicted gain of the first answer, in percent")
	f.Int("count", 0, "stop after this many looks (0: run until interrupted)")
	f.String("latency-mode", "real", "the servers' emulated WAN (real or paper), as they run it: the model's delays")
	f.Uint64("seed", 1, "seed of the search")
	f.Duration("timeout", 30*time.Second, "how long one look may take")
	f.Bool("json", false, "print one JSON object per look")
	addClientTLSFlags(f)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(fmt.Errorf("overlay watch: %w", err)) })
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		v := settings(c)
		if v.GetDuration("every") <= 0 {
			return usageError(fmt.Errorf("overlay watch: --every %s, want > 0", v.GetDuration("every")))
		}
		if v.GetInt("count") < 0 {
			return usageError(fmt.Errorf("overlay watch: --count %d, want >= 0", v.GetInt("count")))
		}
		cfg, creds, o, err := autoSetup(c, "overlay watch")
		if err != nil {
			return err
		}
		ticker := time.NewTicker(v.GetDuration("every"))
		defer ticker.Stop()
		for n := 1; ; n++ {
			select {
			case <-c.Context().Done():
				return nil
			case <-ticker.C:
			}
			ctx, cancel := context.WithTimeout(c.Context(), v.GetDuration("timeout"))
			out, err := runAuto(ctx, cfg, creds, o)
			cancel()
			switch {
			case err != nil:
				fmt.Fprintf(c.ErrOrStderr(), "flexkv: overlay watch: %v\n", err)
			case v.GetBool("json"):
				if err := writeJSON(c.OutOrStdout(), out); err != nil {
					return err
				}
			default:
				if err := printAuto(c.OutOrStdout(), out); err != nil {
					return err
				}
			}
			if count := v.GetInt("count"); count > 0 && n >= count {
				return nil
			}
		}
	}
	return cmd
}

// autoSetup reads the flags common to apply auto and watch.
func autoSetup(c *cobra.Command, what string) (*partition.ClusterConfig, credentials.TransportCredentials, autoOptions, error) {
	v := settings(c)
	cfg, _, err := loadCluster(v.GetString("config"))
	if err != nil {
		return nil, nil, autoOptions{}, usageError(fmt.Errorf("%s: %w", what, err))
	}
	mode, err := server.ParseLatencyMode(v.GetString("latency-mode"))
	if err != nil {
		return nil, nil, autoOptions{}, usageError(fmt.Errorf("%s: --latency-mode: %w", what, err))
	}
	o := autoOptions{minGain: v.GetFloat64("min-gain"), mode: mode, seed: v.GetUint64("seed")}
	if !(o.minGain >= 0) || o.minGain >= 100 {
		return nil, nil, autoOptions{}, usageError(fmt.Errorf("%s: --min-gain %v, want 0 to 100 (percent)", what, o.minGain))
	}
	creds, err := clientCreds(v)
	if err != nil {
		return nil, nil, autoOptions{}, usageError(fmt.Errorf("%s: %w", what, err))
	}
	return cfg, creds, o, nil
}
