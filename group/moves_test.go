package group

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// moveRig is a session rig whose group (0, the one that takes changes
// under FlexCast) has a partition map: p0 ["a", "b") of group 0, p1
// ["b", "c") of group 1, and a replicated range.
func moveRig(t *testing.T) *sessionRig {
	t.Helper()
	r := newSessionRig(t, 8, 100)
	pm, err := partition.NewPartitionMap(r.cfg.Topology, []partition.Partition{
		{Name: "p0", Start: []byte("a"), End: []byte("b"), Group: 0},
		{Name: "p1", Start: []byte("b"), End: []byte("c"), Group: 1},
		{Name: "item", Start: []byte("i"), End: []byte("j"), Group: partition.NoGroup, Replicated: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.cfg.Partitions = pm
	for _, m := range []**Machine{&r.m, &r.twin} {
		exec := newRecorder(1)
		if *m, err = NewMachine(r.cfg, exec); err != nil {
			t.Fatal(err)
		}
		if m == &r.m {
			r.exec = exec
		}
	}
	return r
}

// TestPartitionMoveState follows two moves through a group's state: one
// away from it (its range deleted at the completion), one to it (its
// chunks taken only where the copy ends, a chunk sent twice dropped), the
// owners in every epoch's partition map, a snapshot that keeps the copy
// under way, and the changes refused for what they ask.
func TestPartitionMoveState(t *testing.T) {
	r := moveRig(t)
	st := r.m.State()
	change := func(owners []partition.GroupID, moves ...Move) error {
		next := BootstrapEpoch(r.cfg.Topology)
		next.Owners, next.Moves = owners, moves
		return r.apply(EncodeChange(st.Epoch(), next))
	}
	away := Move{Partition: 0, To: 1, Since: 2}
	if err := change([]partition.GroupID{0, 1, partition.NoGroup}, away); err != nil {
		t.Fatal(err)
	}
	if len(st.MovesIn()) != 0 {
		t.Fatalf("a move away from the group started a copy here: %+v", st.MovesIn())
	}
	in := Move{Partition: 1, To: 0, Since: 3}
	if err := change([]partition.GroupID{0, 1, partition.NoGroup}, away, in); err != nil {
		t.Fatal(err)
	}
	// Refused: an owner changed without a move, the moving partition sent
	// elsewhere, the owners dropped.
	for _, tc := range []struct {
		owners []partition.GroupID
		moves  []Move
		text   string
	}{
		{[]partition.GroupID{0, 2, partition.NoGroup}, []Move{away, in}, "changes owner"},
		{[]partition.GroupID{0, 1, partition.NoGroup}, []Move{{Partition: 0, To: 2, Since: 4}, in}, "one move at a time"},
		{nil, nil, "drops the owners"},
		{[]partition.GroupID{0, 1, 1}, []Move{away, in}, "replicated"},
	} {
		if err := change(tc.owners, tc.moves...); !errors.Is(err, ErrChangeRefused) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("change to %v %+v: %v, want refused naming %q", tc.owners, tc.moves, err, tc.text)
		}
	}
	if st.Epoch() != 3 {
		t.Fatalf("epoch %d after refusals, want 3", st.Epoch())
	}
	copyIn(t, r, in)
	// Completing both: p0 goes to group 1 (its range dropped here), p1
	// comes here.
	r.exec.inbound = nil
	if err := change([]partition.GroupID{1, 0, partition.NoGroup}); err != nil {
		t.Fatal(err)
	}
	if len(st.MovesIn()) != 0 {
		t.Errorf("copies after the completion: %+v, want none", st.MovesIn())
	}
	if len(r.exec.inbound) != 1 {
		t.Fatalf("inbound at the completion: %+v, want p0's drop", r.exec.inbound)
	}
	if _, drop, err := DecodeMovePayload(r.exec.inbound[0].Payload); err != nil || drop != 0 {
		t.Errorf("drop payload: %d, %v, want partition 0", drop, err)
	}
	pm := st.Partitions()
	if g, _, _ := pm.Owner([]byte("a1")); g != 1 {
		t.Errorf("p0's owner in the epoch's map: %d, want 1", g)
	}
	if g, _, _ := pm.Owner([]byte("b1")); g != 0 {
		t.Errorf("p1's owner in the epoch's map: %d, want 0", g)
	}
	if g, _, _ := st.partitionsOf(st.Epochs()[0]).Owner([]byte("a1")); g != 0 {
		t.Errorf("p0's owner at epoch 1: %d, want 0", g)
	}
	back, err := RestoreState(r.cfg, st.AppendSnapshot(nil))
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range back.Epochs() {
		if w := st.Epochs()[i]; !slices.Equal(c.Owners, w.Owners) || !slices.Equal(c.Moves, w.Moves) {
			t.Errorf("restored epoch %d: owners %v moves %+v, want %v %+v", c.Epoch, c.Owners, c.Moves, w.Owners, w.Moves)
		}
	}
}

// copyIn takes the copy of move in (partition 1, ["b", "c")) through r:
// two chunks, the first sent twice, one past where the copy ends, one
// with a key outside the partition, a snapshot in between; then checks
// what the executor got.
func copyIn(t *testing.T, r *sessionRig, in Move) {
	t.Helper()
	st := r.m.State()
	rows := func(keys ...string) []MoveRow {
		var out []MoveRow
		for _, k := range keys {
			out = append(out, MoveRow{Key: []byte(k), Value: []byte("v" + k)})
		}
		return out
	}
	first := EncodeMoveChunk(in, nil, []byte("b5"), rows("b1", "b2"))
	if err := r.apply(first); err != nil {
		t.Fatalf("first chunk: %v", err)
	}
	if err := r.apply(first); !errors.Is(err, ErrChunkStale) {
		t.Errorf("first chunk again: %v, want ErrChunkStale", err)
	}
	if err := r.apply(EncodeMoveChunk(in, []byte("b7"), nil, rows("b8"))); !errors.Is(err, ErrChunkStale) {
		t.Errorf("a chunk past where the copy ends: %v, want ErrChunkStale", err)
	}
	if err := r.apply(EncodeMoveChunk(in, []byte("b5"), nil, rows("c1"))); !errors.Is(err, multicast.ErrInvalid) {
		t.Errorf("a chunk with a key outside the partition: %v, want ErrInvalid", err)
	}
	// A snapshot keeps the copy under way.
	back, err := RestoreState(r.cfg, st.AppendSnapshot(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := back.MovesIn(); len(got) != 1 || string(got[0].Next) != "b5" || got[0].Keys != 2 || got[0].Done {
		t.Fatalf("restored copies %+v, want p1 at b5 with 2 rows", got)
	}
	if err := r.apply(EncodeMoveChunk(in, []byte("b5"), nil, rows("b6", "b9"))); err != nil {
		t.Fatalf("last chunk: %v", err)
	}
	if got := st.MovesIn(); len(got) != 1 || !got[0].Done || got[0].Keys != 4 || got[0].Bytes != 20 {
		t.Fatalf("copies after the last chunk %+v, want p1 done with 4 rows, 20 bytes", got)
	}
	// The executor got the chunks' rows, in order, from the group itself.
	var keys []string
	for k, in := range r.exec.inbound {
		rs, drop, err := DecodeMovePayload(in.Payload)
		if err != nil || in.From != 0 {
			t.Fatalf("inbound %+v: %v", in, err)
		}
		if k == 0 {
			// The range cleared before the first chunk.
			if drop != 1 {
				t.Fatalf("first inbound: drop %d, want partition 1's range cleared", drop)
			}
			continue
		}
		if drop >= 0 {
			t.Fatalf("inbound %d: a drop of %d", k, drop)
		}
		for _, row := range rs {
			keys = append(keys, string(row.Key))
		}
	}
	if want := []string{"b1", "b2", "b6", "b9"}; !slices.Equal(keys, want) {
		t.Errorf("the executor got rows %q, want %q", keys, want)
	}
}

// TestCheckOwners refuses owners and moves that name no partition or
// group, move a partition without an owner, twice, or to its owner.
func TestCheckOwners(t *testing.T) {
	ng := partition.NoGroup
	for _, tc := range []struct {
		c    EpochConfig
		text string
	}{
		{EpochConfig{Moves: []Move{{0, 1, 2}}}, "moves without owners"},
		{EpochConfig{Owners: []partition.GroupID{0, 5}}, "owner 5"},
		{EpochConfig{Owners: []partition.GroupID{0, 1}, Moves: []Move{{2, 1, 2}}}, "move of partition 2"},
		{EpochConfig{Owners: []partition.GroupID{0, ng}, Moves: []Move{{1, 0, 2}}}, "no owner"},
		{EpochConfig{Owners: []partition.GroupID{0, 1}, Moves: []Move{{0, 0, 2}}}, "its owner"},
		{EpochConfig{Owners: []partition.GroupID{0, 1}, Moves: []Move{{0, 1, 2}, {0, 2, 2}}}, "moves twice"},
		{EpochConfig{Owners: []partition.GroupID{0, 1}, Moves: []Move{{0, 1, 0}}}, "since epoch 0"},
	} {
		if err := CheckOwners(tc.c, 3); err == nil || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("CheckOwners(%+v) = %v, want %q", tc.c, err, tc.text)
		}
	}
	if err := CheckOwners(EpochConfig{Owners: []partition.GroupID{0, 1, ng}, Moves: []Move{{0, 2, 3}}}, 3); err != nil {
		t.Errorf("a valid move: %v", err)
	}
}
