package interaction

import (
	"strings"

	"github.com/cockroachdb/datadriven"
)

// handleStep applies the next count events in time order, frames of held
// links left aside:
//
//	step [count=K]
func handleStep(e *Env, d *datadriven.TestData, b *strings.Builder) error {
	count, err := intArg(d, "count", 1)
	if err != nil {
		return err
	}
	defer e.traceTo(b)()
	for range count {
		ok, err := e.Step()
		if err != nil {
			return err
		}
		if !ok {
			b.WriteString("nothing to step\n")
			break
		}
	}
	return nil
}
