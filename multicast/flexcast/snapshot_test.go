package flexcast

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

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
	featQueued        snapFeature = iota // a message waits in an ancestor's queue
	featEarlyAck                         // an ack arrived before its message
	featNotifRequired                    // a message waits for notification acks
	featOpen                             // an open dependency
	featNotifQueued                      // a notification waits for open dependencies
	featTruncated                        // the history was truncated at a stable cut
	featCutAbove                         // a cut of an order this group does not hold is known
	featCutSent                          // a cut was sent to another group
	featCount
)

var featNames = [featCount]string{"queued message", "early ack", "notification required", "open dependency",
	"queued notification", "truncated history", "cut of a group above", "cut sent"}

// features lists the parts of c's state in use.
func (c *Core) features() []snapFeature {
	var fs []snapFeature
	for _, q := range c.queue {
		if len(q) > 0 {
			fs = append(fs, featQueued)
			break
		}
	}
	early, req := false, false
	for _, p := range c.pending {
		early = early || !p.arrived
		req = req || len(p.notifReq) > 0
	}
	if early {
		fs = append(fs, featEarlyAck)
	}
	if req {
		fs = append(fs, featNotifRequired)
	}
	if c.dag.openLen() > 0 {
		fs = append(fs, featOpen)
	}
	if len(c.notifQ) > 0 {
		fs = append(fs, featNotifQueued)
	}
	if c.stats.Truncations > 0 {
		fs = append(fs, featTruncated)
	}
	for o := int(c.self) + 1; o < c.n; o++ {
		if c.stable[o] > 0 {
			fs = append(fs, featCutAbove)
			break
		}
	}
	for _, cut := range c.cutTo {
		if cut != nil {
			fs = append(fs, featCutSent)
			break
		}
	}
	return fs
}

// snapRun runs a seeded random workload over FIFO links: requests with
// random destinations and payloads, random ticks, and a random link served
// at each step. With restores on, after some steps a random group's core is
// snapshotted and replaced by a core restored from the snapshot; the choice
// draws from its own generator, so the workload is the same either way.
type snapRun struct {
	t   *testing.T
	top *partition.Topology
	cfg Config
	net *fifoNet
	rng *rand.Rand
	rec *snaptest.Restorer[*Core]

	deliveries [][]multicast.MsgID
	seen       [featCount]int
	// keep, if set, is offered every snapshot taken, with the
	// configuration of its group.
	keep func(cfg Config, snap []byte)
}

func runSnapshotWorkload(t *testing.T, seed uint64, restores bool, keep func(Config, []byte)) *snapRun {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 21))
	n := 3 + rng.IntN(6)
	r := &snapRun{
		t:   t,
		top: lettersTopology(t, n),
		cfg: Config{GCTicks: 1 + rng.IntN(4)},
		rng: rng, keep: keep,
		deliveries: make([][]multicast.MsgID, n),
	}
	r.net = newFifoNet(t, r.top, seed, r.cfg)
	var snaps *rand.Rand
	if restores {
		snaps = rand.New(rand.NewPCG(seed, 23))
	}
	r.rec = snaptest.NewRestorer(r.net.cores, func(g partition.GroupID) snaptest.Codec[*Core] { return codec(r.groupConfig(g)) }, snaps)
	r.rec.Taken = func(g partition.GroupID, c *Core, snap []byte) {
		for _, f := range c.features() {
			r.seen[f]++
		}
		if r.keep != nil {
			r.keep(r.groupConfig(g), snap)
		}
	}
	msgs := 40 + rng.IntN(80)
	for sent := 0; sent < msgs || r.net.net.Len() > 0; {
		switch k := rng.IntN(10); {
		case k < 3 && sent < msgs:
			var dst partition.GroupSet
			for range 1 + rng.IntN(4) {
				dst = dst.Add(partition.GroupID(rng.IntN(n)))
			}
			payload := make([]byte, rng.IntN(6))
			for i := range payload {
				payload[i] = byte(rng.Uint32())
			}
			sent++
			m := multicast.Message{ID: multicast.MsgID{Client: 1 + rng.Uint64N(3), Seq: uint64(sent)}, Dst: dst, Payload: payload}
			r.step(Entry(dst), multicast.Request(m))
		case k == 3:
			r.step(partition.GroupID(rng.IntN(n)), multicast.Tick())
		case r.net.net.Len() > 0:
			_, to, in, _ := r.net.net.Random(rng)
			r.step(to, in)
		}
	}
	return r
}

// step applies in at group g, records the output and queues the sends; then,
// with restores on, maybe replaces a core by its restored snapshot.
func (r *snapRun) step(g partition.GroupID, in multicast.Input) {
	r.t.Helper()
	if err := r.net.cores[g].Step(in); err != nil {
		r.t.Fatalf("group %d: step %v: %v", g, in.Kind, err)
	}
	out := r.net.cores[g].Ready()
	r.rec.Record(g, out)
	for _, s := range out.Sends {
		r.net.net.Send(g, s.To, multicast.Envelope(g, s.Payload))
	}
	for _, m := range out.Deliveries {
		r.deliveries[g] = append(r.deliveries[g], m.ID)
	}
	r.rec.Maybe(r.t)
}

func (r *snapRun) groupConfig(g partition.GroupID) Config {
	cfg := r.cfg
	cfg.Self, cfg.Topology = g, r.top
	return cfg
}

// codec restores FlexCast snapshots under cfg: a restored copy keeps its
// Stats, and a core Restore accepts takes ticks without failing.
func codec(cfg Config) snaptest.Codec[*Core] {
	return snaptest.Codec[*Core]{
		Prefix:  "flexcast: restore",
		Restore: func(b []byte) (*Core, error) { return Restore(cfg, b) },
		Stats:   func(c *Core) any { return c.Stats() },
		Exercise: func(c *Core) error {
			for range 3 {
				if err := c.Step(multicast.Tick()); err != nil {
					return fmt.Errorf("tick after restore: %w", err)
				}
				c.Ready()
			}
			return nil
		},
	}
}

// TestSnapshotRestoreMidRun replaces cores by restored copies at random
// points of random workloads: every output, every delivery order and the
// final state of every core must be those of the same run without restores.
func TestSnapshotRestoreMidRun(t *testing.T) {
	seeds := uint64(120)
	if testing.Short() {
		seeds = 40
	}
	var seen [featCount]int
	for seed := range seeds {
		plain := runSnapshotWorkload(t, seed, false, nil)
		restored := runSnapshotWorkload(t, seed, true, nil)
		if diff := cmp.Diff(plain.deliveries, restored.deliveries); diff != "" {
			t.Fatalf("seed %d: delivery orders differ (-uninterrupted +restored):\n%s", seed, diff)
		}
		snaptest.Same(t, seed, plain.rec, restored.rec)
		for g := range plain.net.cores {
			if s := plain.net.cores[g].Stats(); s.Pending != 0 || s.NotifQueue != 0 || s.Open != 0 {
				t.Fatalf("seed %d: group %d did not finish: %+v", seed, g, s)
			}
		}
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
	top := lettersTopology(t, 4)
	for g := range partition.GroupID(4) {
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
		if seed == 200 {
			t.Fatalf("found snapshots for %d of %d features in 200 seeds", found, featCount)
		}
		runSnapshotWorkload(t, seed, true, func(cfg Config, snap []byte) {
			c, err := Restore(cfg, snap)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range c.features() {
				if out[f].snap == nil {
					out[f] = richSnapshot{cfg: cfg, snap: snap}
					found++
				}
			}
		})
	}
	return out
}

// lcaSnapshot returns the snapshot of rank 0 of 3 after it multicast m1 to
// {0,1} and m2 to {0,2}.
func lcaSnapshot(t *testing.T) richSnapshot {
	t.Helper()
	cfg := Config{Self: 0, Topology: lettersTopology(t, 3)}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, dst := range []partition.GroupSet{partition.SetOf(0, 1), partition.SetOf(0, 2)} {
		if err := c.Step(multicast.Request(multicast.Message{ID: multicast.MsgID{Client: 1, Seq: uint64(i + 1)}, Dst: dst})); err != nil {
			t.Fatal(err)
		}
		c.Ready()
	}
	return richSnapshot{cfg: cfg, snap: c.AppendSnapshot(nil)}
}

func TestRestoreRejectsTruncations(t *testing.T) {
	for f, rs := range richSnapshots(t) {
		snaptest.Truncations(t, codec(rs.cfg), featNames[f], rs.snap)
	}
}

// TestRestoreCorruptions flips, drops and inserts random bytes: Restore must
// return ErrCorrupt or a core that encodes back to a snapshot it accepts and
// takes ticks.
func TestRestoreCorruptions(t *testing.T) {
	var cases []snaptest.Case[*Core]
	for _, rs := range richSnapshots(t) {
		cases = append(cases, snaptest.Case[*Core]{Codec: codec(rs.cfg), Snap: rs.snap})
	}
	snaptest.Corruptions(t, 5, 300, cases...)
}

// TestRestoreRejectsBrokenInvariants breaks one invariant of a real state at
// a time, encodes it, and checks that Restore refuses it for that reason.
func TestRestoreRejectsBrokenInvariants(t *testing.T) {
	rich := richSnapshots(t)
	lca := lcaSnapshot(t)
	stranger := multicast.MsgID{Client: 99, Seq: 99}
	tests := []struct {
		name   string
		from   snapFeature // featCount: lcaSnapshot
		mutate func(c *Core)
		want   string
	}{
		{"chain holds an id twice", featCount, func(c *Core) {
			c.chains[0].entries = append(c.chains[0].entries, c.chains[0].entries[0])
		}, "chain 0 holds"},
		{"diff pointer beyond its chain", featCount, func(c *Core) { c.sent[1][0] = 3 }, "shipped chain 0 to position 3"},
		{"link carried a chain to no position", featCount, func(c *Core) { c.links[1].end[0] = 0 }, "link carried chain 0 to position 0"},
		{"open dependency in no chain", featOpen, func(c *Core) { c.dag.open(stranger) }, "open dependency"},
		{"queued message not pending", featQueued, func(c *Core) {
			for a := range c.queue {
				c.queue[a] = append(c.queue[a], stranger)
			}
		}, "queued"},
		{"arrived message not queued", featQueued, func(c *Core) {
			for a := range c.queue {
				if len(c.queue[a]) > 0 {
					c.queue[a] = c.queue[a][1:]
					return
				}
			}
		}, "not in the queue of its lca"},
		{"ack from a descendant", featEarlyAck, func(c *Core) {
			for _, p := range c.pending {
				p.acks = p.acks.Add(c.self)
			}
		}, "not all ancestors"},
		{"entry neither arrived nor acked", featEarlyAck, func(c *Core) {
			for _, p := range c.pending {
				if !p.arrived {
					p.acks, p.notifGot = 0, nil
				}
			}
		}, "neither arrived nor acknowledged"},
		{"notification key twice", featNotifRequired, func(c *Core) {
			for _, p := range c.pending {
				if len(p.notifReq) > 0 {
					p.notifReq = append(p.notifReq, p.notifReq[0])
				}
			}
		}, "listed twice"},
		{"queue head without blockers", featNotifQueued, func(c *Core) {
			c.notifQ[0].blockers = nil
		}, "without blockers"},
		{"blocker twice", featNotifQueued, func(c *Core) {
			c.notifQ[0].blockers = append(c.notifQ[0].blockers, c.notifQ[0].blockers[0])
		}, "waits for"},
		{"blocker not open", featNotifQueued, func(c *Core) {
			c.notifQ[0].blockers[0] = multicast.MsgID{Client: 1 << 40, Seq: 1}
		}, "not an open dependency"},
		{"notification at a destination", featNotifQueued, func(c *Core) {
			c.notifQ[0].dst = c.notifQ[0].dst.Add(c.self)
		}, "at a destination"},
		{"largest history below the current", featQueued, func(c *Core) { c.stats.HistoryLenMax = 0 }, "largest history"},
		{"largest pending count below the current", featQueued, func(c *Core) { c.stats.PendingMaxSeen = 0 }, "largest pending count"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := lca
			if tc.from < featCount {
				rs = rich[tc.from]
			}
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
// cluster of its size, and only as a FlexCast core.
func TestRestoreRejectsOtherConfigs(t *testing.T) {
	top := lettersTopology(t, 4)
	net := newFifoNet(t, top, 1, Config{})
	if err := net.step(0, multicast.Request(multicast.Message{ID: multicast.MsgID{Client: 1, Seq: 1}, Dst: partition.SetOf(0, 1, 2)})); err != nil {
		t.Fatal(err)
	}
	if err := net.drain(); err != nil {
		t.Fatal(err)
	}
	snap := net.cores[1].AppendSnapshot(nil)
	if _, err := Restore(Config{Self: 1, Topology: top}, snap); err != nil {
		t.Fatalf("Restore with the snapshot's config: %v", err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		b    []byte
	}{
		{"another group", Config{Self: 2, Topology: top}, snap},
		{"another cluster size", Config{Self: 1, Topology: lettersTopology(t, 5)}, snap},
		{"another protocol", Config{Self: 1, Topology: top}, append([]byte{'S'}, snap[1:]...)},
		{"another version", Config{Self: 1, Topology: top}, append([]byte{snapshotMagic, snapshotVersion + 1}, snap[2:]...)},
	} {
		if _, err := Restore(tc.cfg, tc.b); !errors.Is(err, wire.ErrCorrupt) {
			t.Errorf("%s: got %v, want ErrCorrupt", tc.name, err)
		}
	}
	// A version 5 snapshot (flushes) is refused, naming the versions read.
	if _, err := Restore(Config{Self: 1, Topology: top}, append([]byte{snapshotMagic, 5}, snap[2:]...)); err == nil ||
		!strings.Contains(err.Error(), "snapshot version 5, want 6 to 7") {
		t.Errorf("version 5 snapshot: got %v, want a refusal naming versions 5, 6 and 7", err)
	}
	// A version 6 snapshot (no topShipped) restores, with topShipped at 0.
	c := net.cores[1]
	c.topShipped, c.fromTop = [keepUpRounds]uint64{1, 2, 3}, 4
	v6 := c.appendSnapshot(nil, 6)
	r, err := Restore(Config{Self: 1, Topology: top}, v6)
	if err != nil {
		t.Fatalf("version 6 snapshot: %v", err)
	}
	c.topShipped, c.fromTop = [keepUpRounds]uint64{}, 0
	if got, want := r.AppendSnapshot(nil), c.AppendSnapshot(nil); !bytes.Equal(got, want) {
		t.Errorf("version 6 snapshot restored to another state than the core's with topShipped at 0")
	}
	if _, err := Restore(Config{Self: 7, Topology: top}, snap); err == nil || errors.Is(err, wire.ErrCorrupt) {
		t.Errorf("Restore with an invalid config: got %v, want New's error", err)
	}
}

func TestSnapshotWithUndrainedOutputPanics(t *testing.T) {
	c, err := New(Config{Self: 0, Topology: lettersTopology(t, 2)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Step(multicast.Request(multicast.Message{ID: multicast.MsgID{Client: 1, Seq: 1}, Dst: partition.SetOf(0)})); err != nil {
		t.Fatal(err)
	}
	snaptest.UndrainedPanics(t, c, "a delivery")
}

// FuzzRestore checks that Restore never panics, refuses with ErrCorrupt, and
// that what it accepts encodes stably. The seeds are the snapshots of group 2
// of 5 along a random run.
func FuzzRestore(f *testing.F) {
	top := lettersTopology(f, 5)
	cfg := Config{Self: 2, Topology: top, GCTicks: 1}
	net := newFifoNet(f, top, 3, cfg)
	rng := rand.New(rand.NewPCG(3, 3))
	for i := range 60 {
		var dst partition.GroupSet
		for range 1 + rng.IntN(4) {
			dst = dst.Add(partition.GroupID(rng.IntN(5)))
		}
		if err := net.step(Entry(dst), multicast.Request(multicast.Message{ID: multicast.MsgID{Client: 1, Seq: uint64(i)}, Dst: dst, Payload: []byte{byte(i)}})); err != nil {
			f.Fatal(err)
		}
		for k := rng.IntN(6); k > 0; k-- {
			if ok, err := net.serve(rng); !ok || err != nil {
				if err != nil {
					f.Fatal(err)
				}
				break
			}
		}
		if i%4 == 0 {
			for g := range net.cores {
				if err := net.step(partition.GroupID(g), multicast.Tick()); err != nil {
					f.Fatal(err)
				}
			}
		}
		if i%6 == 0 {
			f.Add(net.cores[2].AppendSnapshot(nil))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		snaptest.Property(t, codec(cfg), b)
	})
}
