package interaction

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/datadriven"

	"github.com/flexkv/flexkv/multicast"
)

// handleSends shows how many sends of each kind the cores made:
//
//	sends kinds=msg,ack,...
func handleSends(e *Env, d *datadriven.TestData, b *strings.Builder) error {
	a, ok := d.Arg("kinds")
	if !ok {
		return fmt.Errorf("sends: kinds= required")
	}
	var parts []string
	for _, name := range splitVals(a) {
		k, err := multicast.ParseKind(name)
		if err != nil {
			return err
		}
		parts = append(parts, fmt.Sprintf("%s=%d", name, e.kinds[k]))
	}
	fmt.Fprintf(b, "%s\n", strings.Join(parts, " "))
	return nil
}
