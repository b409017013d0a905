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
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/internal/rpcflow"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

const overlayApplyLong = `Change the overlay of a running cluster (DESIGN 14): end the current epoch and
start the next with the overlay ORDER (every group once, by name, lowest
FlexCast rank first) and the tree of --tree (child=parent,...; default: the
current one). The change is a control message multicast to every group
through the protocol in use; every group starts the new epoch at its
delivery, while transactions run: clients whose requests meet the change
resubmit them, and see no error.

The command sends the change to the group that takes the changes (the
lowest rank; the tree protocol's root), at the replicas of --config (default:
the embedded configs/local.yaml), with the client TLS flags of flexkv kv, and
prints the epoch it starts.

Built so far: changes that keep the overlay, which start a new epoch; an
ORDER or a tree that differs from the running one is refused by the cluster
("alters the overlay"), and "auto" (the suggestion of the destination sets
counted in the epoch) is not built yet.

Refused, naming the problem, with nothing changed: an unknown, missing or
duplicate group, a tree that is not a tree (exit 2); a change while another
is under way, or of an epoch that has ended ("epoch changed"), or that the
cluster refuses (exit 1).

With --json, one object: {"epoch":2,"overlay":["eu-west-1",...]}.`

func newOverlayApplyCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "apply ORDER [--tree child=parent,...] [--config FILE] [--json]",
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
	f.Duration("timeout", 10*time.Second, "how long the cluster may take to take the change")
	f.Bool("json", false, "print one JSON object")
	addClientTLSFlags(f)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(fmt.Errorf("overlay apply: %w", err)) })
	cmd.RunE = runOverlayApply
	return cmd
}

func runOverlayApply(c *cobra.Command, args []string) error {
	v := settings(c)
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
	p, top, _, err := protocol.Build(cfg)
	if err != nil {
		return usageError(fmt.Errorf("overlay apply: %w", err))
	}
	entry := cfg.Groups[slices.IndexFunc(cfg.Groups, func(g partition.GroupConfig) bool { return g.Name == top.Name(p.ChangeEntry(top)) })]
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	ctx, cancel := context.WithTimeout(c.Context(), v.GetDuration("timeout"))
	defer cancel()
	resp, err := reconfigureAt(ctx, entry, creds, req)
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
	if order == "auto" {
		return nil, errors.New("auto: not built yet (the destination sets counted per epoch); give the order")
	}
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
			if status.Code(err) != codes.Unavailable {
				return resp, err
			}
			mayHaveRun = mayHaveRun || req.Epoch != 0
			last = fmt.Errorf("%s/%s at %s: %w", g.Name, r.ID, r.GRPC, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil, fmt.Errorf("group %s: no leader took the change: %w", g.Name, last)
}
