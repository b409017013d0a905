// Command flexkv runs FlexKV: servers, a local cluster, the gTPC-C demo and
// driver, a client, and the simulator and log checker of its multicast
// protocols.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/flexkv/flexkv/internal/buildinfo"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "flexkv:", err)
		os.Exit(exitCode(err))
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "flexkv",
		Short:         "FlexKV: a geo-distributed transactional key-value store ordered by atomic multicast",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildinfo.Read().String(),
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(newVersionCmd(), newServerCmd(), newLocalCmd(), newDemoCmd(), newKVCmd(), newGtpccCmd(), newSimCmd(), newCheckLogCmd(), newCertCmd(), newStatusCmd(), newOverlayCmd(), newMemberCmd(), newPartitionCmd(), newBenchCmd(), newBackupCmd(), newHealthCmd(), newDebugCmd())
	return root
}

// exitError carries a specific exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// needSubcommand makes cmd, a command of subcommands (want lists them),
// refuse to run alone or with an unknown subcommand: a usage error.
func needSubcommand(cmd *cobra.Command, want string) {
	cmd.Args = func(c *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageError(fmt.Errorf("%s: unknown command %q (want %s)", c.Name(), args[0], want))
		}
		return nil
	}
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		return usageError(fmt.Errorf("%s: want a command: %s", c.Name(), want))
	}
}

func exitCode(err error) int {
	if e := (*exitError)(nil); errors.As(err, &e) {
		return e.code
	}
	return 1
}
