package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/flexcast"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/multicast/sim"
)

// newSimCmd returns `flexkv sim` (DESIGN 10.2): one seeded simulator run,
// checked against every property of atomic multicast. It prints the
// checker's summary line and a line of counts on stdout (and the per-group
// table with --verbose) and exits 0 when every property holds, 1 when one is
// violated or the run cannot finish (the error names the seed and the
// command that replays it), and 2 on a bad flag.
func newSimCmd() *cobra.Command {
	var (
		cfg         sim.Config
		protoName   string
		latencyMode string
		logPath     string
		verbose     bool
	)
	cmd := &cobra.Command{
		Use:           "sim --protocol flexcast|skeen|tree --groups N --messages M --seed S",
		SilenceUsage:  true,
		SilenceErrors: true, // main prints the error once
		Short:         "Run the seeded simulator of the ordering protocols",
		Long: `Run one seeded simulation of an ordering protocol: groups with the reliable
channel layer over a network that delays (by latency matrix), reorders, drops,
duplicates and partitions, clients submitting messages, and a checker of every
property of atomic multicast. With 12 groups the groups are the aws-12 regions
(overlay O1 and tree T1 unless --overlay/--tree say otherwise); with fewer,
a random matrix and tree drawn from the seed. The same flags replay the same
run exactly. Exits 0 when ok, 1 on a violated property, 2 on a bad flag.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 0 {
				return usageError(fmt.Errorf("sim: unexpected arguments %q", args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if protoName == "" {
				return usageError(errors.New("sim: --protocol is required (flexcast, skeen or tree)"))
			}
			p, err := protocol.Lookup(multicast.Protocol(protoName))
			if err != nil {
				return usageError(fmt.Errorf("sim: --protocol: %w", err))
			}
			mode, err := sim.ParseLatencyMode(latencyMode)
			if err != nil {
				return usageError(fmt.Errorf("sim: --latency-mode: %w", err))
			}
			cfg.Protocol, cfg.LatencyMode = p.Name(), mode
			// Check the configuration before creating the log file, so that
			// a bad flag leaves no file behind.
			if err := cfg.Validate(); err != nil {
				return usageError(err)
			}
			var logFile *os.File
			if logPath != "" {
				if logFile, err = os.Create(logPath); err != nil {
					return usageError(fmt.Errorf("sim: --delivery-log: %w", err))
				}
				cfg.DeliveryLog = logFile
			}
			res, runErr := sim.Run(cfg)
			if logFile != nil {
				if err := logFile.Close(); err != nil && runErr == nil {
					runErr = fmt.Errorf("sim: --delivery-log: %w", err)
				}
			}
			out := cmd.OutOrStdout()
			if res.Config.Protocol != "" { // the run started
				fmt.Fprintln(out, res.Summary())
				if verbose {
					printGroups(out, res)
				}
			}
			if runErr != nil {
				return &exitError{code: 1, err: runErr}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&protoName, "protocol", "", "ordering protocol: flexcast, skeen or tree (required)")
	f.IntVar(&cfg.Groups, "groups", 12, fmt.Sprintf("number of groups, %d..%d (12: the aws-12 regions)", sim.GroupsMin, sim.GroupsMax))
	f.IntVar(&cfg.Messages, "messages", 1000, fmt.Sprintf("messages to multicast, 1..%d", sim.MessagesMax))
	f.Int64Var(&cfg.Seed, "seed", 1, "seed of every random choice of the run")
	f.IntVar(&cfg.DstMax, "dst-max", 0, fmt.Sprintf("largest destination set, 1..%d (0: %d)", sim.DstMaxLimit, sim.DstMaxDefault))
	f.Float64Var(&cfg.Locality, "locality", 0, "probability that a further destination is the nearest remaining group")
	f.Float64Var(&cfg.GapMs, "gap-ms", 0, fmt.Sprintf("mean simulated ms between submissions (0: %g)", sim.GapMsDefault))
	f.Float64Var(&cfg.Drop, "drop", 0, fmt.Sprintf("probability that a frame is lost, 0..%g", sim.DropMax))
	f.Float64Var(&cfg.Dup, "dup", 0, fmt.Sprintf("probability that a frame is duplicated, 0..%g", sim.DupMax))
	f.Float64Var(&cfg.Partition, "partition", 0, "probability per 250 ms that a group is isolated or a link cut, 0..1")
	f.Float64Var(&cfg.JitterMs, "jitter-ms", 0, "extra one-way delay, uniform in [0, jitter-ms): reorders frames")
	f.StringVar(&latencyMode, "latency-mode", "", "half (aws-12, value/2), paper (aws-12, full value) or random (default: half with 12 groups, else random)")
	f.StringVar(&cfg.Overlay, "overlay", "", "FlexCast overlay of the aws-12 regions: O1 or O2 (default O1)")
	f.StringVar(&cfg.Tree, "tree", "", "tree of the aws-12 regions: T1, T2 or T3 (default T1)")
	f.IntVar(&cfg.OutboxMax, "outbox-max", 0, fmt.Sprintf("unacknowledged envelopes per link before a group refuses requests (0: %d)", sim.OutboxMaxDefault))
	f.IntVar(&cfg.Changes, "changes", 0, fmt.Sprintf("changes of the epoch during the submissions, half of them of the overlay (new ranks; a new tree under tree) (at most %d)", sim.ChangesMax))
	f.IntVar(&cfg.GCTicks, "gc-ticks", 0, fmt.Sprintf("FlexCast: a garbage-collection round every this many ticks of 10 ms (0: %d per three groups)", flexcast.GCTicksDefault))
	f.IntVar(&cfg.HoldbackMax, "holdback-max", 0, fmt.Sprintf("out-of-order frames kept per link (0: %d)", sim.HoldbackMaxDefault))
	f.Float64Var(&cfg.LivenessMs, "liveness-ms", 0, fmt.Sprintf("simulated ms after the faults end to finish in (0: %g)", sim.LivenessMsDefault))
	f.IntVar(&cfg.EventsMax, "events-max", 0, fmt.Sprintf("events one run may process (0: %d)", sim.EventsMaxDefault))
	f.StringVar(&logPath, "delivery-log", "", "write the delivery log (JSON Lines, DESIGN 10.1) to this file")
	f.BoolVarP(&verbose, "verbose", "v", false, "also print each group's deliveries, payload messages received and overhead")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return usageError(fmt.Errorf("sim: %w", err))
	})
	return cmd
}

func usageError(err error) error { return &exitError{code: 2, err: err} }

func printGroups(w io.Writer, res sim.Result) {
	fmt.Fprintf(w, "%-16s %10s %9s %8s %7s %8s\n", "group", "delivered", "received", "overhead", "sends", "frames")
	for _, g := range res.Groups {
		fmt.Fprintf(w, "%-16s %10d %9d %8.3f %7d %8d\n", g.Name, g.Deliveries, g.Received, g.Overhead(), g.Sends, g.Frames)
	}
}
