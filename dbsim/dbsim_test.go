package dbsim

import (
	"flag"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
)

var (
	flagSeeds    = flag.Int("dbsim.seeds", 200, "seeds per protocol (make sim runs more)")
	flagSeed     = flag.Uint64("dbsim.seed", 1, "the first seed")
	flagProtocol = flag.String("dbsim.protocol", "", "one protocol only (default: all)")
)

// configOf draws a run's shape from its seed, so that the seeds cover one
// replica and five, two groups and four, a quiet network and a bad one.
func configOf(p multicast.Protocol, seed uint64) Config {
	c := Config{Protocol: p, Seed: seed}
	c.Groups = 2 + int(seed%3)
	c.Replicas = []int{3, 1, 3, 2, 5}[seed/3%5]
	c.Drop = []float64{0, 0.05, 0.2}[seed/15%3]
	c.Dup = []float64{0, 0.05, 0.1}[seed/45%3]
	c.Faults = []float64{0.005, 0.015, 0.04}[seed/5%3]
	c.CutGroup = seed%4 == 1
	if seed%3 == 2 {
		// Sessions that expire while their clients wait out faults.
		c.SessionTicks = []int{8, 30, 120}[seed/6%3]
	}
	return c
}

// TestSeeds runs the whole-database simulator over many seeds of every
// protocol; a failure prints the command that replays it.
func TestSeeds(t *testing.T) {
	protocols := protocol.Names()
	if *flagProtocol != "" {
		p, err := protocol.Lookup(multicast.Protocol(*flagProtocol))
		if err != nil {
			t.Fatal(err)
		}
		protocols = []multicast.Protocol{p.Name()}
	}
	seeds := *flagSeeds
	if testing.Short() {
		seeds = min(seeds, 20)
	}
	for _, p := range protocols {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			var total Result
			for seed := *flagSeed; seed < *flagSeed+uint64(seeds); seed++ {
				cfg := configOf(p, seed)
				res, err := Run(cfg)
				if err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				if !res.OK() {
					t.Fatalf("seed %d (%+v):\n  %s\nreplay: %s", seed, cfg, strings.Join(res.Violations, "\n  "), cfg.Replay())
				}
				total.Committed += res.Committed
				total.Aborted += res.Aborted
				total.Crashes += res.Crashes
				total.Installs += res.Installs
				total.Leaders += res.Leaders
				total.Duplicates += res.Duplicates
				total.Busy += res.Busy
				total.Expired += res.Expired
				total.Sessions += res.Sessions
				total.Entries += res.Entries
				total.Steps += res.Steps
			}
			t.Logf("%d seeds: %d committed, %d aborted, %d crashes, %d snapshot installs, %d leader changes, %d duplicates refused, %d busy, %d sessions, %d refused as expired, %d entries, %d steps",
				seeds, total.Committed, total.Aborted, total.Crashes, total.Installs, total.Leaders, total.Duplicates, total.Busy, total.Sessions, total.Expired, total.Entries, total.Steps)
			if total.Crashes == 0 || total.Leaders == 0 || total.Committed == 0 || total.Aborted == 0 || total.Sessions == 0 || total.Expired == 0 {
				t.Errorf("the seeds exercised too little: %+v", total)
			}
		})
	}
}
