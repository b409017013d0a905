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
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
)

// fakeExec is an in-memory Executor that counts restores. With voteTo
// set, it sends one application payload to voteTo per delivery, and keeps
// what it sent by index for Sent.
type fakeExec struct {
	applied  uint64
	ids      []multicast.MsgID
	restores int
	voteTo   partition.GroupID
	sent     map[uint64][]rawnode.AppSend
	executed []uint64 // indexes Execute was called with
}

func (e *fakeExec) Execute(index uint64, ds []multicast.Message, _ []rawnode.AppInbound) ([]rawnode.AppSend, error) {
	e.executed = append(e.executed, index)
	var sends []rawnode.AppSend
	for _, m := range ds {
		e.ids = append(e.ids, m.ID)
		if e.voteTo != 0 {
			sends = append(sends, rawnode.AppSend{To: e.voteTo, About: m.ID, Payload: []byte(m.ID.String())})
		}
	}
	if e.sent == nil {
		e.sent = make(map[uint64][]rawnode.AppSend)
	}
	e.sent[index] = sends
	e.applied = index
	return sends, nil
}
func (e *fakeExec) Sent(index uint64) ([]rawnode.AppSend, error) { return e.sent[index], nil }
func (e *fakeExec) ForgetSent(index uint64) error {
	for i := range e.sent { //flexkv:unordered deleting every match is order-free
		if i <= index {
			delete(e.sent, i)
		}
	}
	return nil
}
func (e *fakeExec) AppliedIndex() uint64 { return e.applied }
func (e *fakeExec) Sync() error          { return nil }
func (e *fakeExec) Snapshot() (ExecutorSnapshot, error) {
	return fakeExecSnap{n: len(e.ids)}, nil
}
func (e *fakeExec) RestoreSnapshot(r io.Reader, index uint64) error {
	e.restores++
	e.applied = index
	_, err := io.Copy(io.Discard, r)
	return err
}

type fakeExecSnap struct{ n int }

func (s fakeExecSnap) WriteTo(w io.Writer) (int64, error) {
	k, err := w.Write([]byte{byte(s.n)})
	return int64(k), err
}
func (fakeExecSnap) Release() {}

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
	exec := &fakeExec{}
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
	if exec.applied != 1 {
		t.Fatalf("executor at %d, want 1 (only entry 1 delivers)", exec.applied)
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
		wantRestores int
	}{
		{"current executor kept", 1, 0},
		{"executor behind restored", 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := &fakeExec{applied: tc.execApplied}
			g, err := newFSM(cfg, x, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
				t.Fatal(err)
			}
			if x.restores != tc.wantRestores {
				t.Fatalf("executor restores: got %d, want %d", x.restores, tc.wantRestores)
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
	ref := &fakeExec{voteTo: 1}
	a, err := newFSM(cfg, ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.ApplyBatch(logs)
	// The restarted replica: a snapshot after entry 2, an executor that had
	// applied up to entry 5 when it stopped.
	b, err := newFSM(cfg, &fakeExec{voteTo: 1}, nil)
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
	ahead := &fakeExec{voteTo: 1}
	ahead.applied = 5
	ahead.sent = map[uint64][]rawnode.AppSend{}
	for i := uint64(3); i <= 5; i++ {
		ahead.sent[i] = ref.sent[i]
	}
	c, err := newFSM(cfg, ahead, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	c.ApplyBatch(logs[2:])
	if diff := cmp.Diff([]uint64{6}, ahead.executed); diff != "" {
		t.Errorf("entries executed after the restart (-want +got):\n%s", diff)
	}
	if !bytes.Equal(a.m.State().AppendSnapshot(nil), c.m.State().AppendSnapshot(nil)) {
		t.Errorf("the restarted replica's state differs from the reference's")
	}
	if got, want := c.m.State().Node().OutboxLen(1), 6; got != want {
		t.Errorf("outbox to group 1 holds %d votes, want %d", got, want)
	}
	// Without the replayed sends the states would differ: the check above
	// can fail.
	d, err := newFSM(cfg, &fakeExec{applied: 5}, nil)
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
	f, err := newFSM(cfg, &fakeExec{}, nil)
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
