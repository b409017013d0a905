package executor

import (
	"path/filepath"
	"testing"

	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// marker is backup marker seq of client 9, to every group.
func (c *cluster) marker(seq uint64) multicast.Message {
	return multicast.Message{ID: multicast.MsgID{Client: 9, Seq: seq}, Dst: partition.AllGroups(c.top.Len()), Payload: txn.AppendBackupPayload(nil)}
}

// checkpointData opens a copy of group g's checkpoint of marker m and
// returns its user keys and its applied index.
func (c *cluster) checkpointData(g partition.GroupID, m multicast.Message) (string, uint64) {
	c.t.Helper()
	r := c.reps[g]
	info, _, err := r.store.CheckpointFiles(CheckpointName(m.ID))
	if err != nil {
		c.t.Fatalf("group %d: checkpoint of %s: %v", g, m.ID, err)
	}
	dir := filepath.Join(c.t.TempDir(), "copy")
	if err := kv.SeedFromCheckpoint(r.store.CheckpointDir(CheckpointName(m.ID)), dir); err != nil {
		c.t.Fatal(err)
	}
	s, err := kv.Open(kv.Options{Dir: dir})
	if err != nil {
		c.t.Fatal(err)
	}
	defer s.Close()
	if s.AppliedIndex() != info.AppliedIndex {
		c.t.Errorf("group %d: checkpoint holds applied index %d, its info says %d", g, s.AppliedIndex(), info.AppliedIndex)
	}
	kvs, err := s.Scan(nil, nil, kv.ScanLimitMax)
	if err != nil {
		c.t.Fatal(err)
	}
	out := ""
	for i, p := range kvs {
		if i > 0 {
			out += " "
		}
		out += string(p.Key) + "=" + string(p.Value)
	}
	return out, info.AppliedIndex
}

// A backup marker is a barrier: it runs once everything delivered before
// it ran (a piece waiting for a remote vote holds it), nothing delivered
// after it runs before it, and the checkpoint holds exactly the deliveries
// before it; what it held back runs in the same entry, after the
// checkpoint. Twins send the same: the checkpoint changes no state.
func TestExecutorBackupMarkerIsABarrier(t *testing.T) {
	c := newCluster(t, nil)
	c.addTwins()
	c.seed(2, map[string]string{"w/0004/flag": "on"})
	head := c.msg(1, remoteCompare) // waits for group 2's vote
	before := c.msg(2, `{"then":[{"op":"put","key":"w/0002/a","value":"before"}]}`)
	mk := c.marker(1)
	after := c.msg(3, `{"then":[{"op":"put","key":"w/0002/b","value":"after"}]}`)
	c.deliver(0, head, before, mk, after)
	if c.hasResult(0, mk) || c.hasResult(0, after) {
		t.Fatal("the marker, or a delivery behind it, ran before the piece ahead of it had its vote")
	}
	if !c.hasResult(0, before) {
		t.Error("a delivery ahead of the marker that conflicts with nothing did not run ahead")
	}
	if _, _, err := c.reps[0].store.CheckpointFiles(CheckpointName(mk.ID)); err == nil {
		t.Fatal("checkpoint taken before the marker ran")
	}
	c.deliver(2, head, mk)
	c.deliver(1, mk)
	c.deliver(0)
	for _, m := range []multicast.Message{head, mk, after} {
		if !c.hasResult(0, m) {
			t.Errorf("group 0: no result of %s", m.ID)
		}
	}
	got, index := c.checkpointData(0, mk)
	if want := "w/0001/x=then w/0002/a=before"; got != want {
		t.Errorf("group 0 checkpoint: %s, want %s", got, want)
	}
	if mi, ok := MarkerIndex(c.result(0, mk)); !ok || mi != index || index != c.reps[0].index {
		t.Errorf("group 0: marker result %+v (index %d, %v), checkpoint at %d, entry %d", c.result(0, mk), mi, ok, index, c.reps[0].index)
	}
	if got := c.data(0); got != "w/0001/x=then w/0002/a=before w/0002/b=after" {
		t.Errorf("group 0 after the marker: %s", got)
	}
	if got, _ := c.checkpointData(2, mk); got != "w/0004/flag=on" {
		t.Errorf("group 2 checkpoint: %s", got)
	}
	if st := c.reps[0].ex.Stats(); st.Queued != 0 {
		t.Errorf("group 0 stats %+v, want nothing queued", st)
	}
	for g := range c.reps {
		if string(c.snapshot(partition.GroupID(g))) != string(twinSnapshot(t, c, g)) {
			t.Errorf("group %d: replica and twin differ after the marker", g)
		}
	}
}

// A crash between the parts of the marker's entry: the restarted executor
// takes the checkpoint and runs the rest of the entry, and Sent answers
// for the whole entry. A dropped checkpoint stays dropped.
func TestExecutorBackupMarkerResumes(t *testing.T) {
	c := newCluster(t, nil)
	mk := c.marker(1)
	after := c.msg(3, `{"then":[{"op":"put","key":"w/0002/b","value":"after"}]}`)
	c.deliver(0, c.msg(1, `{"then":[{"op":"put","key":"w/0002/a","value":"before"}]}`))
	// Leave the store as the first part leaves it: commit the entry up to
	// the marker by hand, with its pending record.
	r := c.reps[0]
	r.index++
	x := &execution{e: r.ex, index: r.index}
	b := r.store.NewBatch()
	x.b, x.rw, x.meta = b, batchRW{b}, r.ex.meta
	if err := x.apply(r.index, 0, []multicast.Message{mk, after}, nil); err != nil {
		t.Fatal(err)
	}
	if x.marker == nil {
		t.Fatal("the marker did not run")
	}
	if err := r.store.Commit(b, r.index); err != nil {
		t.Fatal(err)
	}
	b.Close()
	c.restart(0)
	if got, _ := c.checkpointData(0, mk); got != "w/0002/a=before" {
		t.Errorf("checkpoint after the restart: %s", got)
	}
	if !c.hasResult(0, after) {
		t.Error("the rest of the entry did not run at the restart")
	}
	if err := c.reps[0].store.DropCheckpoint(CheckpointName(mk.ID)); err != nil {
		t.Fatal(err)
	}
	if _, dropped, err := c.reps[0].store.Checkpoint(CheckpointName(mk.ID)); err != nil || !dropped {
		t.Errorf("a dropped checkpoint taken again: dropped %v, %v", dropped, err)
	}
}
