package dbsim

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
)

var (
	flagSeeds    = flag.Int("dbsim.seeds", 200, "seeds per protocol (make sim runs more)")
	flagSeed     = flag.Uint64("dbsim.seed", 1, "the first seed")
	flagProtocol = flag.String("dbsim.protocol", "", "one protocol only (default: all)")
	flagLongCut  = flag.Int("dbsim.longcut", 10_000, "steps of the long cut of TestLongCutBounded")
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
	c.OpenLists = seed%2 == 1
	if seed%4 == 3 {
		// Backup markers under load and faults.
		c.Backups = 0.004
	}
	if seed%3 == 2 {
		// Sessions that expire while their clients wait out faults.
		c.SessionTicks = []int{8, 30, 120}[seed/6%3]
	} else if seed%2 == 0 {
		// Anonymous traffic through a results table of 2: the sessions'
		// results must survive it.
		c.ResultsMax, c.Anonymous = 2, 0.05
	} else if seed%6 == 1 {
		// Room for 2 session records per replica: the others' results
		// go to the count-bounded table.
		c.ResultSessionsMax = 2
	}
	if seed%4 == 3 {
		// Changes of the epoch under the load and the faults, a third
		// of them of the members: replicas replaced.
		c.Changes = []float64{0.002, 0.01}[seed/4%2]
		c.Members = 1.0 / 3
		if seed%8 == 7 {
			// Half of the others move a partition (moves.go), in place
			// of the backup markers: checkBackups replays each group's
			// own deliveries, and a moved partition's rows came in
			// chunks.
			c.Backups, c.Moves = 0, 1.0/2
		}
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
				total.add(res)
			}
			t.Logf("%d seeds: %d committed, %d aborted, %d crashes, %d snapshot installs, %d leader changes, %d duplicates refused, %d busy, %d sessions, %d refused as expired, %d anonymous, %d backup markers (%d checkpoints checked), %d results acknowledged and %d kept (per replica), %d changes of the epoch (%d of the overlay, %d of the members; %d requests refused, %d transactions aborted for it), %d learners added, %d promoted, %d members removed (%d leaders), %d partitions moved (%d chunks), %d entries, %d steps",
				seeds, total.Committed, total.Aborted, total.Crashes, total.Installs, total.Leaders, total.Duplicates, total.Busy, total.Sessions, total.Expired, total.Anonymous, total.Backups, total.Checkpoints, total.Acked, total.Unacked,
				total.Changes, total.OverlayChanges, total.MemberChanges, total.EpochRefusals, total.EpochAborts,
				total.Learners, total.Promotions, total.Replaced, total.LeadersReplaced, total.MovesDone, total.Chunks, total.Entries, total.Steps)
			if total.Crashes == 0 || total.Leaders == 0 || total.Committed == 0 || total.Aborted == 0 || total.Sessions == 0 || total.Expired == 0 ||
				total.Anonymous == 0 || total.Acked == 0 || total.Unacked == 0 || (seeds >= 4 && (total.Checkpoints == 0 || total.Changes == 0 || total.OverlayChanges == 0 ||
				total.MemberChanges == 0 || total.Promotions == 0 || total.Replaced == 0)) || (seeds >= 50 && total.MovesDone == 0) {
				t.Errorf("the seeds exercised too little: %+v", total)
			}
		})
	}
}

// TestLongCutBounded: one group cut off for a long simulated time while
// requests keep coming (DESIGN 12, back-pressure): the other groups' memory
// stays within the bounds (BacklogBytesMax, here 4 KiB, for the backlog and
// the outboxes; a share of that per entry group for what the cores hold),
// the entry groups refuse naming the cut group, and after the heal
// everything drains and every check passes. The same cut with a bound too
// large to reach shows the growth the bound prevents.
func TestLongCutBounded(t *testing.T) {
	const backlog = 4 << 10
	// What one admitted request may add past the busy limit: its
	// envelopes and votes.
	const slack = 1 << 10
	run := func(t *testing.T, p multicast.Protocol, groups, backlog, stepsMax int) *Result {
		cfg := Config{Protocol: p, Seed: 7, Groups: groups, Replicas: 3, Faults: 0.01, Drop: 0.05,
			LongCut: *flagLongCut, LongCutGroup: 1, BacklogBytesMax: backlog, StepsMax: stepsMax}
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c := res.Cut
		t.Logf("%s, %d groups, backlog bound %d B, cut %d steps: offered %d, accepted %d, refused %d; peak %+v; mid %+v; end %+v; %d steps",
			p, groups, backlog, cfg.LongCut, c.Offered, c.Accepted, c.Refused, c.Peak, c.Mid, c.End, res.Steps)
		if stepsMax == 0 && !res.OK() {
			t.Fatalf("%d groups:\n  %s", groups, strings.Join(res.Violations, "\n  "))
		}
		return res
	}
	for _, p := range protocol.Names() {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			for _, groups := range []int{3, 4} {
				c := run(t, p, groups, backlog, 0).Cut
				if c.Refused == 0 {
					t.Errorf("%d groups: no request refused during the cut", groups)
				}
				for _, e := range c.RefusedElse {
					t.Errorf("%d groups: a refusal does not name group 1: %s", groups, e)
				}
				if c.Peak.Backlog > backlog+slack || c.Peak.OutboxBytes > backlog+slack {
					t.Errorf("%d groups: backlog peak %d B, outbox peak %d B, want at most %d + %d", groups, c.Peak.Backlog, c.Peak.OutboxBytes, backlog, slack)
				}
				if want := (groups - 1) * (backlog + slack); c.Peak.PendingBytes > want {
					t.Errorf("%d groups: pending peak %d B, want at most %d", groups, c.Peak.PendingBytes, want)
				}
			}
		})
	}
	t.Run("unbounded", func(t *testing.T) {
		t.Parallel()
		// Thousands of requests admitted: the run stops soon after the
		// heal rather than drain them all.
		c := run(t, protocol.FlexCast, 3, 1<<30, *flagLongCut+5000).Cut
		if c.Peak.Backlog < 10*backlog || c.End.PendingBytes <= c.Mid.PendingBytes {
			t.Errorf("without a reachable bound, backlog peak %d B, pending %d B at mid-cut, %d B at its end: the run does not show the growth",
				c.Peak.Backlog, c.Mid.PendingBytes, c.End.PendingBytes)
		}
	})
}

// TestMemberReplacements: changes of the epoch that are all member changes
// where they can be, often, under faults: replicas replaced one after
// another in every protocol, leaders among them, with every check. It runs
// a sixteenth of -dbsim.seeds from -dbsim.seed (at least one).
func TestMemberReplacements(t *testing.T) {
	runShare(t, "TestMemberReplacements", 16, func(p multicast.Protocol, seed uint64) Config {
		return Config{Protocol: p, Seed: seed, Groups: 2 + int(seed%3), Replicas: []int{1, 2, 3}[seed%3],
			Faults: 0.02, Drop: 0.05, Dup: 0.05, Changes: 0.02, Members: 1}
	}, func(t *testing.T, seeds uint64, total *Result) {
		t.Logf("%d seeds: %d member changes, %d learners added, %d promoted, %d members removed (%d leaders), %d crashes",
			seeds, total.MemberChanges, total.Learners, total.Promotions, total.Replaced, total.LeadersReplaced, total.Crashes)
		if seeds >= 4 && (total.Replaced == 0 || total.LeadersReplaced == 0 || total.Promotions < total.Replaced) {
			t.Errorf("the seeds replaced too little: %+v", total)
		}
	})
}

// runShare runs, for every protocol in parallel, 1/share of -dbsim.seeds
// from -dbsim.seed (at least one; three with -short) with the
// configuration cfgOf draws, fails on the first seed whose run fails or
// breaks a check (printing test's own replay), and hands report the counts
// of them all.
func runShare(t *testing.T, test string, share uint64, cfgOf func(multicast.Protocol, uint64) Config, report func(*testing.T, uint64, *Result)) {
	seeds := max(uint64(*flagSeeds)/share, 1)
	if testing.Short() {
		seeds = min(seeds, 3)
	}
	for _, p := range protocol.Names() {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			var total Result
			for seed := *flagSeed; seed < *flagSeed+seeds; seed++ {
				cfg := cfgOf(p, seed)
				// Not TestSeeds's replay (Config.Replay): this test's.
				replay := fmt.Sprintf("go test ./dbsim -run '%s$/^%s$' -dbsim.seed=%d -dbsim.seeds=%d", test, p, seed, share)
				res, err := Run(cfg)
				if err != nil {
					t.Fatalf("seed %d: %v\nreplay: %s", seed, err, replay)
				}
				if !res.OK() {
					t.Fatalf("seed %d (%+v):\n  %s\nreplay: %s", seed, cfg, strings.Join(res.Violations, "\n  "), replay)
				}
				total.add(res)
			}
			report(t, seeds, &total)
		})
	}
}

// add adds the counts of o to r's (over the seeds of a test).
func (r *Result) add(o *Result) {
	r.Steps += o.Steps
	r.Entries += o.Entries
	r.Committed += o.Committed
	r.Aborted += o.Aborted
	r.Busy += o.Busy
	r.Duplicates += o.Duplicates
	r.Expired += o.Expired
	r.Sessions += o.Sessions
	r.Crashes += o.Crashes
	r.Installs += o.Installs
	r.Leaders += o.Leaders
	r.Anonymous += o.Anonymous
	r.Backups += o.Backups
	r.Checkpoints += o.Checkpoints
	r.Changes += o.Changes
	r.EpochRefusals += o.EpochRefusals
	r.EpochAborts += o.EpochAborts
	r.OverlayChanges += o.OverlayChanges
	r.MemberChanges += o.MemberChanges
	r.Learners += o.Learners
	r.Promotions += o.Promotions
	r.Replaced += o.Replaced
	r.LeadersReplaced += o.LeadersReplaced
	r.Acked += o.Acked
	r.Unacked += o.Unacked
	r.Moves += o.Moves
	r.MovesDone += o.MovesDone
	r.Chunks += o.Chunks
	r.ChunksAgain += o.ChunksAgain
	r.MoveWaits += o.MoveWaits
	r.MoveRefusals += o.MoveRefusals
}

// TestPartitionMoves: changes of the epoch that move partitions where they
// can, often, under faults, drops, duplicates and cut groups: partitions
// moved and moved back under the bank and list workloads in every
// protocol, with every check, and those of the moves (moves.go). It runs
// an eighth of -dbsim.seeds from -dbsim.seed (at least one).
func TestPartitionMoves(t *testing.T) {
	runShare(t, "TestPartitionMoves", 8, func(p multicast.Protocol, seed uint64) Config {
		return Config{Protocol: p, Seed: seed, Groups: 2 + int(seed%3), Replicas: []int{3, 1, 2}[seed%3],
			Faults: []float64{0.01, 0.03}[seed%2], Drop: 0.05, Dup: 0.05, CutGroup: seed%3 == 1, Txns: 12,
			Changes: 0.005, Moves: 1}
	}, func(t *testing.T, seeds uint64, total *Result) {
		t.Logf("%d seeds: %d moves started, %d completed, %d chunks (%d sent twice), %d chunk reads put off, %d requests refused for a moving partition, %d committed, %d crashes, %d leader changes",
			seeds, total.Moves, total.MovesDone, total.Chunks, total.ChunksAgain, total.MoveWaits, total.MoveRefusals, total.Committed, total.Crashes, total.Leaders)
		if seeds >= 4 && (total.MovesDone == 0 || total.MovesDone != total.Moves || total.Chunks == 0 || total.ChunksAgain == 0 || total.MoveRefusals == 0) {
			t.Errorf("the seeds moved too little: %+v", total)
		}
	})
}
