package interaction

import (
	"strings"

	"github.com/cockroachdb/datadriven"
)

// handleStabilize steps until only frames of held links are left, and
// shows what the groups did (trace) or just ok:
//
//	stabilize [trace]
func handleStabilize(e *Env, d *datadriven.TestData, b *strings.Builder) error {
	trace := d.HasArg("trace")
	if trace {
		defer e.traceTo(b)()
	}
	if err := e.Stabilize(); err != nil {
		return err
	}
	if !trace {
		b.WriteString("ok\n")
	}
	return nil
}
