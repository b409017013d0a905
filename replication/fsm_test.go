package replication

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/raft"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

// openRecorder opens a Recorder in a directory of t's, closed when t ends.
func openRecorder(t *testing.T, voteTo partition.GroupID) *Recorder {
	t.Helper()
	r, err := OpenRecorder(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r.VoteTo = voteTo
	t.Cleanup(func() { r.Close() })
	return r
}

// deliveryIndexes returns the entry index of each delivery r recorded.
func deliveryIndexes(t *testing.T, r *Recorder) []uint64 {
	t.Helper()
	ds, err := r.Deliveries()
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for _, d := range ds {
		out = append(out, d.Index)
	}
	return out
}

type bufSink struct{ bytes.Buffer }

func (*bufSink) ID() string    { return "test" }
func (*bufSink) Cancel() error { return nil }
func (*bufSink) Close() error  { return nil }

// TestRestoreKeepsCurrentExecutor: the executor's index moves only on
// entries that deliver; a snapshot taken at a later tick must not make a
// restart rewrite an executor that is already current, while an executor
// that is behind is restored.
func TestRestoreKeepsCurrentExecutor(t *testing.T) {
	top, err := partition.NewTopology(partition.Spec{Groups: []partition.Group{{Name: "a"}, {Name: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := group.Config{Protocol: protocol.FlexCast, Topology: top, Self: 0}
	exec := openRecorder(t, 0)
	f, err := newFSM(cfg, exec, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := multicast.Message{ID: multicast.MsgID{Client: group.AnonymousBit | 1, Seq: 1}, Dst: partition.SetOf(0)}
	logs := []*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: group.EncodeRequest(m)},
		{Index: 2, Type: raft.LogCommand, Data: group.EncodeTick()},
		{Index: 3, Type: raft.LogCommand, Data: group.EncodeTick()},
	}
	for i, res := range f.ApplyBatch(logs) {
		if res != nil {
			t.Fatalf("entry %d: %v", i+1, res)
		}
	}
	if got := exec.AppliedIndex(); got != 1 {
		t.Fatalf("executor at %d, want 1 (only entry 1 delivers)", got)
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink bufSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		execApplied  uint64
		wantRestores int64
	}{
		{"current executor kept", 1, 0},
		{"executor behind restored", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := openRecorder(t, 0)
			if tc.execApplied > 0 {
				if _, err := x.Execute(tc.execApplied, group.Clock{}, []multicast.Message{m}, nil); err != nil {
					t.Fatal(err)
				}
			}
			g, err := newFSM(cfg, x, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
				t.Fatal(err)
			}
			if got := g.execRestores.Load(); got != tc.wantRestores {
				t.Fatalf("executor restores: got %d, want %d", got, tc.wantRestores)
			}
			if got := x.AppliedIndex(); got != 1 {
				t.Fatalf("executor at %d after the restore, want 1", got)
			}
			if got := g.m.State().Applied(); got != 3 {
				t.Fatalf("state applied: got %d, want 3", got)
			}
		})
	}
}

// TestReplayResendsExecutorSends: a replica restarted from a snapshot older
// than its executor replays entries the executor applied already; it must
// queue the executor's sends of those entries again (from Sent, without
// executing), or its channel state would differ from its group's.
func TestReplayResendsExecutorSends(t *testing.T) {
	top, err := partition.NewTopology(partition.Spec{Groups: []partition.Group{{Name: "a"}, {Name: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := group.Config{Protocol: protocol.FlexCast, Topology: top, Self: 0}
	var logs []*raft.Log
	for i := uint64(1); i <= 6; i++ {
		m := multicast.Message{ID: multicast.MsgID{Client: group.AnonymousBit | 1, Seq: i}, Dst: partition.SetOf(0)}
		logs = append(logs, &raft.Log{Index: i, Type: raft.LogCommand, Data: group.EncodeRequest(m)})
	}
	// The reference replica applies everything.
	ref := openRecorder(t, 1)
	a, err := newFSM(cfg, ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.ApplyBatch(logs)
	// The restarted replica: a snapshot after entry 2, an executor that had
	// applied up to entry 5 when it stopped.
	b, err := newFSM(cfg, openRecorder(t, 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	b.ApplyBatch(logs[:2])
	snap, err := b.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink bufSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	// aheadOf returns an executor that ran entries 1 to 5 before it stopped.
	aheadOf := func() *Recorder {
		x := openRecorder(t, 1)
		before, err := newFSM(cfg, x, nil)
		if err != nil {
			t.Fatal(err)
		}
		before.ApplyBatch(logs[:5])
		return x
	}
	ahead := aheadOf()
	c, err := newFSM(cfg, ahead, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	c.ApplyBatch(logs[2:])
	// Each entry delivers once: entries 3 to 5 were not executed again
	// after the restart, entry 6 was.
	if diff := cmp.Diff([]uint64{1, 2, 3, 4, 5, 6}, deliveryIndexes(t, ahead)); diff != "" {
		t.Errorf("entries executed, by delivery (-want +got):\n%s", diff)
	}
	if !bytes.Equal(a.m.State().AppendSnapshot(nil), c.m.State().AppendSnapshot(nil)) {
		t.Errorf("the restarted replica's state differs from the reference's")
	}
	if got, want := c.m.State().Node().OutboxLen(1), 6; got != want {
		t.Errorf("outbox to group 1 holds %d votes, want %d", got, want)
	}
	// Without the replayed sends the states would differ: the check above
	// can fail.
	lost := aheadOf()
	if err := lost.ForgetSent(5); err != nil {
		t.Fatal(err)
	}
	d, err := newFSM(cfg, lost, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	d.ApplyBatch(logs[2:])
	if bytes.Equal(a.m.State().AppendSnapshot(nil), d.m.State().AppendSnapshot(nil)) {
		t.Errorf("a replica that lost its executor's sends matches the reference: the test cannot tell")
	}
}

// A snapshot stream that declares a huge protocol state and carries 10
// bytes fails at once, having allocated about what arrived; one that
// declares more than the bound is refused before reading.
func TestRestoreDeclaredSize(t *testing.T) {
	top, err := partition.NewTopology(partition.Spec{Groups: []partition.Group{{Name: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := group.Config{Protocol: protocol.FlexCast, Topology: top, Self: 0}
	f, err := newFSM(cfg, openRecorder(t, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	stream := func(declared uint64) io.ReadCloser {
		b := binary.BigEndian.AppendUint64(nil, declared)
		return io.NopCloser(bytes.NewReader(append(b, "0123456789"...)))
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	err = f.Restore(stream(StateBytesMax))
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "10 read") {
		t.Errorf("Restore of a 16 GiB claim with 10 bytes = %v, want an unexpected EOF naming what was read", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("Restore allocated %d bytes for 10 that arrived", alloc)
	}
	if took > 5*time.Second {
		t.Errorf("Restore took %s", took)
	}

	f.stateMax = 1 << 10
	if err := f.Restore(stream(1<<10 + 1)); err == nil || !strings.Contains(err.Error(), "more than the bound of 1024") {
		t.Errorf("Restore of a claim past the bound = %v, want a refusal naming the bound", err)
	}
	if err := f.Restore(stream(StateBytesMax + 1)); err == nil {
		t.Error("Restore of a claim past StateBytesMax accepted")
	}
}
