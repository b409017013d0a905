package skeen

import (
	"bytes"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/internal/snaptest"
	"github.com/flexkv/flexkv/partition"
)

// snapFeature names a part of the state that a snapshot must carry; the
// mid-run test counts the snapshots that hold each, so that a workload too
// tame to exercise one fails the test instead of passing it vacuously.
type snapFeature int

const (
	featBuffered  snapFeature = iota // proposals arrived before their message
	featUndecided                    // a message waits for proposals
	featHeld                         // a decided message waits behind an undecided one
	featStale                        // the undecided queue still holds a decided message
	featCount
)

var featNames = [featCount]string{"buffered proposal", "undecided message", "decided message held back", "decided message in the undecided queue"}

func (c *Core) features() []snapFeature {
	var fs []snapFeature
	if c.bufferedCount > 0 {
		fs = append(fs, featBuffered)
	}
	if c.undecidedCount > 0 {
		fs = append(fs, featUndecided)
	}
	if c.decided.Len() > 0 {
		fs = append(fs, featHeld)
	}
	for _, e := range c.undecided {
		if e.isDecided() {
			fs = append(fs, featStale)
			break
		}
	}
	return fs
}

// snapRun runs a seeded random workload on the cluster harness: requests
// with random destinations at a random destination, and a random busy link
// served at each step; a small PendingMax in half the runs makes some
// requests wait. With restores on, after some steps a random group's core is
// snapshotted and replaced by a core restored from the snapshot; the choice
// draws from its own generator, so the workload is the same either way.
type snapRun struct {
	cl         *cluster
	pendingMax int
	rec        *snaptest.Restorer[*Core]
	seen       [featCount]int
	// keep, if set, is offered every snapshot taken, with the configuration
	// of its group and the features of the core it was taken of.
	keep func(cfg Config, snap []byte, fs []snapFeature)
}

func runSnapshotWorkload(t *testing.T, seed uint64, restores bool, keep func(Config, []byte, []snapFeature)) *snapRun {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 31))
	n := 2 + rng.IntN(5)
	r := &snapRun{keep: keep}
	if seed%2 == 0 {
		r.pendingMax = 1 + rng.IntN(4)
	}
	r.cl = newCluster(t, n, r.pendingMax)
	var snaps *rand.Rand
	if restores {
		snaps = rand.New(rand.NewPCG(seed, 33))
	}
	config := func(g partition.GroupID) Config {
		return Config{Self: g, Topology: r.cl.Top, PendingMax: r.pendingMax}
	}
	r.rec = snaptest.NewRestorer(r.cl.Cores, func(g partition.GroupID) snaptest.Codec[*Core] { return codec(config(g)) }, snaps)
	r.rec.Taken = func(g partition.GroupID, c *Core, snap []byte) {
		fs := c.features()
		for _, f := range fs {
			r.seen[f]++
		}
		if r.keep != nil {
			r.keep(config(g), snap, fs)
		}
	}
	type request struct {
		at partition.GroupID
		m  multicast.Message
	}
	var queue []request
	for i := range 30 + rng.IntN(60) {
		var dst partition.GroupSet
		for dst.Empty() {
			for g := range n {
				if rng.IntN(3) == 0 {
					dst = dst.Add(partition.GroupID(g))
				}
			}
		}
		members := dst.Slice()
		m := msg(1+rng.Uint64N(3), uint64(i), members...)
		m.Payload = m.Payload[:rng.IntN(len(m.Payload)+1)]
		queue = append(queue, request{at: members[rng.IntN(len(members))], m: m})
	}
	for steps := 0; ; steps++ {
		if steps > 100_000 {
			t.Fatalf("seed %d: no quiescence after %d steps", seed, steps)
		}
		links := r.cl.Busy()
		options := len(links)
		if len(queue) > 0 {
			options++
		}
		if options == 0 {
			break
		}
		var g partition.GroupID
		if pick := rng.IntN(options); pick < len(links) {
			g = links[pick][1]
			sends, dels := r.cl.Recv(links[pick][0], g)
			r.record(g, sends, dels)
		} else {
			q := queue[0]
			queue = queue[1:]
			g = q.at
			sends, dels, err := r.cl.Request(q.at, q.m)
			switch {
			case errors.Is(err, multicast.ErrBusy):
				r.rec.Refused()
				queue = append(queue, q)
			case err != nil:
				t.Fatalf("seed %d: request %s: %v", seed, q.m.ID, err)
			}
			r.record(g, sends, dels)
		}
		r.rec.Maybe(t)
	}
	if err := r.cl.Verify(true); err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	return r
}

func (r *snapRun) record(g partition.GroupID, sends []multicast.Send, dels []multicast.Message) {
	r.rec.Record(g, multicast.Output{Sends: sends, Deliveries: dels})
}

// codec restores skeen snapshots under cfg; a restored core keeps its Stats
// and the core's internal invariants.
func codec(cfg Config) snaptest.Codec[*Core] {
	return snaptest.Codec[*Core]{
		Prefix:  "skeen: restore",
		Restore: func(b []byte) (*Core, error) { return Restore(cfg, b) },
		Stats:   func(c *Core) any { return c.Stats() },
		Check:   func(c *Core) error { return c.checkInvariants() },
	}
}

// TestSnapshotRestoreMidRun replaces cores by restored copies at random
// points of random workloads: every output, every delivery order and the
// final state of every core must be those of the same run without restores.
func TestSnapshotRestoreMidRun(t *testing.T) {
	seeds := uint64(200)
	if testing.Short() {
		seeds = 60
	}
	var seen [featCount]int
	for seed := range seeds {
		plain := runSnapshotWorkload(t, seed, false, nil)
		restored := runSnapshotWorkload(t, seed, true, nil)
		if diff := cmp.Diff(plain.cl.Orders, restored.cl.Orders, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("seed %d: delivery orders differ (-uninterrupted +restored):\n%s", seed, diff)
		}
		snaptest.Same(t, seed, plain.rec, restored.rec)
		for f := range seen {
			seen[f] += restored.seen[f]
		}
	}
	for f, k := range seen {
		if k == 0 {
			t.Errorf("no snapshot held a %s: the workload does not test that part of the state", featNames[f])
		}
	}
	t.Logf("snapshots holding each feature: %v", seen)
}

func TestSnapshotFreshCores(t *testing.T) {
	top := testTopology(t, 3)
	for g := range partition.GroupID(3) {
		c, err := New(Config{Self: g, Topology: top})
		if err != nil {
			t.Fatal(err)
		}
		snaptest.Copy(t, codec(Config{Self: g, Topology: top}), c)
	}
}

// richSnapshot is a snapshot taken by the mid-run workload, with the
// configuration of its group.
type richSnapshot struct {
	cfg  Config
	snap []byte
}

// richSnapshots returns, for each feature, a snapshot that holds it.
func richSnapshots(t *testing.T) [featCount]richSnapshot {
	t.Helper()
	var out [featCount]richSnapshot
	found := 0
	for seed := uint64(0); found < int(featCount); seed++ {
		if seed == 300 {
			t.Fatalf("found snapshots for %d of %d features in 300 seeds", found, featCount)
		}
		runSnapshotWorkload(t, seed, true, func(cfg Config, snap []byte, fs []snapFeature) {
			for _, f := range fs {
				if out[f].snap == nil {
					out[f] = richSnapshot{cfg: cfg, snap: snap}
					found++
				}
			}
		})
	}
	return out
}

func TestRestoreRejectsTruncations(t *testing.T) {
	for f, rs := range richSnapshots(t) {
		snaptest.Truncations(t, codec(rs.cfg), featNames[f], rs.snap)
	}
}

// TestRestoreCorruptions flips, drops and inserts random bytes: Restore must
// return ErrCorrupt or a core that keeps the invariants and encodes back to
// a snapshot it accepts.
func TestRestoreCorruptions(t *testing.T) {
	var cases []snaptest.Case[*Core]
	for _, rs := range richSnapshots(t) {
		cases = append(cases, snaptest.Case[*Core]{Codec: codec(rs.cfg), Snap: rs.snap})
	}
	snaptest.Corruptions(t, 5, 500, cases...)
}

// TestRestoreRejectsBrokenInvariants breaks one invariant of a real state at
// a time, encodes it, and checks that Restore refuses it for that reason.
func TestRestoreRejectsBrokenInvariants(t *testing.T) {
	rich := richSnapshots(t)
	// some returns the entry of c that pick selects, by id order.
	some := func(c *Core, pick func(*entry) bool) *entry {
		for _, id := range slices.SortedFunc(maps.Keys(c.entries), compareIDs) {
			if e := c.entries[id]; pick(e) {
				return e
			}
		}
		t.Fatal("no entry to break")
		return nil
	}
	buffered := func(e *entry) bool { return !e.known }
	known := func(e *entry) bool { return e.known }
	tests := []struct {
		name   string
		from   snapFeature
		mutate func(c *Core)
		want   string
	}{
		{"flush id", featUndecided, func(c *Core) {
			e := some(c, known)
			delete(c.entries, e.msg.ID)
			e.msg.ID.Client = multicast.FlushClient
			c.entries[e.msg.ID] = e
		}, "reserved id"},
		{"entry at a non-destination", featUndecided, func(c *Core) {
			e := some(c, known)
			e.msg.Dst, e.got = e.msg.Dst.Remove(c.self), e.got.Remove(c.self)
		}, "not a destination"},
		{"proposal from a non-destination", featBuffered, func(c *Core) {
			e := some(c, buffered)
			e.msg.Dst = e.msg.Dst &^ e.got
			e.msg.Dst = e.msg.Dst.Add(c.self)
		}, "holds proposals"},
		{"largest proposal from no proposer", featBuffered, func(c *Core) {
			e := some(c, buffered)
			e.got = e.got.Remove(partition.GroupID(e.ts % c.n))
		}, "from none of"},
		{"buffered entry holds its own proposal", featBuffered, func(c *Core) {
			e := some(c, buffered)
			e.got = e.got.Add(c.self)
		}, "buffered with proposals"},
		{"own proposal of another group", featUndecided, func(c *Core) { some(c, known).own++ }, "own proposal"},
		{"two messages with one own proposal", featHeld, func(c *Core) {
			a := some(c, func(e *entry) bool { return e.isDecided() })
			b := some(c, func(e *entry) bool { return e.known && !e.isDecided() })
			a.own = b.own
			a.ts = max(a.ts, a.own)
		}, "share own proposal"},
		{"deliverable message held", featHeld, func(c *Core) {
			for _, id := range slices.SortedFunc(maps.Keys(c.entries), compareIDs) {
				if e := c.entries[id]; e.known && !e.isDecided() {
					delete(c.entries, id)
				}
			}
		}, "deliverable"},
		{"clock beyond reach", featUndecided, func(c *Core) { c.clock = proposalMax }, "clock"},
		{"pending peak below the messages held", featUndecided, func(c *Core) { c.pendingPeak = 0 }, "pending peak"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := rich[tc.from]
			c, err := Restore(rs.cfg, rs.snap)
			if err != nil {
				t.Fatal(err)
			}
			tc.mutate(c)
			b := c.AppendSnapshot(nil)
			if bytes.Equal(b, rs.snap) {
				t.Fatal("the change did not reach the snapshot")
			}
			_, err = Restore(rs.cfg, b)
			if !errors.Is(err, wire.ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Restore: got %v, want ErrCorrupt about %q", err, tc.want)
			}
		})
	}
}

// TestRestoreRejectsOtherConfigs: a snapshot restores only at its group in a
// cluster of its size, and only as a Skeen core.
func TestRestoreRejectsOtherConfigs(t *testing.T) {
	cl := newCluster(t, 3, 0)
	if _, _, err := cl.Request(0, msg(1, 1, 0, 1, 2)); err != nil {
		t.Fatal(err)
	}
	cl.Recv(0, 1)
	snap := cl.Cores[1].AppendSnapshot(nil)
	if _, err := Restore(Config{Self: 1, Topology: cl.Top}, snap); err != nil {
		t.Fatalf("Restore with the snapshot's config: %v", err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		b    []byte
	}{
		{"another group", Config{Self: 2, Topology: cl.Top}, snap},
		{"another cluster size", Config{Self: 1, Topology: testTopology(t, 4)}, snap},
		{"another protocol", Config{Self: 1, Topology: cl.Top}, append([]byte{'F'}, snap[1:]...)},
		{"another version", Config{Self: 1, Topology: cl.Top}, append([]byte{snapshotMagic, snapshotVersion + 1}, snap[2:]...)},
	} {
		if _, err := Restore(tc.cfg, tc.b); !errors.Is(err, wire.ErrCorrupt) {
			t.Errorf("%s: got %v, want ErrCorrupt", tc.name, err)
		}
	}
	if _, err := Restore(Config{Self: 5, Topology: cl.Top}, snap); err == nil || errors.Is(err, wire.ErrCorrupt) {
		t.Errorf("Restore with an invalid config: got %v, want New's error", err)
	}
}

func TestSnapshotWithUndrainedOutputPanics(t *testing.T) {
	c, err := New(Config{Self: 0, Topology: testTopology(t, 2)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Step(multicast.Request(msg(1, 1, 0, 1))); err != nil {
		t.Fatal(err)
	}
	snaptest.UndrainedPanics(t, c, "sends")
}

// FuzzRestore checks that Restore never panics, refuses with ErrCorrupt, and
// that what it accepts keeps the core's invariants and encodes stably. The
// seeds are snapshots of group 1 of 4 along a random run.
func FuzzRestore(f *testing.F) {
	cl := newCluster(f, 4, 0)
	rng := rand.New(rand.NewPCG(3, 3))
	for i := range 40 {
		var dst partition.GroupSet
		for range 1 + rng.IntN(3) {
			dst = dst.Add(partition.GroupID(rng.IntN(4)))
		}
		members := dst.Slice()
		if _, _, err := cl.Request(members[rng.IntN(len(members))], msg(1, uint64(i), members...)); err != nil {
			f.Fatal(err)
		}
		for k := rng.IntN(5); k > 0; k-- {
			if links := cl.Busy(); len(links) > 0 {
				l := links[rng.IntN(len(links))]
				cl.Recv(l[0], l[1])
			}
		}
		if i%4 == 0 {
			f.Add(cl.Cores[1].AppendSnapshot(nil))
		}
	}
	cfg := Config{Self: 1, Topology: cl.Top}
	f.Fuzz(func(t *testing.T, b []byte) {
		snaptest.Property(t, codec(cfg), b)
	})
}
