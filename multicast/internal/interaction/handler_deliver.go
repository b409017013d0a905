package interaction

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/datadriven"

	"github.com/flexkv/flexkv/multicast/channel"
)

// handleDeliver applies (deliver) or loses (drop) count frames of one link,
// each the one that comes after skip others, held or not:
//
//	deliver from=G to=H [count=K] [skip=S]
//	drop from=G to=H [count=K] [skip=S]
func handleDeliver(e *Env, d *datadriven.TestData, b *strings.Builder) error {
	from, to, err := e.linkArgs(d)
	if err != nil {
		return err
	}
	count, err := intArg(d, "count", 1)
	if err != nil {
		return err
	}
	skip, err := intArg(d, "skip", 0)
	if err != nil {
		return err
	}
	defer e.traceTo(b)()
	for range count {
		if d.Cmd == "deliver" {
			err = e.Deliver(from, to, skip)
		} else {
			var f channel.Frame
			if f, err = e.Drop(from, to, skip); err == nil {
				fmt.Fprintf(b, "dropped %s->%s %s\n", e.top.Name(from), e.top.Name(to), e.describeFrame(f))
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
