package interaction

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/datadriven"
)

// handleLinks shows the frames in flight, one line per link in (from, to)
// order, marking held links:
//
//	links
func handleLinks(e *Env, _ *datadriven.TestData, b *strings.Builder) error {
	keys, frames := e.links()
	for _, k := range keys {
		var shown []string
		for _, f := range frames[k] {
			shown = append(shown, e.describeFrame(f))
		}
		held := ""
		if e.held[k[0]][k[1]] {
			held = " (held)"
		}
		fmt.Fprintf(b, "%s->%s%s: %s\n", e.top.Name(k[0]), e.top.Name(k[1]), held, strings.Join(shown, ", "))
	}
	return nil
}
