package group

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

// TestDestinationCounts: the entry group counts the destination set of
// every request it takes, and none it refuses; the counts survive a
// snapshot, and a change of the epoch starts them again.
func TestDestinationCounts(t *testing.T) {
	cfg := testConfig(t, protocol.FlexCast, 0)
	st, err := NewState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	index := uint64(0)
	apply := func(data []byte) {
		t.Helper()
		index++
		if _, err := st.Apply(index, data); err != nil {
			if errs := RequestErrors(nil); !errors.As(err, &errs) {
				t.Fatalf("entry %d: %v", index, err)
			}
		}
	}
	ms := []multicast.Message{
		reqMsg(anon(1), 1, 0, 1), reqMsg(anon(1), 2, 0, 1), reqMsg(anon(1), 3, 0, 1, 2), reqMsg(anon(1), 4, 0),
		reqMsg(anon(1), 5, 1, 2), // not addressed through group 0 as lca: refused
	}
	apply(EncodeRequestsAt(1, ms))
	// With the clients' homes: counted apart from the same sets without.
	apply(EncodeRequestsFrom(1, []multicast.Message{reqMsg(anon(2), 1, 0, 1), reqMsg(anon(2), 2, 0, 1)}, []partition.GroupID{1, 1}))
	no := partition.NoGroup
	want := DstCounts{Epoch: 1, Sets: []DstCount{
		{Home: no, Dst: partition.SetOf(0, 1), Count: 2}, {Home: 1, Dst: partition.SetOf(0, 1), Count: 2},
		{Home: no, Dst: partition.SetOf(0), Count: 1}, {Home: no, Dst: partition.SetOf(0, 1, 2), Count: 1},
	}}
	if diff := cmp.Diff(want, st.DestinationCounts()); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	back, err := RestoreState(cfg, st.AppendSnapshot(nil))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, back.DestinationCounts()); diff != "" {
		t.Errorf("restored counts (-want +got):\n%s", diff)
	}
	apply(EncodeChange(1, BootstrapEpoch(cfg.Topology)))
	if got := st.DestinationCounts(); got.Epoch != 2 || len(got.Sets) != 0 || got.Other != 0 {
		t.Errorf("counts after the change: %+v, want none at epoch 2", got)
	}
	apply(EncodeRequestsAt(2, []multicast.Message{reqMsg(anon(1), 6, 0, 1)}))
	if got := st.DestinationCounts(); len(got.Sets) != 1 || got.Sets[0].Count != 1 {
		t.Errorf("counts of epoch 2: %+v", got)
	}
}

// TestDestinationCountsBounded: past DstCountsMax sets, requests of new
// sets are counted together.
func TestDestinationCountsBounded(t *testing.T) {
	st, err := NewState(testConfig(t, protocol.FlexCast, 0))
	if err != nil {
		t.Fatal(err)
	}
	for i := range DstCountsMax + 10 {
		st.countDst(partition.NoGroup, partition.GroupSet(i+1))
	}
	st.countDst(partition.NoGroup, 1)
	got := st.DestinationCounts()
	if len(got.Sets) != DstCountsMax || got.Other != 10 || got.Sets[0].Dst != 1 || got.Sets[0].Count != 2 {
		t.Errorf("%d sets, other %d, first %+v; want %d, 10, set 1 twice", len(got.Sets), got.Other, got.Sets[0], DstCountsMax)
	}
}
