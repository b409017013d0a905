package interaction

import (
	"strings"

	"github.com/cockroachdb/datadriven"
)

// handleTick ticks the nodes of some groups (default: all) count times, in
// rank order each time:
//
//	tick [count=K] [group=G,...]
func handleTick(e *Env, d *datadriven.TestData, b *strings.Builder) error {
	count, err := intArg(d, "count", 1)
	if err != nil {
		return err
	}
	gs := e.top.All()
	if d.HasArg("group") {
		if gs, err = e.groupsArg(d, "group"); err != nil {
			return err
		}
	}
	defer e.traceTo(b)()
	for range count {
		if err := e.Tick(gs); err != nil {
			return err
		}
	}
	return nil
}
