package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/flexkv/flexkv/internal/buildinfo"
)

// newVersionCmd is `flexkv version [--json]`: the module version, the VCS
// revision and its time, and the Go version, as the toolchain recorded them
// in this binary. `flexkv --version` prints the same line.
func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, revision and Go version this binary was built with",
		Args:  noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			info := buildinfo.Read()
			if asJSON {
				return writeJSON(c.OutOrStdout(), info)
			}
			_, err := fmt.Fprintln(c.OutOrStdout(), info)
			return err
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object: version, revision, time, modified, go_version")
	setUsageErrors(cmd)
	return cmd
}
