package interaction

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/datadriven"
)

// handleSnapshotRestore replaces a group's core and node by copies restored
// from their snapshots (Env.SnapshotRestore):
//
//	snapshot-restore group=G
func handleSnapshotRestore(e *Env, d *datadriven.TestData, b *strings.Builder) error {
	g, err := e.groupArg(d)
	if err != nil {
		return err
	}
	if err := e.SnapshotRestore(g); err != nil {
		return err
	}
	fmt.Fprintf(b, "%s restored; its snapshots encode again to the same bytes\n", e.top.Name(g))
	return nil
}
