package tree_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/internal/interaction"
	"github.com/flexkv/flexkv/multicast/tree"
	"github.com/flexkv/flexkv/partition"
)

// TestScenarios runs the scripts of testdata/ on the interaction
// environment (DESIGN 3.4): which groups a message travels through, where
// the order of two messages is fixed, and what the groups that only forward
// carry. new names the tree by child:parent pairs; it also takes
//
//	pending-max=K   the core's PendingMax
//
// and stats shows a core's counters with the received messages and the
// overhead they derive.
func TestScenarios(t *testing.T) {
	interaction.Run(t, "testdata", scenarioProtocol())
}

func scenarioProtocol() interaction.Protocol {
	config := func(self partition.GroupID, top *partition.Topology, args interaction.Args) (tree.Config, error) {
		cfg := tree.Config{Self: self, Topology: top}
		for _, a := range args {
			if a.Key != "pending-max" || len(a.Vals) != 1 {
				return cfg, fmt.Errorf("unknown argument %q", a.Key)
			}
			n, err := strconv.Atoi(a.Vals[0])
			if err != nil {
				return cfg, fmt.Errorf("pending-max: %w", err)
			}
			cfg.PendingMax = n
		}
		return cfg, nil
	}
	return interaction.Protocol{
		Name: "tree",
		New: func(self partition.GroupID, top *partition.Topology, args interaction.Args) (multicast.Core, error) {
			cfg, err := config(self, top, args)
			if err != nil {
				return nil, err
			}
			return tree.New(cfg)
		},
		Restore: func(self partition.GroupID, top *partition.Topology, args interaction.Args, snap []byte) (multicast.Core, error) {
			cfg, err := config(self, top, args)
			if err != nil {
				return nil, err
			}
			return tree.Restore(cfg, snap)
		},
		Entry: tree.Entry,
		Stats: func(c multicast.Core) string {
			s := c.(*tree.Core).Stats()
			return fmt.Sprintf("requests=%d envelopes=%d forwarded=%d delivered=%d received=%d overhead=%.2f",
				s.Requests, s.Envelopes, s.Forwarded, s.Delivered, s.Received(), s.Overhead())
		},
	}
}
