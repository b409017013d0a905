package group

import (
	"errors"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
)

// TestEpochChange: the group that takes changes ends epoch 1 with a change
// that keeps the overlay; it then refuses requests of epoch 1 ("epoch
// changed", naming epoch 2) and takes those of epoch 2; its table holds
// both epochs, and a snapshot keeps them.
func TestEpochChange(t *testing.T) {
	r := newSessionRig(t, 8, 100)
	st := r.m.State()
	if st.Epoch() != 1 || len(st.Epochs()) != 1 {
		t.Fatalf("bootstrap: epoch %d, %d configurations, want 1 and 1", st.Epoch(), len(st.Epochs()))
	}
	if err := r.apply(EncodeChange(1, BootstrapEpoch(r.cfg.Topology))); err != nil {
		t.Fatalf("change: %v", err)
	}
	if st.Epoch() != 2 || len(st.Epochs()) != 2 || st.EpochConfig().Epoch != 2 {
		t.Fatalf("after the change: epoch %d, configurations %+v", st.Epoch(), st.Epochs())
	}
	err := r.apply(EncodeRequestsAt(1, []multicast.Message{reqMsg(anon(1), 1, 0, 1)}))
	var ee *rawnode.EpochError
	if !errors.Is(err, rawnode.ErrEpochChanged) || !errors.As(err, &ee) || ee.Epoch != 2 {
		t.Errorf("a request of epoch 1 after the change: %v, want epoch changed naming epoch 2", err)
	}
	if errs := RequestErrors(nil); !errors.As(r.apply(EncodeRequestsAt(2, []multicast.Message{reqMsg(anon(1), 2, 0, 1)})), &errs) || len(errs) != 1 || errs[0] != nil {
		t.Errorf("a request of epoch 2: %v, want it accepted", errs)
	}
	if err := r.apply(EncodeChange(1, BootstrapEpoch(r.cfg.Topology))); !errors.Is(err, rawnode.ErrEpochChanged) {
		t.Errorf("a second change of epoch 1: %v, want epoch changed", err)
	}
	snap := st.AppendSnapshot(nil)
	back, err := RestoreState(r.cfg, snap)
	if err != nil {
		t.Fatal(err)
	}
	if back.Epoch() != 2 || len(back.Epochs()) != 2 || !back.EpochConfig().SameOverlay(BootstrapEpoch(r.cfg.Topology)) {
		t.Errorf("restored: epoch %d, configurations %+v", back.Epoch(), back.Epochs())
	}
}

// TestChangeRefused: a change is refused, naming the problem, at a group
// that does not take changes, and when its tree is not a tree (or missing
// under the tree protocol); a change of the ranks is taken.
func TestChangeRefused(t *testing.T) {
	for _, p := range []multicast.Protocol{protocol.FlexCast, protocol.Skeen, protocol.Tree} {
		cfg := testConfig(t, p, 1)
		st, err := NewState(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Apply(1, EncodeChange(1, BootstrapEpoch(cfg.Topology))); !errors.Is(err, multicast.ErrNotEntry) {
			t.Errorf("%s: change at group b: %v, want ErrNotEntry", p, err)
		}
		cfg = testConfig(t, p, 0)
		st, _ = NewState(cfg)
		next := BootstrapEpoch(cfg.Topology)
		next.Parent = []partition.GroupID{partition.NoGroup, partition.NoGroup, 0}
		if _, err := st.Apply(1, EncodeChange(1, next)); !errors.Is(err, ErrChangeRefused) || !strings.Contains(err.Error(), "two roots") {
			t.Errorf("%s: a tree of two roots: %v, want ErrChangeRefused naming it", p, err)
		}
		if p == protocol.Tree {
			next.Parent = nil
			if _, err := st.Apply(2, EncodeChange(1, next)); !errors.Is(err, ErrChangeRefused) || !strings.Contains(err.Error(), "drops the tree") {
				t.Errorf("%s: no tree: %v, want ErrChangeRefused naming it", p, err)
			}
		}
		if st.Epoch() != 1 || st.Node().Changing() {
			t.Errorf("%s: a refused change moved the epoch to %d (changing %v)", p, st.Epoch(), st.Node().Changing())
		}
		next = BootstrapEpoch(cfg.Topology)
		next.Overlay = []partition.GroupID{1, 0, 2}
		if _, err := st.Apply(3, EncodeChange(1, next)); err != nil {
			t.Errorf("%s: a change of the ranks: %v", p, err)
		}
		// FlexCast's lca and the tree's root deliver it at once, and start
		// a new generation of the core; Skeen's entry waits for the
		// others' timestamps, and keeps its core throughout.
		wantGen := uint64(2)
		if p == protocol.Skeen {
			wantGen = 1
		}
		if gen, _ := st.Node().Generation(); (st.Epoch() != 2 && !st.Node().Changing()) || (st.Epoch() == 2 && gen != wantGen) {
			t.Errorf("%s: after a change of the ranks: epoch %d, changing %v, generation %d", p, st.Epoch(), st.Node().Changing(), gen)
		}
	}
}

// TestBadChangeEntries: malformed configurations are refused as invalid.
func TestBadChangeEntries(t *testing.T) {
	cfg := testConfig(t, protocol.FlexCast, 0)
	for name, next := range map[string]EpochConfig{
		"short overlay": {Overlay: []partition.GroupID{0, 1}},
		"duplicate":     {Overlay: []partition.GroupID{0, 1, 1}},
		"unknown group": {Overlay: []partition.GroupID{0, 1, 5}},
		"short tree":    {Overlay: []partition.GroupID{0, 1, 2}, Parent: []partition.GroupID{partition.NoGroup}},
	} {
		st, _ := NewState(cfg)
		if _, err := st.Apply(1, EncodeChange(1, next)); !errors.Is(err, multicast.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// TestSnapshotV2RestoresAtEpoch1: a snapshot of version 2 has no epochs,
// and restores at the bootstrap configuration.
func TestSnapshotV2RestoresAtEpoch1(t *testing.T) {
	r := newSessionRig(t, 8, 5)
	st := r.m.State()
	b := []byte{stateSnapshotV2}
	b = wire.AppendUvarint(b, 7)
	b = wire.AppendBytes(b, st.Core().(snapshotter).AppendSnapshot(nil))
	b = wire.AppendBytes(b, st.node.AppendSnapshot(nil))
	b = wire.AppendUvarint(b, 0) // log time
	b = wire.AppendUvarint(b, 0) // sessions
	v2, err := RestoreState(r.cfg, b)
	if err != nil {
		t.Fatal(err)
	}
	if v2.Epoch() != 1 || len(v2.Epochs()) != 1 || !v2.EpochConfig().SameOverlay(BootstrapEpoch(r.cfg.Topology)) {
		t.Errorf("version 2 restored at epoch %d with %+v", v2.Epoch(), v2.Epochs())
	}
}

// TestForExecutor: a delivery the stop-sign aborted reaches the executor as
// an AbortedPayload naming the epoch the group was in at its delivery.
func TestForExecutor(t *testing.T) {
	m1, m2, m3 := reqMsg(1, 1, 0), reqMsg(1, 2, 0), reqMsg(1, 3, 0)
	out := rawnode.Output{
		Deliveries: []multicast.Message{m1, m2, m3},
		Changes:    []rawnode.Change{{Epoch: 3, At: 1}, {Epoch: 4, At: 2}},
		Aborted:    []multicast.MsgID{m2.ID, m3.ID},
	}
	ds := forExecutor(out, 5)
	if string(ds[0].Payload) != string(m1.Payload) {
		t.Errorf("m1 payload %q, want its own", ds[0].Payload)
	}
	for k, want := range map[int]uint64{1: 4, 2: 5} {
		if e, ok := EpochAborted(ds[k].Payload); !ok || e != want {
			t.Errorf("delivery %d: aborted %v at epoch %d, want epoch %d", k, ok, e, want)
		}
	}
	if string(out.Deliveries[1].Payload) != string(m2.Payload) {
		t.Errorf("forExecutor changed the output's deliveries")
	}
	if _, ok := EpochAborted([]byte{1, 2, 3}); ok {
		t.Errorf("a transaction payload read as aborted")
	}
}
