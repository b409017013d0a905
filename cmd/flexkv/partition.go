package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/flexkv/flexkv/api"
	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/partition"
)

// The partitions of a running cluster (DESIGN 14): `flexkv partition list`
// and `flexkv partition move`.

func newPartitionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "partition list|move",
		Short: "Show the partitions of a running cluster, and move one to another group",
		Long: `Show the partitions of a running cluster (DESIGN 14), as the current epoch's
configuration maps them: each partition's key range, owner and any move under
way; move a partition to another group, online. Every command reaches the
cluster at the replicas of --config (default: the embedded configs/local.yaml)
or of --endpoints, with the client TLS flags of flexkv kv, and reads the
configuration of the newest epoch that one of them reports.

Exit codes: 0 done, 1 the cluster refused or did not answer, 2 bad usage.`,
	}
	needSubcommand(cmd, "list or move")
	setUsageErrors(cmd)
	cmd.AddCommand(newPartitionListCmd(), newPartitionMoveCmd())
	return cmd
}

func newPartitionListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list [--config FILE | --endpoints host:port,...] [--json]",
		Short: "Show every partition, its key range and its owner",
		Long: `Print one line per partition of the current epoch, in key order:

  PARTITION START END GROUP REGION MOVE

START and END are the range [START, END) as quoted strings (END "" has no
upper bound); GROUP is the owning group, or "*" for a replicated range
(every group holds a copy and owns none); REGION is the owner's region;
MOVE is "-", or a move under way (flexkv partition move): "-> GROUP", the
rows and bytes its new owner holds so far, and "copied" once every chunk is
in (the move then completes at the next change).

With --json, one JSON object per partition, one per line:
{"partition":"w0001","start":"w/0001/","end":"w/0002/","group":"eu-west-1",
 "region":"eu-west-1","replicated":false,"epoch":1}
(start and end as JSON strings of the key bytes; a replicated range has
"group":"" and "replicated":true); a moving partition adds
"moving_to":"eu-west-3","moving_since":4,"move_keys":N,"move_bytes":B,
"move_copied":false.

Exit codes: 0 done, 1 no replica answered, 2 bad usage.`,
		Args: noArgs,
	}
	addMemberFlags(cmd.Flags(), 10*time.Second)
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(fmt.Errorf("partition list: %w", err)) })
	cmd.RunE = runPartitionList
	return cmd
}

// partitionRow is one line of flexkv partition list.
type partitionRow struct {
	Partition  string `json:"partition"`
	Start      string `json:"start"`
	End        string `json:"end"`
	Group      string `json:"group"`
	Region     string `json:"region"`
	Replicated bool   `json:"replicated"`
	Epoch      uint64 `json:"epoch"`
	// A move under way (omitted otherwise): the group it moves to, the
	// epoch it started, and what the new owner holds of it.
	MovingTo    string  `json:"moving_to,omitempty"`
	MovingSince uint64  `json:"moving_since,omitempty"`
	MoveKeys    *uint64 `json:"move_keys,omitempty"`
	MoveBytes   *uint64 `json:"move_bytes,omitempty"`
	MoveCopied  *bool   `json:"move_copied,omitempty"`
}

func runPartitionList(c *cobra.Command, _ []string) error {
	v := settings(c)
	m, err := memberConnOf(v)
	if err != nil {
		return usageError(fmt.Errorf("partition list: %w", err))
	}
	defer m.close()
	ctx, cancel := context.WithTimeout(c.Context(), v.GetDuration("timeout"))
	defer cancel()
	rows, err := m.partitionView(ctx)
	if err != nil {
		return fmt.Errorf("partition list: %w", err)
	}
	return printPartitionRows(c.OutOrStdout(), rows, v.GetBool("json"))
}

// partitionView returns the rows of the newest epoch a replica reports,
// with the progress of each move as its new owner's replicas report it.
func (m *memberConn) partitionView(ctx context.Context) ([]partitionRow, error) {
	resp, err := m.topologyResp(ctx)
	if err != nil {
		return nil, err
	}
	cfg, _, err := api.ConfigFromProto(resp)
	if err != nil {
		return nil, err
	}
	rows, err := partitionRows(cfg, resp.GetEpoch())
	if err != nil {
		return nil, err
	}
	for _, p := range resp.GetPartitions() {
		if p.GetMovingTo() == "" {
			continue
		}
		for i := range rows {
			if rows[i].Partition != p.GetName() {
				continue
			}
			rows[i].MovingTo, rows[i].MovingSince = p.GetMovingTo(), p.GetMovingSince()
			if mp := m.moveProgress(ctx, cfg, p.GetMovingTo(), p.GetName(), p.GetMovingSince()); mp != nil {
				keys, bytes, done := mp.GetKeys(), mp.GetBytes(), mp.GetDone()
				rows[i].MoveKeys, rows[i].MoveBytes, rows[i].MoveCopied = &keys, &bytes, &done
			}
		}
	}
	return rows, nil
}

// moveProgress asks the replicas of group to for the copy of partition
// name they hold, and returns the most advanced answer; nil if none
// answered with it.
func (m *memberConn) moveProgress(ctx context.Context, cfg *partition.ClusterConfig, to, name string, since uint64) *apipb.MoveProgress {
	var best *apipb.MoveProgress
	for _, g := range cfg.Groups {
		if g.Name != to {
			continue
		}
		for _, r := range g.Replicas {
			kv, err := m.kv(r.GRPC)
			if err != nil {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, memberCallTimeout)
			st, err := kv.Status(cctx, &apipb.StatusRequest{})
			cancel()
			if err != nil {
				continue
			}
			for _, mp := range st.GetMovesIn() {
				if mp.GetPartition() == name && mp.GetSince() == since && (best == nil || mp.GetBytes() > best.GetBytes() || mp.GetDone()) {
					best = mp
				}
			}
		}
	}
	return best
}

// partitionRows returns the rows of cfg's partitions, in key order.
func partitionRows(cfg *partition.ClusterConfig, epoch uint64) ([]partitionRow, error) {
	top, pm, err := cfg.Build()
	if err != nil {
		return nil, fmt.Errorf("partition list: the cluster's configuration: %w", err)
	}
	var rows []partitionRow
	for _, p := range pm.Partitions() {
		r := partitionRow{Partition: p.Name, Start: string(p.Start), End: string(p.End), Replicated: p.Replicated, Epoch: epoch}
		if !p.Replicated {
			g := top.Group(p.Group)
			r.Group, r.Region = g.Name, cmp.Or(g.Region, g.Name)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// printPartitionRows prints rows as a table, or as JSON lines.
func printPartitionRows(w io.Writer, rows []partitionRow, asJSON bool) error {
	if asJSON {
		return writeJSONLines(w, rows)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tSTART\tEND\tGROUP\tREGION\tMOVE")
	for _, r := range rows {
		group := r.Group
		if r.Replicated {
			group = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", dash(r.Partition), strconv.Quote(r.Start), strconv.Quote(r.End), group, dash(r.Region), r.move())
	}
	return tw.Flush()
}

// move is the MOVE column of r.
func (r partitionRow) move() string {
	if r.MovingTo == "" {
		return "-"
	}
	s := "-> " + r.MovingTo
	switch {
	case r.MoveKeys == nil:
		s += " (no copy reported yet)"
	case *r.MoveCopied:
		s += fmt.Sprintf(" copied: %d rows, %s", *r.MoveKeys, byteSize(*r.MoveBytes))
	default:
		s += fmt.Sprintf(" copying: %d rows, %s so far", *r.MoveKeys, byteSize(*r.MoveBytes))
	}
	return s
}

// byteSize formats n bytes for a person.
func byteSize(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func newPartitionMoveCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "move PARTITION --to GROUP [--wait] [--config FILE | --endpoints host:port,...] [--json]",
		Short: "Move a partition to another group, online, at a cut of the cluster's order",
		Long: `Move PARTITION (a warehouse) to GROUP while the cluster runs (DESIGN 14).

The move is two changes of the cluster's epoch, each a cut of its order. At
the first, the old owner stops writing the partition: requests that touch it
are refused as busy and retried by the clients, which see no error, only
latency. The new owner's leader then copies the partition from a replica of
the old owner, in chunks of at most 256 KiB committed through its own log
(a chunk sent twice is dropped; a new leader on either side resumes where
the copy stands), counted in flexkv_partition_move_bytes. Once every chunk
is in, the new owner asks for the second change, which makes it the owner:
clients route there from that epoch on, and the old owner deletes the
range at that change, on every replica alike.

Without --wait the command returns once the move started; flexkv partition
list shows its progress. With --wait it prints the progress on stderr and
returns once GROUP owns the partition (or --timeout passes: exit 1, and the
move goes on).

Refused (exit 2, nothing changed): an unknown partition or group, a
replicated partition, a partition GROUP owns already. Refused by the
cluster (exit 1): a partition already moving, a change under way.

Exit codes: 0 done, 1 refused or not done in time, 2 bad usage.`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError(fmt.Errorf("partition move: want one PARTITION, got %d arguments", len(args)))
			}
			return nil
		},
	}
	addMemberFlags(cmd.Flags(), 2*time.Minute)
	cmd.Flags().String("to", "", "the group to move the partition to (required)")
	cmd.Flags().Bool("wait", false, "wait until the group owns the partition, printing the progress on stderr")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(fmt.Errorf("partition move: %w", err)) })
	cmd.RunE = runPartitionMove
	return cmd
}

func runPartitionMove(c *cobra.Command, args []string) error {
	v := settings(c)
	name, to := args[0], v.GetString("to")
	if to == "" {
		return usageError(errors.New("partition move: --to GROUP is required"))
	}
	m, err := memberConnOf(v)
	if err != nil {
		return usageError(fmt.Errorf("partition move: %w", err))
	}
	defer m.close()
	ctx, cancel := context.WithTimeout(c.Context(), v.GetDuration("timeout"))
	defer cancel()
	rows, err := m.partitionView(ctx)
	if err != nil {
		return fmt.Errorf("partition move: %w", err)
	}
	cfg, epoch, err := m.topology(ctx)
	if err != nil {
		return fmt.Errorf("partition move: %w", err)
	}
	if err := checkMove(cfg, rows, name, to); err != nil {
		return err
	}
	resp, err := m.reconfigure(ctx, cfg, &apipb.ReconfigureRequest{Epoch: epoch, Move: &apipb.PartitionMove{Partition: name, To: to}})
	if err != nil {
		return fmt.Errorf("partition move: %w", err)
	}
	started := resp.GetEpoch()
	if !v.GetBool("wait") {
		if v.GetBool("json") {
			return writeJSON(c.OutOrStdout(), map[string]any{"partition": name, "to": to, "epoch": started, "done": false})
		}
		_, err = fmt.Fprintf(c.OutOrStdout(), "epoch %d: partition %s moving to group %s; flexkv partition list shows the progress\n", started, name, to)
		return err
	}
	done, err := waitMove(ctx, c.ErrOrStderr(), m, name, to)
	if err != nil {
		return fmt.Errorf("partition move: %s to %s started at epoch %d, not done: %w", name, to, started, err)
	}
	if v.GetBool("json") {
		return writeJSON(c.OutOrStdout(), map[string]any{"partition": name, "to": to, "epoch": done, "done": true})
	}
	_, err = fmt.Fprintf(c.OutOrStdout(), "epoch %d: partition %s moved to group %s\n", done, name, to)
	return err
}

// checkMove checks a move of partition name to group to against the
// newest epoch's rows: bad input is refused before the cluster sees it.
func checkMove(cfg *partition.ClusterConfig, rows []partitionRow, name, to string) error {
	known := false
	for _, g := range cfg.Groups {
		known = known || g.Name == to
	}
	if !known {
		names := make([]string, len(cfg.Groups))
		for i, g := range cfg.Groups {
			names[i] = g.Name
		}
		return usageError(fmt.Errorf("partition move: unknown group %q (the groups: %s)", to, strings.Join(names, ", ")))
	}
	for _, r := range rows {
		if r.Partition != name {
			continue
		}
		switch {
		case r.Replicated:
			return usageError(fmt.Errorf("partition move: %s is replicated: every group holds it", name))
		case r.Group == to:
			return usageError(fmt.Errorf("partition move: %s is group %s's already", name, to))
		case r.MovingTo != "":
			return &exitError{code: 1, err: fmt.Errorf("partition move: %s is moving to %s since epoch %d: one move at a time", name, r.MovingTo, r.MovingSince)}
		}
		return nil
	}
	return usageError(fmt.Errorf("partition move: unknown partition %q (flexkv partition list shows them)", name))
}

// waitMove waits until group to owns partition name with no move under
// way, printing the progress to w when it changes; it returns the epoch.
func waitMove(ctx context.Context, w io.Writer, m *memberConn, name, to string) (uint64, error) {
	last := ""
	for {
		rows, err := m.partitionView(ctx)
		if err == nil {
			for _, r := range rows {
				if r.Partition != name {
					continue
				}
				if r.Group == to && r.MovingTo == "" {
					return r.Epoch, nil
				}
				if line := r.move(); line != last {
					fmt.Fprintf(w, "partition %s: group %s, epoch %d, move %s\n", name, r.Group, r.Epoch, line)
					last = line
				}
			}
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return 0, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
