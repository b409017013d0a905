package sim

import (
	"fmt"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/flexcast"
	"github.com/flexkv/flexkv/multicast/skeen"
	"github.com/flexkv/flexkv/multicast/tree"
	"github.com/flexkv/flexkv/partition"
)

// newCoreFunc builds the core of group self. Configuration fields other than
// the group and the topology keep their zero values: the protocol defaults.
type newCoreFunc func(self partition.GroupID, top *partition.Topology) (multicast.Core, error)

// entryFunc returns the group a client homed at home submits a message to
// dst to; lat holds the simulated round trips.
type entryFunc func(lat *partition.Latency, top *partition.Topology, home partition.GroupID, dst partition.GroupSet) partition.GroupID

// lookup returns how to build and address the cores of protocol p. The
// simulator runs any multicast.Core; this table is the only place that
// names the protocols.
func lookup(p multicast.Protocol) (newCoreFunc, entryFunc, error) {
	switch p {
	case multicast.Tree:
		newCore := func(self partition.GroupID, top *partition.Topology) (multicast.Core, error) {
			return tree.New(tree.Config{Self: self, Topology: top})
		}
		entry := func(_ *partition.Latency, top *partition.Topology, _ partition.GroupID, dst partition.GroupSet) partition.GroupID {
			return tree.Entry(top, dst)
		}
		return newCore, entry, nil
	case multicast.FlexCast:
		newCore := func(self partition.GroupID, top *partition.Topology) (multicast.Core, error) {
			return flexcast.New(flexcast.Config{Self: self, Topology: top})
		}
		entry := func(_ *partition.Latency, _ *partition.Topology, _ partition.GroupID, dst partition.GroupSet) partition.GroupID {
			return flexcast.Entry(dst)
		}
		return newCore, entry, nil
	case multicast.Skeen:
		newCore := func(self partition.GroupID, top *partition.Topology) (multicast.Core, error) {
			return skeen.New(skeen.Config{Self: self, Topology: top})
		}
		// The destination nearest to the client (DESIGN 2, 3.3): the home
		// group itself when it is a destination.
		return newCore, skeen.Entry, nil
	default:
		return nil, nil, fmt.Errorf("sim: unknown protocol %q (want flexcast, skeen or tree)", p)
	}
}
