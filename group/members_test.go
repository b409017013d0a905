package group

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// testMembers returns a table of members for n groups, k replicas each,
// with addresses of their own.
func testMembers(n, k int) [][]partition.ReplicaConfig {
	out := make([][]partition.ReplicaConfig, n)
	id := 0
	for g := range n {
		for range k {
			id++
			out[g] = append(out[g], partition.ReplicaConfig{ID: fmt.Sprintf("r%d", id),
				Raft: fmt.Sprintf("h:%d", 7100+id), GRPC: fmt.Sprintf("h:%d", 7200+id)})
		}
	}
	return out
}

// TestMemberChange: a change that names members starts an epoch with them;
// a later change of the overlay alone (the entry written before members)
// keeps them; a snapshot keeps every epoch's members, and a change that
// would drop them is refused.
func TestMemberChange(t *testing.T) {
	r := newSessionRig(t, 8, 100)
	st := r.m.State()
	n := r.cfg.Topology.Len()
	next := BootstrapEpoch(r.cfg.Topology)
	next.Members = testMembers(n, 3)
	next.Members[1] = append(next.Members[1], partition.ReplicaConfig{ID: "r10", Raft: "h:7110", GRPC: "h:7210", Peer: "h:7390"})
	if err := r.apply(EncodeChange(1, next)); err != nil {
		t.Fatalf("member change: %v", err)
	}
	got, ok := st.EpochConfig().GroupMembers(1)
	if st.Epoch() != 2 || !ok || len(got) != 4 || got[3].ID != "r10" || got[3].PeerAddr() != "h:7390" {
		t.Fatalf("epoch %d, group 1 members %+v (%v), want 4 ending with r10", st.Epoch(), got, ok)
	}
	if _, ok := st.Epochs()[0].GroupMembers(1); ok {
		t.Errorf("epoch 1 has members: want the bootstrap configuration's (nil)")
	}
	// The entry of a change written before members: overlay and tree.
	old := wire.AppendUvarint([]byte{entryChange}, 2)
	old = appendOverlay(old, BootstrapEpoch(r.cfg.Topology))
	if err := r.apply(old); err != nil {
		t.Fatalf("change without members: %v", err)
	}
	if got, _ := st.EpochConfig().GroupMembers(1); st.Epoch() != 3 || len(got) != 4 {
		t.Fatalf("epoch %d, group 1 members %+v: want epoch 3 keeping the 4 members", st.Epoch(), got)
	}
	drop := BootstrapEpoch(r.cfg.Topology)
	if err := r.apply(EncodeChange(3, drop)); !errors.Is(err, ErrChangeRefused) || !strings.Contains(err.Error(), "drops the members") {
		t.Errorf("a change without members after members: %v, want refused", err)
	}
	back, err := RestoreState(r.cfg, st.AppendSnapshot(nil))
	if err != nil {
		t.Fatal(err)
	}
	if back.Epoch() != 3 || len(back.Epochs()) != 3 {
		t.Fatalf("restored at epoch %d with %d configurations", back.Epoch(), len(back.Epochs()))
	}
	for i, c := range back.Epochs() {
		want := st.Epochs()[i]
		if len(c.Members) != len(want.Members) {
			t.Errorf("restored epoch %d: %d groups of members, want %d", c.Epoch, len(c.Members), len(want.Members))
			continue
		}
		for g := range c.Members {
			if !slices.Equal(c.Members[g], want.Members[g]) {
				t.Errorf("restored epoch %d group %d: %+v, want %+v", c.Epoch, g, c.Members[g], want.Members[g])
			}
		}
	}
	// The twin replica applied the same entries: same bytes.
	if a, b := st.AppendSnapshot(nil), r.twin.State().AppendSnapshot(nil); string(a) != string(b) {
		t.Errorf("two replicas' snapshots differ after member changes")
	}
}

// TestSnapshotV3KeepsBootstrapMembers: a snapshot of version 3 has epochs
// without members, and restores with the bootstrap members.
func TestSnapshotV3KeepsBootstrapMembers(t *testing.T) {
	r := newSessionRig(t, 8, 5)
	st := r.m.State()
	if err := r.apply(EncodeChange(1, BootstrapEpoch(r.cfg.Topology))); err != nil {
		t.Fatal(err)
	}
	b := []byte{stateSnapshotV3}
	b = wire.AppendUvarint(b, st.Applied())
	b = wire.AppendBytes(b, st.Core().(snapshotter).AppendSnapshot(nil))
	b = wire.AppendBytes(b, st.node.AppendSnapshot(nil))
	b = wire.AppendUvarint(b, 0) // log time
	b = wire.AppendUvarint(b, 0) // sessions
	b = wire.AppendUvarint(b, 2) // epochs
	for _, c := range st.Epochs() {
		b = wire.AppendUvarint(b, c.Epoch)
		b = appendOverlay(b, c)
	}
	v3, err := RestoreState(r.cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	if v3.Epoch() != 2 || v3.EpochConfig().Members != nil {
		t.Errorf("version 3 restored at epoch %d with members %+v, want 2 and none", v3.Epoch(), v3.EpochConfig().Members)
	}
}

// TestCheckMembers: a table of members that reuses an id or an address, or
// leaves a group empty, is refused naming it, and a change that carries
// one is invalid and changes nothing.
func TestCheckMembers(t *testing.T) {
	n := 3
	tests := []struct {
		name string
		edit func(m [][]partition.ReplicaConfig) [][]partition.ReplicaConfig
		want string
	}{
		{"id twice", func(m [][]partition.ReplicaConfig) [][]partition.ReplicaConfig {
			m[2][0].ID = "r1"
			return m
		}, `member id "r1" twice`},
		{"address twice", func(m [][]partition.ReplicaConfig) [][]partition.ReplicaConfig {
			m[2][0].GRPC = m[0][1].GRPC
			return m
		}, "address h:7202"},
		{"peer address of another", func(m [][]partition.ReplicaConfig) [][]partition.ReplicaConfig {
			m[2][0].Peer = "h:7101" // r1's raft address
			return m
		}, "address h:7101"},
		{"empty group", func(m [][]partition.ReplicaConfig) [][]partition.ReplicaConfig {
			m[1] = nil
			return m
		}, "group 1 has 0 members"},
		{"no raft address", func(m [][]partition.ReplicaConfig) [][]partition.ReplicaConfig {
			m[0][0].Raft = ""
			return m
		}, "lacks"},
		{"groups missing", func(m [][]partition.ReplicaConfig) [][]partition.ReplicaConfig { return m[:2] }, "members of 2 groups"},
	}
	if err := CheckMembers(testMembers(n, 3), n); err != nil {
		t.Fatalf("a good table: %v", err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckMembers(tc.edit(testMembers(n, 3)), n)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %q", err, tc.want)
			}
			if tc.name == "groups missing" {
				return
			}
			r := newSessionRig(t, 8, 5)
			next := BootstrapEpoch(r.cfg.Topology)
			next.Members = tc.edit(testMembers(n, 3))
			if err := r.apply(EncodeChange(1, next)); !errors.Is(err, multicast.ErrInvalid) {
				t.Errorf("change entry: %v, want ErrInvalid", err)
			}
			if r.m.State().Epoch() != 1 {
				t.Errorf("a refused change moved the epoch to %d", r.m.State().Epoch())
			}
		})
	}
}
