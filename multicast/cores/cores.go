// Package cores names the protocol cores: it builds the core of a group for
// a protocol, and finds a message's entry group under it. It is the one place
// outside the simulator that lists the protocols, so that the replication
// shell and the command line choose a protocol by name.
package cores

import (
	"fmt"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/flexcast"
	"github.com/flexkv/flexkv/multicast/skeen"
	"github.com/flexkv/flexkv/multicast/tree"
	"github.com/flexkv/flexkv/partition"
)

// New returns the core of group self under protocol p, with the protocol's
// default bounds.
func New(p multicast.Protocol, self partition.GroupID, top *partition.Topology) (multicast.Core, error) {
	switch p {
	case multicast.FlexCast:
		return flexcast.New(flexcast.Config{Self: self, Topology: top})
	case multicast.Skeen:
		return skeen.New(skeen.Config{Self: self, Topology: top})
	case multicast.Tree:
		return tree.New(tree.Config{Self: self, Topology: top})
	default:
		return nil, fmt.Errorf("cores: unknown protocol %q (want flexcast, skeen or tree)", p)
	}
}

// Entry returns the group a client in group client sends a message for dst
// to under protocol p: FlexCast's lca, Skeen's destination nearest to the
// client (by lat; the lowest-ranked one when lat is nil), the tree-lca.
func Entry(p multicast.Protocol, lat *partition.Latency, top *partition.Topology, client partition.GroupID, dst partition.GroupSet) partition.GroupID {
	switch p {
	case multicast.Skeen:
		return skeen.Entry(lat, top, client, dst)
	case multicast.Tree:
		return tree.Entry(top, dst)
	default:
		return flexcast.Entry(dst)
	}
}

// Restore rebuilds the core of group self under protocol p from its
// AppendSnapshot encoding.
func Restore(p multicast.Protocol, self partition.GroupID, top *partition.Topology, b []byte) (multicast.Core, error) {
	switch p {
	case multicast.FlexCast:
		return flexcast.Restore(flexcast.Config{Self: self, Topology: top}, b)
	case multicast.Skeen:
		return skeen.Restore(skeen.Config{Self: self, Topology: top}, b)
	case multicast.Tree:
		return tree.Restore(tree.Config{Self: self, Topology: top}, b)
	default:
		return nil, fmt.Errorf("cores: unknown protocol %q (want flexcast, skeen or tree)", p)
	}
}
