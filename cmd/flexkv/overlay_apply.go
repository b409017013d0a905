package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/internal/rpcflow"
	"github.com/flexkv/flexkv/partition"
)

const overlayApplyLong = `Change the overlay of a running cluster (DESIGN 14): end the current epoch and
start the next with the overlay ORDER (every group once, by name, lowest
FlexCast rank first) and the tree of --tree (child=parent,...; default: the
current one). The change is a control message multicast to every group
through the protocol in use; every group starts the new epoch at its
delivery, while transactions run: clients whose requests meet the change
resubmit them, and see no error.

Under FlexCast and the tree protocol every group starts a new core at the
cut, ranked by ORDER (with the new tree); Skeen, whose order does not
depend on the overlay, keeps its core, and only the ranks clients route by
change. An ORDER and tree equal to the running ones start a new epoch with
the same cores.

The command asks a replica of --config (default: the embedded
configs/local.yaml) for the current epoch's overlay, sends the change to the
group that takes the changes in that epoch (its lowest rank; the tree
protocol's root), with the client TLS flags of flexkv kv, and prints the
epoch it starts.

With auto instead of ORDER: the destination sets the entry groups counted in
the current epoch, collected from every group's leader, go through the
overlay search of flexkv overlay suggest with the cluster's latency matrix
(by set and the group of the client's region, which the Go client names;
a set counted without one is spread evenly over its groups as homes); the
suggestion is applied only if the model predicts a first answer at least
--min-gain percent (default 5) better than the running overlay's (the
tree's, under the tree protocol; under Skeen nothing is to gain). One line
says what was counted, predicted and done; with --json, one object
(epoch, counted, overlay, suggested, first_ms, suggested_first_ms,
gain_pct, applied, new_epoch, reason).

Refused, naming the problem, with nothing changed: an unknown, missing or
duplicate group, a tree that is not a tree (exit 2); a change while a group
has no leader that answers (a change needs every group), while another is
under way, or of an epoch that has ended ("epoch changed"), or that the
cluster refuses (exit 1).

With --json, one object: {"epoch":2,"overlay":["eu-west-1",...]}.`

func newOverlayApplyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "apply ORDER|auto [--tree child=parent,...] [--min-gain P] [--config FILE] [--json]",
		Short: "Apply an overlay to a running cluster: a new epoch",
		Long:  overlayApplyLong,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError(fmt.Errorf("overlay apply: want one ORDER (a,b,c,...), got %q", args))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.String("config", "", "cluster configuration YAML (default: embedded "+defaultConfigName+")")
	f.String("tree", "", "the tree of the new epoch, child=parent,... (default: the current one)")
	f.Uint64("epoch", 0, "the epoch to end (default: the current one)")
	f.Duration("timeout", 30*time.Second, "how long the cluster may take to take the change (with auto: to look and take it)")
	f.Float64("min-gain", minGainDefault, "auto: apply only past this predicted gain of the first answer, in percent")
	f.String("latency-mode", "real", "auto: the servers' emulated WAN (real or paper), as they run it: the model's delays")
	f.Uint64("seed", 1, "auto: seed of the search")
	f.Bool("json", false, "print one JSON object")
	addClientTLSFlags(f)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(fmt.Errorf("overlay apply: %w", err)) })
	cmd.RunE = runOverlayApply
	return cmd
}

func runOverlayApply(c *cobra.Command, args []string) error {
	v := settings(c)
	if args[0] == "auto" {
		cfg, creds, o, err := autoSetup(c, "overlay apply")
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(c.Context(), v.GetDuration("timeout"))
		defer cancel()
		out, err := runAuto(ctx, cfg, creds, o)
		if err != nil {
			return fmt.Errorf("overlay apply: %w", err)
		}
		if v.GetBool("json") {
			return writeJSON(c.OutOrStdout(), out)
		}
		return printAuto(c.OutOrStdout(), out)
	}
	cfg, _, err := loadCluster(v.GetString("config"))
	if err != nil {
		return usageError(fmt.Errorf("overlay apply: %w", err))
	}
	req, err := overlayRequest(cfg, args[0], v.GetString("tree"))
	if err != nil {
		return usageError(fmt.Errorf("overlay apply: %w", err))
	}
	req.Epoch = v.GetUint64("epoch")
	tlsCfg, err := clientTLS(v)
	if err != nil {
		return usageError(fmt.Errorf("overlay apply: %w", err))
	}
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	ctx, cancel := context.WithTimeout(c.Context(), v.GetDuration("timeout"))
	defer cancel()
	if err := requireLeaders(ctx, cfg, creds); err != nil {
		return fmt.Errorf("overlay apply: %w", err)
	}
	resp, err := applyChange(ctx, cfg, creds, req)
	if err != nil {
		return fmt.Errorf("overlay apply: %w", err)
	}
	if v.GetBool("json") {
		return writeJSON(c.OutOrStdout(), map[string]any{"epoch": resp.GetEpoch(), "overlay": req.GetOverlay()})
	}
	_, err = fmt.Fprintf(c.OutOrStdout(), "epoch %d: overlay %s\n", resp.GetEpoch(), strings.Join(req.GetOverlay(), ","))
	return err
}

// overlayRequest checks ORDER and the tree against cfg's groups and returns
// the request: every group once, by name; a tree over the groups.
func overlayRequest(cfg *partition.ClusterConfig, order, tree string) (*apipb.ReconfigureRequest, error) {
	names := make([]string, len(cfg.Groups))
	for i, g := range cfg.Groups {
		names[i] = g.Name
	}
	req := &apipb.ReconfigureRequest{}
	for _, name := range strings.Split(order, ",") {
		switch {
		case !slices.Contains(names, name):
			return nil, fmt.Errorf("%q is not a group (the groups: %s)", name, strings.Join(names, ", "))
		case slices.Contains(req.Overlay, name):
			return nil, fmt.Errorf("%q listed twice", name)
		}
		req.Overlay = append(req.Overlay, name)
	}
	var missing []string
	for _, n := range names {
		if !slices.Contains(req.Overlay, n) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("missing %s: list every group once", strings.Join(missing, ", "))
	}
	if tree == "" {
		return req, nil
	}
	parent := map[string]string{}
	for _, edge := range strings.Split(tree, ",") {
		child, par, ok := strings.Cut(edge, "=")
		if !ok {
			return nil, fmt.Errorf("--tree: %q: want child=parent", edge)
		}
		if _, dup := parent[child]; dup {
			return nil, fmt.Errorf("--tree: %q has two parents", child)
		}
		parent[child] = par
		req.Tree = append(req.Tree, &apipb.TreeEdge{Child: child, Parent: par})
	}
	groups := make([]partition.Group, len(names))
	for i, n := range names {
		groups[i] = partition.Group{Name: n}
	}
	if _, err := partition.NewTopology(partition.Spec{Groups: groups, Parent: parent}); err != nil {
		return nil, fmt.Errorf("--tree: %w", err)
	}
	return req, nil
}

// reconfigureAt sends req to the leader of group g: it tries g's replicas
// in turn while they answer that they do not lead. The change names its
// epoch (the highest g's replicas report, without --epoch), so that a
// change sent again after an attempt of unknown outcome (a leader lost
// while it answered) is never taken twice: refused "epoch changed" at the
// epoch the first one started, it is reported as taken.
func reconfigureAt(ctx context.Context, g partition.GroupConfig, creds credentials.TransportCredentials, req *apipb.ReconfigureRequest) (*apipb.ReconfigureResponse, error) {
	var last error
	mayHaveRun := false
	for round := 0; ctx.Err() == nil; round++ {
		for _, r := range g.Replicas {
			cc, err := grpc.NewClient(r.GRPC, append(rpcflow.DialOptions(), grpc.WithTransportCredentials(creds))...)
			if err != nil {
				return nil, err
			}
			kv := apipb.NewKVClient(cc)
			if req.Epoch == 0 {
				if st, err := kv.Status(ctx, &apipb.StatusRequest{}); err == nil && st.GetRole() == "leader" {
					req.Epoch = st.GetEpoch()
				}
			}
			var resp *apipb.ReconfigureResponse
			var md metadata.MD
			if req.Epoch != 0 {
				resp, err = kv.Reconfigure(ctx, req, grpc.Trailer(&md))
			} else {
				err = status.Errorf(codes.Unavailable, "not the leader")
			}
			cc.Close()
			if mayHaveRun && status.Code(err) == codes.FailedPrecondition && slices.Contains(md.Get(apipb.EpochTrailer), strconv.FormatUint(req.Epoch+1, 10)) {
				return &apipb.ReconfigureResponse{Epoch: req.Epoch + 1}, nil
			}
			if e := trailerEpoch(md); status.Code(err) == codes.FailedPrecondition && e > req.Epoch {
				return nil, &laterEpochError{epoch: e, err: err}
			}
			if status.Code(err) != codes.Unavailable {
				return resp, err
			}
			// A replica that did not lead says so before it ran anything
			// (NotRunTrailer); any other unavailable answer may come after
			// the change was taken.
			mayHaveRun = mayHaveRun || (req.Epoch != 0 && len(md.Get(apipb.NotRunTrailer)) == 0)
			last = fmt.Errorf("%s/%s at %s: %w", g.Name, r.ID, r.GRPC, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("group %s: no leader took the change: %w", g.Name, last)
}

// laterEpochError is a change refused by a group at a later epoch than the
// change names: another change ran first, or the view of the cluster that
// chose the group was older than the group.
type laterEpochError struct {
	epoch uint64
	err   error
}

func (e *laterEpochError) Error() string { return e.err.Error() }
func (e *laterEpochError) Unwrap() error { return e.err }

// trailerEpoch returns the epoch a refusal's trailer names (0: none).
func trailerEpoch(md metadata.MD) uint64 {
	var e uint64
	for _, v := range md.Get(apipb.EpochTrailer) {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			e = max(e, n)
		}
	}
	return e
}

// applyChange sends req to the group that takes the changes of the
// running cluster. A change that names no epoch names its view's: each
// group starts an epoch at its own delivery of the change, so the group a
// view names may not have started that epoch yet (it waits for it, DESIGN
// 14), or the replica that gave the view may not have (a group at a later
// epoch refuses the change naming it): then the view is taken again, a few
// times. A change that names its epoch is sent once as named.
func applyChange(ctx context.Context, cfg *partition.ClusterConfig, creds credentials.TransportCredentials, req *apipb.ReconfigureRequest) (*apipb.ReconfigureResponse, error) {
	named := req.Epoch != 0
	for attempt := 1; ; attempt++ {
		entry, epoch, err := changeEntry(ctx, cfg, creds)
		if err != nil {
			return nil, err
		}
		if !named {
			req.Epoch = epoch
		}
		resp, err := reconfigureAt(ctx, entry, creds, req)
		var later *laterEpochError
		if named || !errors.As(err, &later) || attempt == 5 {
			return resp, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
		}
	}
}

// changeEntry returns the group that takes the changes of the running
// cluster: the lowest rank of the current epoch's overlay (the tree
// protocol's root), with the current epoch's members, as the replica of
// cfg at the newest epoch tells (fetchTopology), and that epoch.
func changeEntry(ctx context.Context, cfg *partition.ClusterConfig, creds credentials.TransportCredentials) (partition.GroupConfig, uint64, error) {
	v, err := viewCluster(ctx, cfg, creds)
	if err != nil {
		return partition.GroupConfig{}, 0, err
	}
	name := v.etop.Name(v.proto.ChangeEntry(v.etop))
	return v.cfg.Groups[slices.IndexFunc(v.cfg.Groups, func(g partition.GroupConfig) bool { return g.Name == name })], v.resp.GetEpoch(), nil
}

// clientCreds returns the transport credentials of the client TLS flags.
func clientCreds(v *viper.Viper) (credentials.TransportCredentials, error) {
	tlsCfg, err := clientTLS(v)
	if err != nil {
		return nil, err
	}
	if tlsCfg == nil {
		return insecure.NewCredentials(), nil
	}
	return credentials.NewTLS(tlsCfg), nil
}
