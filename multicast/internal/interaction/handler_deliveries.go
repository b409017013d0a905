package interaction

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/datadriven"

	"github.com/flexkv/flexkv/partition"
)

// handleDeliveries shows every group's delivery order, one line per group
// by rank:
//
//	deliveries
func handleDeliveries(e *Env, _ *datadriven.TestData, b *strings.Builder) error {
	for g, order := range e.orders {
		fmt.Fprintf(b, "%s:", e.top.Name(partition.GroupID(g)))
		for _, n := range order {
			fmt.Fprintf(b, " %s", n)
		}
		b.WriteByte('\n')
	}
	return nil
}
