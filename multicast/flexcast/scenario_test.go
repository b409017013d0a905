package flexcast_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/flexcast"
	"github.com/flexkv/flexkv/multicast/internal/interaction"
	"github.com/flexkv/flexkv/partition"
)

// TestScenarios runs the scripts of testdata/ on the interaction
// environment: the executions of DESIGN 3.2 with a forced schedule over
// FIFO links, some of them slow, each also with the strategy that makes it
// correct switched off, where the checker must find the cycle. Besides the
// environment's commands, new takes
//
//	off=history|acks|notifs|notifwait,...   switch strategies off
//	gc=N                                    a garbage-collection round every N ticks (default never)
func TestScenarios(t *testing.T) {
	interaction.Run(t, "testdata", scenarioProtocol())
}

func scenarioProtocol() interaction.Protocol {
	return interaction.Protocol{
		Name: "flexcast",
		New: func(self partition.GroupID, top *partition.Topology, args interaction.Args) (multicast.Core, error) {
			cfg, err := scenarioConfig(self, top, args)
			if err != nil {
				return nil, err
			}
			return flexcast.New(cfg)
		},
		Restore: func(self partition.GroupID, top *partition.Topology, args interaction.Args, snap []byte) (multicast.Core, error) {
			cfg, err := scenarioConfig(self, top, args)
			if err != nil {
				return nil, err
			}
			return flexcast.Restore(cfg, snap)
		},
		Entry: func(_ *partition.Topology, dst partition.GroupSet) partition.GroupID { return flexcast.Entry(dst) },
		Stats: func(c multicast.Core) string { return fmt.Sprintf("%+v", c.(*flexcast.Core).Stats()) },
	}
}

// scenarioConfig is the core's configuration under the new command's
// options. Garbage collection runs only where a script asks for it.
func scenarioConfig(self partition.GroupID, top *partition.Topology, args interaction.Args) (flexcast.Config, error) {
	cfg := flexcast.Config{Self: self, Topology: top, GCTicks: -1}
	for _, a := range args {
		switch a.Key {
		case "off":
			for _, v := range a.Vals {
				switch v {
				case "history":
					cfg.Strategies.NoHistoryWait = true
				case "acks":
					cfg.Strategies.NoAcks = true
				case "notifs":
					cfg.Strategies.NoNotifs = true
				case "notifwait":
					cfg.Strategies.NoNotifWait = true
				default:
					return cfg, fmt.Errorf("unknown strategy %q", v)
				}
			}
		case "gc":
			n, err := strconv.Atoi(a.Vals[0])
			if err != nil {
				return cfg, fmt.Errorf("gc: %w", err)
			}
			cfg.GCTicks = n
		default:
			return cfg, fmt.Errorf("unknown argument %q", a.Key)
		}
	}
	return cfg, nil
}
