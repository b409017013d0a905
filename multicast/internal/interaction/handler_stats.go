package interaction

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/datadriven"
)

// handleStats shows a core's counters as its protocol does (Protocol.Stats):
//
//	stats group=G
func handleStats(e *Env, d *datadriven.TestData, b *strings.Builder) error {
	if e.proto.Stats == nil {
		return fmt.Errorf("stats: the protocol shows no stats")
	}
	g, err := e.groupArg(d)
	if err != nil {
		return err
	}
	fmt.Fprintf(b, "%s\n", e.proto.Stats(e.cores[g]))
	return nil
}
