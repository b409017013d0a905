package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/flexkv/flexkv/partition"
)

// The partitions of a running cluster (DESIGN 14): `flexkv partition list`.

func newPartitionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "partition list",
		Short: "Show the partitions of a running cluster and the group that owns each",
		Long: `Show the partitions of a running cluster (DESIGN 14), as the current epoch's
configuration maps them: each partition's key range and owner. Every command
reaches the cluster at the replicas of --config (default: the embedded
configs/local.yaml) or of --endpoints, with the client TLS flags of flexkv
kv, and reads the configuration of the newest epoch that one of them reports.

Exit codes: 0 done, 1 no replica answered, 2 bad usage.`,
	}
	needSubcommand(cmd, "list")
	setUsageErrors(cmd)
	cmd.AddCommand(newPartitionListCmd())
	return cmd
}

func newPartitionListCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list [--config FILE | --endpoints host:port,...] [--json]",
		Short: "Show every partition, its key range and its owner",
		Long: `Print one line per partition of the current epoch, in key order:

  PARTITION START END GROUP REGION

START and END are the range [START, END) as quoted strings (END "" has no
upper bound); GROUP is the owning group, or "*" for a replicated range
(every group holds a copy and owns none); REGION is the owner's region.

With --json, one JSON object per partition, one per line:
{"partition":"w0001","start":"w/0001/","end":"w/0002/","group":"eu-west-1",
 "region":"eu-west-1","replicated":false,"epoch":1}
(start and end as JSON strings of the key bytes; a replicated range has
"group":"" and "replicated":true).

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
}

func runPartitionList(c *cobra.Command, _ []string) error {
	return withClusterView(c, "partition list", func(_ context.Context, _ *memberConn, cfg *partition.ClusterConfig, epoch uint64) error {
		rows, err := partitionRows(cfg, epoch)
		if err != nil {
			return err
		}
		return printPartitionRows(c.OutOrStdout(), rows, settings(c).GetBool("json"))
	})
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
	fmt.Fprintln(tw, "PARTITION\tSTART\tEND\tGROUP\tREGION")
	for _, r := range rows {
		group := r.Group
		if r.Replicated {
			group = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", dash(r.Partition), strconv.Quote(r.Start), strconv.Quote(r.End), group, dash(r.Region))
	}
	return tw.Flush()
}
