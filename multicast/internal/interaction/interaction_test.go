package interaction_test

import (
	"fmt"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/internal/interaction"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

// TestScenarios runs the scripts of testdata/: the channel layer under a
// core, and the same executions under each protocol, built as the shell
// builds them (the registry, multicast/protocol; default bounds).
func TestScenarios(t *testing.T) {
	interaction.Run(t, "testdata", registryProtocols()...)
}

// registryProtocols describes every protocol of the registry to the
// environment; new takes no protocol options.
func registryProtocols() []interaction.Protocol {
	var out []interaction.Protocol
	for _, p := range protocol.All() {
		noArgs := func(args interaction.Args) error {
			if len(args) > 0 {
				return fmt.Errorf("%s takes no option %q", p, args[0].Key)
			}
			return nil
		}
		out = append(out, interaction.Protocol{
			Name: p.String(),
			New: func(self partition.GroupID, top *partition.Topology, args interaction.Args) (multicast.Core, error) {
				if err := noArgs(args); err != nil {
					return nil, err
				}
				return p.New(self, top)
			},
			Restore: func(self partition.GroupID, top *partition.Topology, args interaction.Args, snap []byte) (multicast.Core, error) {
				if err := noArgs(args); err != nil {
					return nil, err
				}
				return p.Restore(self, top, snap)
			},
			Entry: func(top *partition.Topology, dst partition.GroupSet) partition.GroupID {
				return p.Entry(top, nil, protocol.HomeOrigin(dst.Min()), dst)
			},
		})
	}
	return out
}
