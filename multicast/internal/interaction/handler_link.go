package interaction

import (
	"strings"

	"github.com/cockroachdb/datadriven"
)

// handleLink sets the links between two sets of groups, every pair but a
// group to itself:
//
//	link from=G,... to=H,... delay=D  frames take D (default 1)
//	hold from=G,... to=H,...          step and stabilize leave their frames
//	release from=G,... to=H,...       undo hold
func handleLink(e *Env, d *datadriven.TestData, _ *strings.Builder) error {
	from, err := e.groupsArg(d, "from")
	if err != nil {
		return err
	}
	to, err := e.groupsArg(d, "to")
	if err != nil {
		return err
	}
	delay, err := intArg(d, "delay", 1)
	if err != nil {
		return err
	}
	for _, f := range from.Slice() {
		for _, t := range to.Remove(f).Slice() {
			switch d.Cmd {
			case "link":
				e.SetDelay(f, t, int64(delay))
			default:
				e.SetHeld(f, t, d.Cmd == "hold")
			}
		}
	}
	return nil
}
