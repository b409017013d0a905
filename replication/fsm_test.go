package replication

import (
	"bytes"
	"io"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// fakeExec is an in-memory Executor that counts restores.
type fakeExec struct {
	applied  uint64
	ids      []multicast.MsgID
	restores int
}

func (e *fakeExec) Execute(index uint64, ds []multicast.Message) error {
	for _, m := range ds {
		e.ids = append(e.ids, m.ID)
	}
	e.applied = index
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
	cfg := StateConfig{Protocol: multicast.FlexCast, Topology: top, Self: 0}
	exec := &fakeExec{}
	f, err := newFSM(cfg, exec, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := multicast.Message{ID: multicast.MsgID{Client: 1, Seq: 1}, Dst: partition.SetOf(0)}
	logs := []*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: EncodeRequest(m)},
		{Index: 2, Type: raft.LogCommand, Data: EncodeTick()},
		{Index: 3, Type: raft.LogCommand, Data: EncodeTick()},
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
			if got := g.state.Applied(); got != 3 {
				t.Fatalf("state applied: got %d, want 3", got)
			}
		})
	}
}
