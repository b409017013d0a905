package skeen_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/internal/interaction"
	"github.com/flexkv/flexkv/multicast/skeen"
	"github.com/flexkv/flexkv/partition"
)

// TestScenarios runs the scripts of testdata/ on the interaction
// environment: groups are named A, B, C... by rank, a script moves the
// envelopes link by link, and proposals print as clock.group: 3.B is
// 3*n + rank(B). Every core's invariants are checked after each of its
// steps. Besides the environment's commands, new takes
//
//	pending-max=K   the core's PendingMax
func TestScenarios(t *testing.T) {
	interaction.Run(t, "testdata", scenarioProtocol())
}

func scenarioProtocol() interaction.Protocol {
	config := func(self partition.GroupID, top *partition.Topology, args interaction.Args) (skeen.Config, error) {
		cfg := skeen.Config{Self: self, Topology: top}
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
		Name: "skeen",
		New: func(self partition.GroupID, top *partition.Topology, args interaction.Args) (multicast.Core, error) {
			cfg, err := config(self, top, args)
			if err != nil {
				return nil, err
			}
			return skeen.New(cfg)
		},
		Restore: func(self partition.GroupID, top *partition.Topology, args interaction.Args, snap []byte) (multicast.Core, error) {
			cfg, err := config(self, top, args)
			if err != nil {
				return nil, err
			}
			return skeen.Restore(cfg, snap)
		},
		Entry: func(top *partition.Topology, dst partition.GroupSet) partition.GroupID {
			return skeen.Entry(nil, top, dst.Min(), dst)
		},
		Describe: skeen.DescribeSend,
		Stats: func(c multicast.Core) string {
			s := c.(*skeen.Core).Stats()
			return fmt.Sprintf("pending=%d undecided=%d decided=%d buffered=%d peak=%d delivered=%d clock=%d",
				s.Pending, s.Undecided, s.Decided, s.Buffered, s.PendingPeak, s.Delivered, s.Clock)
		},
		Invariants: func(c multicast.Core) error { return skeen.CheckInvariants(c.(*skeen.Core)) },
	}
}
