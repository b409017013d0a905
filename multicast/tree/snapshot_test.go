package tree

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/internal/snaptest"
	"github.com/flexkv/flexkv/partition"
)

// snapRun runs a seeded random workload on tree T1 over FIFO links:
// requests with random destinations at their tree-lca, and a random busy
// link served at each step. With restores on, after some steps a random
// group's core is snapshotted and replaced by a core restored from the
// snapshot; the choice draws from its own generator, so the workload is the
// same either way.
type snapRun struct {
	t   *testing.T
	h   *harness
	rec *snaptest.Restorer[*Core]
}

func runSnapshotWorkload(t *testing.T, top *partition.Topology, seed uint64, restores bool) *snapRun {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 41))
	r := &snapRun{t: t, h: newHarness(t, top)}
	var snaps *rand.Rand
	if restores {
		snaps = rand.New(rand.NewPCG(seed, 43))
	}
	r.rec = snaptest.NewRestorer(r.h.Cores, func(g partition.GroupID) snaptest.Codec[*Core] {
		return codec(Config{Self: g, Topology: top})
	}, snaps)
	n := top.Len()
	msgs := 20 + rng.IntN(60)
	for sent := 0; ; {
		links := r.h.Busy()
		options := len(links)
		if sent < msgs {
			options++
		}
		if options == 0 {
			return r
		}
		if pick := rng.IntN(options); pick < len(links) {
			to := links[pick][1]
			sends, dels := r.h.Recv(links[pick][0], to)
			r.record(to, sends, dels)
		} else {
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
			g := Entry(top, dst)
			sends, dels, err := r.h.Request(g, m)
			if err != nil {
				t.Fatalf("group %d: %v", g, err)
			}
			r.record(g, sends, dels)
		}
	}
}

// record records what group g output; then, with restores on, maybe
// replaces a core by its restored snapshot.
func (r *snapRun) record(g partition.GroupID, sends []multicast.Send, dels []multicast.Message) {
	r.t.Helper()
	r.rec.Record(g, multicast.Output{Sends: sends, Deliveries: dels})
	r.rec.Maybe(r.t)
}

// codec restores tree snapshots under cfg; a restored copy keeps its Stats.
func codec(cfg Config) snaptest.Codec[*Core] {
	return snaptest.Codec[*Core]{
		Prefix:  "tree: restore",
		Restore: func(b []byte) (*Core, error) { return Restore(cfg, b) },
		Stats:   func(c *Core) any { return c.Stats() },
	}
}

// TestSnapshotRestoreMidRun replaces cores by restored copies at random
// points of random workloads: every output, every delivery order and the
// final state of every core must be those of the same run without restores.
func TestSnapshotRestoreMidRun(t *testing.T) {
	top := paperT1(t)
	seeds := uint64(100)
	if testing.Short() {
		seeds = 30
	}
	for seed := range seeds {
		plain := runSnapshotWorkload(t, top, seed, false)
		restored := runSnapshotWorkload(t, top, seed, true)
		if diff := cmp.Diff(deliveredIDs(plain.h), deliveredIDs(restored.h)); diff != "" {
			t.Fatalf("seed %d: delivery orders differ (-uninterrupted +restored):\n%s", seed, diff)
		}
		snaptest.Same(t, seed, plain.rec, restored.rec)
	}
}

// busySnapshot returns the snapshot of eu-west-1 after a run: it received
// requests and envelopes, forwarded and delivered.
func busySnapshot(t testing.TB, top *partition.Topology) (Config, []byte) {
	h := newHarness(t, top)
	for i, d := range [][]string{{"us-west-1", "sa-east-1"}, {"eu-west-1", "sa-east-1"}, {"eu-west-1", "eu-north-1"}, {"eu-west-1"}} {
		submit(h, multicast.Message{ID: multicast.MsgID{Client: 1, Seq: uint64(i)}, Dst: set(t, top, d...)})
	}
	h.Drain()
	g := gid(t, top, "eu-west-1")
	if s := h.Cores[g].Stats(); s.Requests == 0 || s.Envelopes == 0 || s.Forwarded == 0 || s.Delivered == 0 {
		t.Fatalf("eu-west-1 left a counter at zero: %+v", s)
	}
	return Config{Self: g, Topology: top}, h.Cores[g].AppendSnapshot(nil)
}

func TestRestoreRejectsTruncations(t *testing.T) {
	cfg, snap := busySnapshot(t, paperT1(t))
	snaptest.Truncations(t, codec(cfg), "busy", snap)
}

// TestRestoreCorruptions flips, drops and inserts random bytes: Restore must
// return ErrCorrupt or a core that encodes back to a snapshot it accepts.
func TestRestoreCorruptions(t *testing.T) {
	cfg, snap := busySnapshot(t, paperT1(t))
	snaptest.Corruptions(t, 5, 2000, snaptest.Case[*Core]{Codec: codec(cfg), Snap: snap})
}

// TestRestoreRejectsBrokenInvariants: counters that no sequence of inputs
// produces are refused.
func TestRestoreRejectsBrokenInvariants(t *testing.T) {
	top := paperT1(t)
	cfg, snap := busySnapshot(t, top)
	good, err := Restore(cfg, snap)
	if err != nil {
		t.Fatal(err)
	}
	s := good.Stats()
	root := gid(t, top, "eu-west-3")
	leaf := gid(t, top, "us-west-1")
	tests := []struct {
		name  string
		self  partition.GroupID
		stats Stats
		want  string
	}{
		{"more delivered than received", cfg.Self, Stats{Requests: 1, Delivered: 2}, "delivered"},
		{"more forwarded than children reached", cfg.Self, Stats{Requests: 1, Forwarded: 3}, "forwarded"},
		{"a leaf forwards", leaf, Stats{Envelopes: 1, Forwarded: 1, Delivered: 1}, "forwarded"},
		{"received, neither forwarded nor delivered", cfg.Self, Stats{Requests: s.Requests, Envelopes: s.Envelopes}, "forwarded and"},
		{"envelopes at the root", root, Stats{Envelopes: 1, Delivered: 1}, "root"},
		{"received overflows", cfg.Self, Stats{Requests: 1 << 63, Envelopes: 1 << 63, Delivered: 1}, "overflow"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{Self: tc.self, Topology: top})
			if err != nil {
				t.Fatal(err)
			}
			c.stats = tc.stats
			_, err = Restore(Config{Self: tc.self, Topology: top}, c.AppendSnapshot(nil))
			if !errors.Is(err, wire.ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Restore: got %v, want ErrCorrupt about %q", err, tc.want)
			}
		})
	}
}

// TestRestoreRejectsOtherConfigs: a snapshot restores only at its group in a
// cluster of its size and tree, and only as a tree core.
func TestRestoreRejectsOtherConfigs(t *testing.T) {
	top := paperT1(t)
	cfg, snap := busySnapshot(t, top)
	star := partition.Spec{Parent: map[string]string{}}
	for i, name := range top.Names() {
		star.Groups = append(star.Groups, partition.Group{Name: name})
		if i > 0 {
			star.Parent[name] = top.Name(0)
		}
	}
	starTop, err := partition.NewTopology(star)
	if err != nil {
		t.Fatal(err)
	}
	small, err := partition.NewTopology(partition.Spec{
		Groups: []partition.Group{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}},
		Parent: map[string]string{"b": "a", "c": "a", "d": "b"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		b    []byte
	}{
		{"another group", Config{Self: cfg.Self + 1, Topology: top}, snap},
		{"another cluster size", Config{Self: 1, Topology: small}, snap},
		{"another tree", Config{Self: cfg.Self, Topology: starTop}, snap},
		{"another protocol", cfg, append([]byte{'S'}, snap[1:]...)},
		{"another version", cfg, append([]byte{snapshotMagic, snapshotVersion + 1}, snap[2:]...)},
	} {
		if _, err := Restore(tc.cfg, tc.b); !errors.Is(err, wire.ErrCorrupt) {
			t.Errorf("%s: got %v, want ErrCorrupt", tc.name, err)
		}
	}
	if _, err := Restore(Config{Self: 12, Topology: top}, snap); err == nil || errors.Is(err, wire.ErrCorrupt) {
		t.Errorf("Restore with an invalid config: got %v, want New's error", err)
	}
}

func TestSnapshotWithUndrainedOutputPanics(t *testing.T) {
	top := paperT1(t)
	root := gid(t, top, "eu-west-3")
	c, err := New(Config{Self: root, Topology: top})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Step(multicast.Request(multicast.Message{ID: multicast.MsgID{Client: 1, Seq: 1}, Dst: partition.SetOf(root)})); err != nil {
		t.Fatal(err)
	}
	snaptest.UndrainedPanics(t, c, "a delivery")
}

// FuzzRestore checks that Restore never panics, refuses with ErrCorrupt, and
// that what it accepts encodes stably.
func FuzzRestore(f *testing.F) {
	top := paperT1(f)
	cfg, snap := busySnapshot(f, top)
	f.Add(snap)
	fresh, err := New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(fresh.AppendSnapshot(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		snaptest.Property(t, codec(cfg), b)
	})
}
