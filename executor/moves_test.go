package executor

import (
	"slices"
	"testing"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// TestPartitionMoves: a chunk's rows are written as they are; a chunk from
// another group is junk; a transaction on a partition that moved here is
// refused until the executor is given the new owners, and runs after; the
// owners survive a reopen of the store (a restart prepares its queue with
// them); a drop deletes exactly the partition's range.
func TestPartitionMoves(t *testing.T) {
	top := testTopology(t)
	pm := testPartitionMap(t, top)
	dir := t.TempDir()
	open := func() (*kv.Store, *Executor) {
		t.Helper()
		s, err := kv.Open(kv.Options{Dir: dir, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		ex, err := NewExecutor(Config{Store: s, Partitions: pm, Topology: top, Self: 0})
		if err != nil {
			t.Fatal(err)
		}
		return s, ex
	}
	s, ex := open()
	index := uint64(0)
	exec := func(ds []multicast.Message, in ...rawnode.AppInbound) {
		t.Helper()
		index++
		if _, err := ex.Execute(index, group.Clock{}, ds, in); err != nil {
			t.Fatal(err)
		}
	}
	chunk := group.AppendMoveChunk(nil, []group.MoveRow{{Key: []byte("w/0003/a"), Value: []byte("7")}, {Key: []byte("w/0003/b"), Value: []byte("8")}})
	exec(nil, rawnode.AppInbound{From: 1, Payload: chunk})
	if _, found, _ := s.Get([]byte("w/0003/a")); found {
		t.Fatal("a chunk from another group was written")
	}
	exec(nil, rawnode.AppInbound{From: 0, Payload: chunk})
	if v, found, _ := s.Get([]byte("w/0003/b")); !found || string(v) != "8" {
		t.Fatalf("w/0003/b after the chunk: %q %v, want 8", v, found)
	}
	// w0003 is group 1's: a transaction for group 0 that touches it is
	// malformed here until the owners change.
	tx := mustParse(t, `{"then":[{"op":"add","key":"w/0003/a","int":1}]}`)
	msg := func(seq uint64) multicast.Message {
		return multicast.Message{ID: multicast.MsgID{Client: 9, Seq: seq}, Dst: partition.SetOf(0), Payload: txn.AppendTxnPayload(nil, tx)}
	}
	exec([]multicast.Message{msg(1)})
	if r, found, err := ex.Result(msg(1).ID); err != nil || !found || r.Succeeded {
		t.Fatalf("before the owners changed: %+v %v %v, want refused", r, found, err)
	}
	moved, err := pm.WithOwners(top, []partition.GroupID{partition.NoGroup, 0, 0, 0, 2})
	if err != nil {
		t.Fatal(err)
	}
	ex.SetPartitions([]group.PartitionSwitch{{PM: moved}})
	exec([]multicast.Message{msg(2)})
	if r, found, err := ex.Result(msg(2).ID); err != nil || !found || !r.Succeeded {
		t.Fatalf("after the owners changed: %+v %v %v, want run", r, found, err)
	}
	if v, _, _ := s.Get([]byte("w/0003/a")); string(v) != "8" {
		t.Errorf("w/0003/a = %q, want 8", v)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, ex = open()
	defer s.Close()
	if got := ex.Partitions().Owners(); !slices.Equal(got, moved.Owners()) {
		t.Errorf("owners after a reopen: %v, want %v", got, moved.Owners())
	}
	// A drop of w0003 (index 3 in key order) leaves its neighbours.
	for _, k := range []string{"w/0002/z", "w/0004/a"} {
		exec([]multicast.Message{{ID: multicast.MsgID{Client: 9, Seq: index + 10}, Dst: partition.SetOf(0),
			Payload: txn.AppendTxnPayload(nil, mustParse(t, `{"then":[{"op":"put","key":"`+k+`","value":"n"}]}`))}})
	}
	exec(nil, rawnode.AppInbound{From: 0, Payload: group.AppendMoveDrop(nil, 3)})
	rows, err := s.Scan([]byte("w/0002/"), []byte("w/0005/"), 100)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, r := range rows {
		keys = append(keys, string(r.Key))
	}
	if !slices.Equal(keys, []string{"w/0002/z"}) {
		t.Errorf("after dropping w0003: %q, want only w/0002/z (w/0004/a is group 2's: refused here)", keys)
	}
}
