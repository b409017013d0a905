package interaction

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/datadriven"

	"github.com/flexkv/flexkv/multicast/check"
)

// handleCheck runs multicast/check over the whole run:
//
//	check [complete] [genuine]
func handleCheck(e *Env, d *datadriven.TestData, b *strings.Builder) error {
	rep := e.Check(check.Options{Complete: d.HasArg("complete"), Genuine: d.HasArg("genuine")})
	writeReport(b, rep)
	return nil
}

// writeReport shows a check: ok, or the violated properties on one line and
// then each violation the report describes.
func writeReport(b *strings.Builder, rep check.Report) {
	if rep.OK() {
		b.WriteString("ok\n")
		return
	}
	var props []string
	for _, p := range check.Properties {
		if rep.ViolationCounts[p] > 0 {
			props = append(props, p)
		}
	}
	fmt.Fprintf(b, "violated %s\n", strings.Join(props, ", "))
	for _, v := range rep.Violations {
		fmt.Fprintf(b, "  %s\n", v)
	}
}
