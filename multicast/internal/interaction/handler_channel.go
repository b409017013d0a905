package interaction

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/datadriven"
)

// handleChannel shows a node's channel counters and the envelopes it
// rejected:
//
//	channel group=G
func handleChannel(e *Env, d *datadriven.TestData, b *strings.Builder) error {
	g, err := e.groupArg(d)
	if err != nil {
		return err
	}
	s := e.nodes[g].Stats()
	fmt.Fprintf(b, "%+v rejected=%d\n", s.Channel, s.EnvelopesRejected)
	return nil
}
