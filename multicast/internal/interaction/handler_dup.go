package interaction

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/datadriven"
)

// handleDup sends the first frame of a link again, after those in flight:
//
//	dup from=G to=H
func handleDup(e *Env, d *datadriven.TestData, b *strings.Builder) error {
	from, to, err := e.linkArgs(d)
	if err != nil {
		return err
	}
	f, err := e.Duplicate(from, to)
	if err != nil {
		return err
	}
	fmt.Fprintf(b, "duplicated %s->%s %s\n", e.top.Name(from), e.top.Name(to), e.describeFrame(f))
	return nil
}
