package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/flexkv/flexkv/multicast/check"
)

// newCheckLogCmd returns `flexkv check-log PATH [--complete] [--genuine]`
// (DESIGN 10.1). It prints the report's summary line on stdout and exits 0
// when every property holds, 1 on a violation (described on stderr, at most
// --details of each property), and 2 on unreadable input or bad usage.
func newCheckLogCmd() *cobra.Command {
	var opt check.Options
	cmd := &cobra.Command{
		Use:           "check-log PATH",
		SilenceUsage:  true,
		SilenceErrors: true, // main prints the error once
		Short:         "Check a delivery log against the properties of atomic multicast",
		Long: `Check a delivery log (one JSON Lines file, or a directory of *.jsonl files)
against integrity, replica agreement, prefix order and acyclic order, and
optionally validity and agreement (--complete) and genuineness (--genuine).
Prints one summary line; exits 0 when ok, 1 on a violation, 2 when the log
cannot be read.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return &exitError{code: 2, err: fmt.Errorf("check-log: want one PATH, got %d arguments", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c := check.New(opt)
			if err := check.ScanLog(args[0], c.Add); err != nil {
				return &exitError{code: 2, err: err}
			}
			rep := c.Report()
			fmt.Fprintln(cmd.OutOrStdout(), rep.Summary())
			if rep.OK() {
				return nil
			}
			stderr := cmd.ErrOrStderr()
			for _, v := range rep.Violations {
				fmt.Fprintln(stderr, v)
			}
			total := rep.ViolationsTotal()
			if more := total - len(rep.Violations); more > 0 {
				fmt.Fprintf(stderr, "... and %d more violations not shown\n", more)
			}
			return &exitError{code: 1, err: fmt.Errorf("check-log: %d violations", total)}
		},
	}
	cmd.Flags().BoolVar(&opt.Complete, "complete", false, "the run ended quiescent: check validity and agreement too")
	cmd.Flags().BoolVar(&opt.Genuine, "genuine", false, "the protocol is genuine (flexcast, skeen): check genuineness too")
	cmd.Flags().IntVar(&opt.DetailsMax, "details", check.DetailsMaxDefault, "violations of each property to describe")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: 2, err: fmt.Errorf("check-log: %w", err)}
	})
	return cmd
}
