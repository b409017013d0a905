package protocol

import (
	"fmt"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// Build validates a cluster configuration and returns its protocol, its
// topology and its partition map. It checks what package partition cannot
// know, since it lies below the protocols (DESIGN 1): that the protocol is
// one of the registry's, first, as partition's checks go in the order of
// the fields; then (*partition.ClusterConfig).Build's checks; then that a
// protocol that routes along the tree has one.
func Build(c *partition.ClusterConfig) (*Protocol, *partition.Topology, *partition.PartitionMap, error) {
	// The errors name the configuration's fields as partition's do, with
	// its prefix: they are about the file, whichever package checks it.
	p, err := Lookup(multicast.Protocol(c.Protocol))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("partition: protocol: %q is not one of %s", c.Protocol, namesText(", "))
	}
	top, pm, err := c.Build()
	if err != nil {
		return nil, nil, nil, err
	}
	if p.needsTree && len(c.Tree) == 0 {
		return nil, nil, nil, fmt.Errorf("partition: tree: missing, and protocol %s needs one (child: parent)", p.name)
	}
	return p, top, pm, nil
}

// Validate checks a cluster configuration as Build does. A configuration
// that Validate accepts builds.
func Validate(c *partition.ClusterConfig) error {
	_, _, _, err := Build(c)
	return err
}
